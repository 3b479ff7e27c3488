// softnic/cm_wire: messages, inboxes and port files of softnic's
// connection manager.  See cm_wire.h.
#include "softnic/cm_wire.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "core/report.h"
#include "softnic/internal.h"

namespace rdmasan::softnic::cm {

namespace {

constexpr uint32_t kPortMagic = 0x50435253u;  // "SRCP"

// An inbox name: <pid>.<seq>.<16 hex>, digits, dots and hex only.
bool ValidInboxName(const char* s, size_t cap) {
  const size_t n = strnlen(s, cap);
  if (n == 0 || n == cap) return false;
  for (size_t i = 0; i < n; ++i) {
    const char c = s[i];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || c == '.')) return false;
  }
  return true;
}

bool ValidAddr(const sockaddr_in6& a) {
  return a.sin6_family == AF_INET || a.sin6_family == AF_INET6 || a.sin6_family == AF_UNSPEC;
}

bool SockAddr(const std::string& folder, const std::string& name, sockaddr_un* sa, socklen_t* len) {
  *sa = {};
  sa->sun_family = AF_UNIX;
  const std::string path = absl::StrCat(folder, "/", name);
  if (path.size() >= sizeof(sa->sun_path)) {
    errno = ENAMETOOLONG;
    return false;
  }
  memcpy(sa->sun_path, path.data(), path.size());
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + path.size() + 1);
  return true;
}

std::string PortPath(const std::string& folder, uint16_t ps, uint16_t port) {
  return absl::StrCat(folder, "/p", ps, "-", port);
}

void SleepMs(long ms) {
  timespec ts{ms / 1000, (ms % 1000) * 1000000L};
  nanosleep(&ts, nullptr);
}

}  // namespace

bool ValidMsg(const Msg& m, size_t len) {
  if (len != sizeof(Msg)) return false;
  if (m.magic != kMsgMagic || m.version != kMsgVersion) return false;
  if (m.type < static_cast<uint16_t>(MsgType::kReq) || m.type > static_cast<uint16_t>(MsgType::kLast))
    return false;
  if (!ValidInboxName(m.reply_to, sizeof(m.reply_to))) return false;
  static_assert(sizeof(m.private_data_len) == 1 && kMaxPrivate > 255, "any length fits private_data");
  if (m.qpn > 0xffffff || m.psn > 0xffffff) return false;
  return ValidAddr(m.src_addr) && ValidAddr(m.dst_addr);
}

const std::string& Folder(const std::string& fabric) {
  static std::mutex mu;
  static std::string* cached_fabric = new std::string();
  static std::string* cached = new std::string();
  static bool warned = false;
  std::lock_guard<std::mutex> g(mu);
  // Made again when its last channel removed it (cm.cc's CloseChannel).
  if (!cached->empty() && *cached_fabric == fabric && (mkdir(cached->c_str(), 0700) == 0 || errno == EEXIST))
    return *cached;
  std::string base;
  if (!UserPrivateDir(&base)) {
    cached->clear();
    return *cached;
  }
  // Long fabric names are hashed so an inbox's path fits sun_path.
  std::string leaf = fabric;
  if (leaf.size() > 24) {
    uint64_t h = 1469598103934665603ull;
    for (unsigned char c : fabric) h = (h ^ c) * 1099511628211ull;
    char hex[17];
    snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(h));
    leaf = absl::StrCat(fabric.substr(0, 7), "-", hex);
  }
  std::string dir = absl::StrCat(base, "/cm-", leaf);
  if (mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    if (!warned) core::Diag(absl::StrCat("softnic: rdma_cm: cannot create ", dir, ": ", strerror(errno)));
    warned = true;
    cached->clear();
    return *cached;
  }
  struct stat st;
  if (lstat(dir.c_str(), &st) != 0 || !IsPrivate(st, S_IFDIR)) {
    if (!warned)
      core::Diag(absl::StrCat("softnic: rdma_cm: ", dir,
                              " is not this user's private directory; rdma_cm is "
                              "unavailable: remove it"));
    warned = true;
    cached->clear();
    return *cached;
  }
  *cached_fabric = fabric;
  *cached = dir;
  return *cached;
}

int MakeInbox(const std::string& folder, std::string* name) {
  static std::atomic<uint32_t> seq{0};
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  for (int attempt = 0; attempt < 8; ++attempt) {
    uint64_t r = 0;
    if (getrandom(&r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r)))
      r = static_cast<uint64_t>(time(nullptr)) ^ attempt;
    char buf[kNameLen];
    snprintf(buf, sizeof(buf), "%u.%u.%016llx", static_cast<unsigned>(getpid()), seq.fetch_add(1),
             static_cast<unsigned long long>(r));
    sockaddr_un sa;
    socklen_t len;
    if (!SockAddr(folder, buf, &sa, &len)) break;
    if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) == 0) {
      *name = buf;
      return fd;
    }
    if (errno != EADDRINUSE) break;
  }
  const int err = errno;
  close(fd);
  errno = err;
  return -1;
}

int SendMsg(const std::string& folder, const std::string& name, const Msg& m) {
  static int out = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (out < 0) return errno ? errno : EIO;
  sockaddr_un sa;
  socklen_t len;
  if (!SockAddr(folder, name, &sa, &len)) return errno;
  for (int waited = 0;; ++waited) {
    if (sendto(out, &m, sizeof(m), MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&sa), len) ==
        static_cast<ssize_t>(sizeof(m)))
      return 0;
    if (errno == EINTR) continue;
    if (errno != EAGAIN || waited >= 1000) return errno;
    SleepMs(1);  // the receiver's queue is full: it reads when its program asks for an event
  }
}

int ReservePort(const std::string& folder, uint16_t ps, uint16_t port, const PortRecord& rec) {
  const std::string path = PortPath(folder, ps, port);
  for (int attempt = 0; attempt < 3; ++attempt) {
    int fd = open(path.c_str(), O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd >= 0) {
      if (flock(fd, LOCK_EX) != 0 || pwrite(fd, &rec, sizeof(rec), 0) != static_cast<ssize_t>(sizeof(rec))) {
        const int err = errno;
        unlink(path.c_str());
        close(fd);
        errno = err;
        return -1;
      }
      return fd;
    }
    if (errno != EEXIST) return -1;
    // Held by a live process, or left by a dead one (nobody holds its lock).
    fd = open(path.c_str(), O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
      if (errno == ENOENT) continue;
      return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !IsPrivate(st, S_IFREG)) {
      close(fd);
      errno = EADDRINUSE;
      return -1;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
      close(fd);
      errno = EADDRINUSE;
      return -1;
    }
    // Unheld.  A record not yet written is a reservation being made (its
    // maker takes the lock right after creating it) unless it is old.
    if (st.st_size < static_cast<off_t>(sizeof(PortRecord)) && time(nullptr) - st.st_mtime < 10) {
      close(fd);
      errno = EADDRINUSE;
      return -1;
    }
    struct stat now;
    if (stat(path.c_str(), &now) == 0 && now.st_ino == st.st_ino && now.st_dev == st.st_dev)
      unlink(path.c_str());
    close(fd);
  }
  errno = EADDRINUSE;
  return -1;
}

void UpdatePort(int fd, const PortRecord& rec) {
  if (pwrite(fd, &rec, sizeof(rec), 0) != static_cast<ssize_t>(sizeof(rec))) {
    // The record stays as it was: peers reach the id's former inbox, which
    // forwards while it exists.
  }
}

void ReleasePort(const std::string& folder, uint16_t ps, uint16_t port, int fd) {
  const std::string path = PortPath(folder, ps, port);
  struct stat mine, now;
  if (fstat(fd, &mine) == 0 && stat(path.c_str(), &now) == 0 && mine.st_ino == now.st_ino &&
      mine.st_dev == now.st_dev)
    unlink(path.c_str());
  close(fd);
}

bool LookupPort(const std::string& folder, uint16_t ps, uint16_t port, PortRecord* rec) {
  const std::string path = PortPath(folder, ps, port);
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && IsPrivate(st, S_IFREG) &&
            pread(fd, rec, sizeof(*rec), 0) == static_cast<ssize_t>(sizeof(*rec)) &&
            rec->magic == kPortMagic && ValidInboxName(rec->inbox, sizeof(rec->inbox)) && rec->listening <= 1;
  // Alive only while its owner holds the lock.
  if (ok && flock(fd, LOCK_SH | LOCK_NB) == 0) ok = false;
  close(fd);
  return ok;
}

PortRecord MakePortRecord(uint32_t handle, bool listening, const std::string& inbox) {
  PortRecord r{};
  r.magic = kPortMagic;
  r.pid = static_cast<uint32_t>(getpid());
  r.handle = handle;
  r.listening = listening ? 1 : 0;
  snprintf(r.inbox, sizeof(r.inbox), "%s", inbox.c_str());
  return r;
}

}  // namespace rdmasan::softnic::cm
