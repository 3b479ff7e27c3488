// softnic/cm: the emulated rdma_cm device's fd entry points (cm.h): open a
// channel, a command written to it, fstat, close.  The connection manager
// itself is in rooms by concern: cm_address (address maths), cm_abi (the
// rdma_ucm ABI), cm_state (the books and the machine's steps),
// cm_commands (one handler per command), cm_receive (the peers' messages
// and GET_EVENT), cm_wire (messages and names between processes).
//
// Every id lives in this process's table under one lock.  A command runs
// under the lock and collects the messages it must send; they leave after
// the lock is dropped (a send may wait for a full inbox), and a send that
// fails turns into the event the kernel would give (UNREACHABLE for a
// connect, DISCONNECTED for a disconnect).  GET_EVENT first retries the
// connects that wait for a listener (cm_state.h), delivers the channel's
// queued events, then reads its inbox (without the lock), turns each
// message into state and events, and blocks in epoll_wait only when the
// channel is blocking and both are empty.
#include "softnic/cm.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/sysmacros.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstring>
#include <mutex>
#include <string>

#include "core/options.h"
#include "softnic/cm_state.h"
#include "softnic/cm_wire.h"
#include "softnic/leftovers.h"

namespace rdmasan::softnic::cm {

std::atomic<int> g_open_channels{0};

namespace {

// Which fds are channels: a byte per fd (a channel is never above
// kMaxMarked: Open refuses one with EMFILE).
constexpr int kMaxMarked = 1 << 16;
std::atomic<uint8_t> g_marked[kMaxMarked];

}  // namespace

void MarkChannel(int fd, bool channel) {
  if (fd >= 0 && fd < kMaxMarked) g_marked[fd].store(channel ? 1 : 0, std::memory_order_release);
  if (channel)
    g_open_channels.fetch_add(1, std::memory_order_relaxed);
  else
    g_open_channels.fetch_sub(1, std::memory_order_relaxed);
}

bool IsChannelSlow(int fd) {
  // No lock: close() of the channel's own sockets comes here with it held.
  return fd >= 0 && fd < kMaxMarked && g_marked[fd].load(std::memory_order_acquire) != 0;
}

int Open(int flags) {
  CmTable& s = Table();
  const std::string& fabric = rdmasan::core::GlobalOptions().softnic_fabric;
  const std::string folder_fabric = fabric == "inproc" ? "inproc-" + std::to_string(getpid()) : fabric;
  std::string folder = Folder(folder_fabric);
  if (folder.empty()) {
    errno = ENODEV;
    return -1;
  }
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (!s.swept) SweepCmFolder(folder);
    s.swept = true;
    s.folder = folder;
  }
  Channel c;
  c.inbox = MakeInbox(folder, &c.name);
  if (c.inbox < 0 && errno == ENOENT) {
    // Another process's last channel of this fabric just removed the folder.
    folder = Folder(folder_fabric);
    c.inbox = folder.empty() ? -1 : MakeInbox(folder, &c.name);
  }
  if (c.inbox < 0) return -1;
  c.efd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
  c.tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  c.fd = epoll_create1((flags & O_CLOEXEC) ? EPOLL_CLOEXEC : 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  bool ok = c.efd >= 0 && c.tfd >= 0 && c.fd >= 0;
  if (ok) {
    ev.data.fd = c.inbox;
    ok = epoll_ctl(c.fd, EPOLL_CTL_ADD, c.inbox, &ev) == 0;
  }
  if (ok) {
    ev.data.fd = c.efd;
    ok = epoll_ctl(c.fd, EPOLL_CTL_ADD, c.efd, &ev) == 0;
  }
  if (ok) {
    ev.data.fd = c.tfd;
    ok = epoll_ctl(c.fd, EPOLL_CTL_ADD, c.tfd, &ev) == 0;
  }
  if (ok && (flags & O_NONBLOCK)) ok = fcntl(c.fd, F_SETFL, O_NONBLOCK) == 0;
  if (ok && c.fd >= kMaxMarked) {
    ok = false;  // beyond the fd table of IsChannel
    errno = EMFILE;
  }
  if (!ok) {
    const int err = errno;
    if (c.fd >= 0) close(c.fd);
    if (c.efd >= 0) close(c.efd);
    if (c.tfd >= 0) close(c.tfd);
    close(c.inbox);
    unlink((folder + "/" + c.name).c_str());
    errno = err;
    return -1;
  }
  const int fd = c.fd;
  std::lock_guard<std::mutex> l(s.mu);
  s.chan_by_name[c.name] = fd;
  s.chans.emplace(fd, std::move(c));
  MarkChannel(fd, true);
  return fd;
}

ssize_t Write(int fd, const void* buf, size_t len) {
  ConnectionManager cm;
  return cm.Command(fd, buf, len);
}

void Stat(int fd, struct stat* st) {
  (void)fd;
  // The kernel's node, where it exists; otherwise a misc device number.
  struct stat real;
  const dev_t rdev = stat(kDevicePath, &real) == 0 && S_ISCHR(real.st_mode) ? real.st_rdev : makedev(10, 58);
  memset(st, 0, sizeof(*st));
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = rdev;
  st->st_nlink = 1;
  st->st_blksize = 4096;
}

void Close(int fd) {
  ConnectionManager cm;
  cm.CloseChannel(fd);
}

}  // namespace rdmasan::softnic::cm
