#include "core/own_fd.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <climits>
#include <cstdint>

namespace rdmasan::core {
namespace {

// One recorded descriptor: fd + 1 (0: a free slot), published after the
// identity of its file.
struct Slot {
  std::atomic<int> fd1{0};
  std::atomic<uint64_t> dev{0}, ino{0};
};
constexpr int kSlots = 16;
Slot g_slots[kSlots];
// No descriptor below this is ours: the fast answer of IsOwnFd.
std::atomic<int> g_lowest{INT_MAX};

constexpr int kReserved = 64;
constexpr rlim_t kCap = 65536;

bool Identity(int fd, uint64_t* dev, uint64_t* ino) {
  struct stat st;
  if (fstat(fd, &st) != 0) return false;
  *dev = static_cast<uint64_t>(st.st_dev);
  *ino = static_cast<uint64_t>(st.st_ino);
  return true;
}

void Record(const OwnFd& f) {
  for (Slot& s : g_slots) {
    int expected = 0;  // claimed as -1 (matches no fd) while its file is filled in
    if (!s.fd1.compare_exchange_strong(expected, -1, std::memory_order_acquire)) continue;
    s.dev.store(f.dev, std::memory_order_relaxed);
    s.ino.store(f.ino, std::memory_order_relaxed);
    s.fd1.store(f.fd + 1, std::memory_order_release);
    int low = g_lowest.load(std::memory_order_relaxed);
    while (f.fd < low && !g_lowest.compare_exchange_weak(low, f.fd, std::memory_order_relaxed)) {}
    return;
  }
  // More than kSlots at once: unprotected, still written.
}

void Forget(const OwnFd& f) {
  for (Slot& s : g_slots) {
    int fd1 = f.fd + 1;
    if (s.fd1.load(std::memory_order_acquire) != fd1 || s.dev.load(std::memory_order_relaxed) != f.dev ||
        s.ino.load(std::memory_order_relaxed) != f.ino)
      continue;
    if (s.fd1.compare_exchange_strong(fd1, 0, std::memory_order_acq_rel)) return;
  }
}

bool Names(const OwnFd& f) {
  uint64_t dev, ino;
  return Identity(f.fd, &dev, &ino) && dev == f.dev && ino == f.ino;
}

}  // namespace

int OwnFdBase() {
  struct rlimit rl;
  rlim_t limit = getrlimit(RLIMIT_NOFILE, &rl) == 0 ? rl.rlim_cur : 1024;
  if (limit == RLIM_INFINITY || limit > kCap) limit = kCap;
  const int n = static_cast<int>(limit);
  return n > 2 * kReserved ? n - kReserved : n / 2;
}

OwnFd AdoptFd(int fd) {
  OwnFd f;
  if (fd < 0) return f;
  const int moved = fcntl(fd, F_DUPFD_CLOEXEC, OwnFdBase());
  if (moved >= 0) {
    close(fd);  // not recorded yet: the close hook lets it pass
    fd = moved;
  }
  f.fd = fd;
  (void)Identity(fd, &f.dev, &f.ino);
  Record(f);
  return f;
}

void ForgetOwnFd(OwnFd* f) {
  if (f->fd < 0) return;
  Forget(*f);
  f->fd = -1;
}

void CloseOwnFd(OwnFd* f) {
  if (f->fd < 0) return;
  const int fd = f->fd;
  const bool ours = Names(*f);
  ForgetOwnFd(f);
  if (ours) close(fd);
}

bool IsOwnFd(int fd) {
  if (fd < g_lowest.load(std::memory_order_relaxed)) return false;
  for (const Slot& s : g_slots)
    if (s.fd1.load(std::memory_order_relaxed) == fd + 1) return true;
  return false;
}

int OwnFds(int* out, int max) {
  int n = 0;
  for (const Slot& s : g_slots) {
    const int fd = s.fd1.load(std::memory_order_acquire) - 1;
    if (fd < 0 || n >= max) continue;
    int i = n++;
    for (; i > 0 && out[i - 1] > fd; --i) out[i] = out[i - 1];
    out[i] = fd;
  }
  return n;
}

bool CheckOwnFd(OwnFd* f, const std::string& path) {
  if (f->fd < 0) return false;
  if (Names(*f)) return true;
  // The number names something else now (or nothing): it is not ours to
  // close.  Our file, if it is still there, is reopened at its end.
  const uint64_t dev = f->dev, ino = f->ino;
  ForgetOwnFd(f);
  int again = open(path.c_str(), O_WRONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
  uint64_t d, i;
  if (again >= 0 && (!Identity(again, &d, &i) || d != dev || i != ino || lseek(again, 0, SEEK_END) < 0)) {
    close(again);
    again = -1;
  }
  if (again < 0) {
    errno = EBADF;
    return false;
  }
  *f = AdoptFd(again);
  return f->fd >= 0;
}

}  // namespace rdmasan::core
