// The program's descriptor sweeps, in the preloaded library only: dup2,
// dup3, close_range and closefrom never close or replace a descriptor of
// ours (core/own_fd.h; close is in fs_hooks.cc): dup2/dup3 onto one fail
// with EBADF, as valgrind answers for its own; a range is closed around
// them.  Every other call passes to libc unchanged.
// May not: allocate, or change the result of a call that names none of
// ours (one relaxed load tells them apart).
#include <errno.h>
#include <linux/close_range.h>
#include <unistd.h>

#include <climits>

#include "core/own_fd.h"
#include "interpose/loader.h"

namespace core = rdmasan::core;
namespace ip = rdmasan::interpose;

#define RDMASAN_HOOK extern "C" __attribute__((visibility("default")))

namespace {

using CloseRangeFn = int (*)(unsigned, unsigned, int);

// close_range over [first, last] less our descriptors.
int CloseRangeAround(CloseRangeFn real, unsigned first, unsigned last, int flags) {
  int own[16];
  const int n = core::OwnFds(own, 16);
  unsigned from = first;
  for (int i = 0; i < n; ++i) {
    const unsigned fd = static_cast<unsigned>(own[i]);
    if (fd < from || fd > last) continue;
    if (fd > from && real(from, fd - 1, flags) != 0) return -1;
    if (fd == UINT_MAX) return 0;
    from = fd + 1;
  }
  return from <= last ? real(from, last, flags) : 0;
}

}  // namespace

RDMASAN_HOOK int dup2(int oldfd, int newfd) {
  static constinit ip::NextSym<int (*)(int, int)> real("dup2");
  if (__builtin_expect(oldfd != newfd && core::IsOwnFd(newfd), 0)) {
    errno = EBADF;
    return -1;
  }
  return real(oldfd, newfd);
}

RDMASAN_HOOK int dup3(int oldfd, int newfd, int flags) {
  static constinit ip::NextSym<int (*)(int, int, int)> real("dup3");
  if (__builtin_expect(core::IsOwnFd(newfd), 0)) {
    errno = EBADF;
    return -1;
  }
  return real(oldfd, newfd, flags);
}

RDMASAN_HOOK int close_range(unsigned first, unsigned last, int flags) {
  static constinit ip::NextSym<CloseRangeFn> real("close_range");
  if (!real) {
    errno = ENOSYS;
    return -1;
  }
  // Marking ours close-on-exec changes nothing: they are.
  if (first > last || (flags & CLOSE_RANGE_CLOEXEC)) return real(first, last, flags);
  return CloseRangeAround(real.Get(), first, last, flags);
}

RDMASAN_HOOK void closefrom(int lowfd) {
  static constinit ip::NextSym<void (*)(int)> real_from("closefrom");
  static constinit ip::NextSym<CloseRangeFn> real_range("close_range");
  int own[16];
  bool ours_above = false;
  for (int i = 0, n = core::OwnFds(own, 16); i < n; ++i) ours_above |= own[i] >= lowfd;
  if (!ours_above || !real_range) {
    if (real_from) real_from(lowfd);
    return;
  }
  (void)CloseRangeAround(real_range.Get(), static_cast<unsigned>(lowfd < 0 ? 0 : lowfd), UINT_MAX, 0);
}
