// softnic/leftovers: sweeping what ended processes left behind, and
// removing the fabric file at a fatal signal.  See leftovers.h.
#include "softnic/leftovers.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/options.h"
#include "softnic/cm_wire.h"
#include "softnic/softnic.h"
#include "softnic/user_dir.h"

namespace rdmasan::softnic {
namespace {

bool SameFile(const struct stat& a, const struct stat& b) {
  return a.st_dev == b.st_dev && a.st_ino == b.st_ino;
}

// Whether a unix datagram socket is bound at `path`: a connect to a socket
// file whose socket is closed is refused, whoever made it.
bool SocketBound(const std::string& path) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  if (path.size() >= sizeof(sa.sun_path)) return true;  // cannot tell: keep it
  memcpy(sa.sun_path, path.data(), path.size());
  const int s = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (s < 0) return true;
  const bool refused = connect(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0 && errno == ECONNREFUSED;
  close(s);
  return !refused;
}

// Unlinks `name` in `dfd` if it still is the file `held` (opened, checked
// and locked by the caller): never a name someone replaced meanwhile.
void UnlinkIfSame(int dfd, const char* name, const struct stat& held) {
  struct stat named;
  if (fstatat(dfd, name, &named, AT_SYMLINK_NOFOLLOW) == 0 && SameFile(named, held)) unlinkat(dfd, name, 0);
}

// A regular file of ours that nobody holds a flock on (LOCK_EX taken at
// once), of at least `min_size` bytes or older than 10 s (a port file's
// maker locks it right after creating it, then writes its record).
void UnlinkIfUnheld(int dfd, const char* name, off_t min_size) {
  const int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return;
  struct stat st;
  if (fstat(fd, &st) == 0 && IsPrivate(st, S_IFREG) &&
      (st.st_size >= min_size || time(nullptr) - st.st_mtime >= 10) && flock(fd, LOCK_EX | LOCK_NB) == 0)
    UnlinkIfSame(dfd, name, st);
  close(fd);
}

// The fabric files of this process, for CleanUpAtFatalSignal: plain data
// written before `state` says kInUse (zero-initialized, usable from the
// first instruction).
enum : int { kFree = 0, kFilling, kInUse, kRemoving };
struct FileSlot {
  std::atomic<int> state;
  int fd;
  pid_t owner;
  dev_t dev;
  ino_t ino;
  char path[PATH_MAX];
};
constexpr int kMaxFiles = 8;
FileSlot g_files[kMaxFiles];

std::atomic<bool> g_termination_handled{false};

void OnTerminationSignal(int sig) {
  const int saved_errno = errno;
  CleanUpAtFatalSignal();
  // SA_RESETHAND put the default action back; the signal is blocked in
  // here, so it lands, and ends the process, when the handler returns.
  raise(sig);
  errno = saved_errno;
}

}  // namespace

void SweepStaleFabrics(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  const size_t n = strlen(kFabricFilePrefix);
  while (const dirent* e = readdir(d))
    if (strncmp(e->d_name, kFabricFilePrefix, n) == 0) UnlinkIfUnheld(dirfd(d), e->d_name, 0);
  closedir(d);
}

void SweepCmFolder(const std::string& folder) {
  DIR* d = opendir(folder.c_str());
  if (!d) return;
  const int dfd = dirfd(d);
  while (const dirent* e = readdir(d)) {
    const char* n = e->d_name;
    struct stat st;
    if (n[0] >= '1' && n[0] <= '9') {  // an inbox: <pid>.<seq>.<hex>
      // Bound under the umask (the private folder keeps others out): its
      // own mode says nothing.
      if (fstatat(dfd, n, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISSOCK(st.st_mode) && st.st_uid == geteuid() &&
          !SocketBound(absl::StrCat(folder, "/", n)))
        UnlinkIfSame(dfd, n, st);
    } else if (n[0] == 'p') {  // a port file: p<ps>-<port>
      UnlinkIfUnheld(dfd, n, sizeof(cm::PortRecord));
    }
  }
  closedir(d);
}

void SweepLeftovers(const std::string& dir) {
  SweepStaleFabrics(dir);
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  const int dfd = dirfd(d);
  while (const dirent* e = readdir(d)) {
    struct stat st;
    if (strncmp(e->d_name, "cm-", 3) != 0 || fstatat(dfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 ||
        !IsPrivate(st, S_IFDIR))
      continue;
    SweepCmFolder(absl::StrCat(dir, "/", e->d_name));
    unlinkat(dfd, e->d_name, AT_REMOVEDIR);  // only if empty
  }
  closedir(d);
}

int RememberFabricFile(int fd, const std::string& path) {
  struct stat st;
  if (path.size() >= PATH_MAX || fstat(fd, &st) != 0) return -1;
  for (int i = 0; i < kMaxFiles; ++i) {
    int free_state = kFree;
    if (!g_files[i].state.compare_exchange_strong(free_state, kFilling, std::memory_order_acquire)) continue;
    FileSlot& s = g_files[i];
    s.fd = fd;
    s.owner = getpid();
    s.dev = st.st_dev;
    s.ino = st.st_ino;
    memcpy(s.path, path.c_str(), path.size() + 1);
    s.state.store(kInUse, std::memory_order_release);
    return i;
  }
  return -1;
}

void ForgetFabricFile(int handle) {
  if (handle >= 0 && handle < kMaxFiles) g_files[handle].state.store(kFree, std::memory_order_release);
}

void CleanUpAtFatalSignal() {
  const pid_t me = getpid();
  for (FileSlot& s : g_files) {
    int in_use = kInUse;
    if (!s.state.compare_exchange_strong(in_use, kRemoving, std::memory_order_acquire)) continue;
    // A forked child's copy of the table names its parent's file.
    if (s.owner != me) {
      s.state.store(kInUse, std::memory_order_release);
      continue;
    }
    // As Fabric::RemoveFileIfLast: drop the shared lock, and whoever then
    // gets the exclusive one is the last user.  The fd is kept: another
    // thread may still be using the mapping until the signal ends us.
    struct stat held, named;
    flock(s.fd, LOCK_UN);
    if (flock(s.fd, LOCK_EX | LOCK_NB) == 0 && fstat(s.fd, &held) == 0 && held.st_dev == s.dev &&
        held.st_ino == s.ino && lstat(s.path, &named) == 0 && SameFile(named, held))
      unlink(s.path);
  }
}

bool IsOwnTerminationHandler(const struct sigaction& action) {
  return !(action.sa_flags & SA_SIGINFO) && action.sa_handler == OnTerminationSignal;
}

void CleanUpAtTermination() {
  // With the hang check on, the interposer handles these signals (and
  // calls CleanUpAtFatalSignal); it takes only those left at the default.
  if (core::GlobalOptions().hang_timeout > 0 || g_termination_handled.exchange(true)) return;
  for (int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old;
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO))
      continue;
    struct sigaction sa = {};
    sa.sa_handler = OnTerminationSignal;
    sa.sa_flags = SA_RESETHAND | SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

}  // namespace rdmasan::softnic
