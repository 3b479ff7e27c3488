// The rdma_cm device, in the preloaded library only: when softnic is the
// device the program sees (interpose::SoftnicListed), an open of
// /dev/infiniband/rdma_cm gives softnic's emulated device (softnic/cm.h)
// and its writes, fstats and closes go there; librdmacm itself runs
// unmodified on top, and its verbs calls are checked as the program's.
// Otherwise every call passes straight to libc.
//
// Cost for other files: open compares the path with one string; write,
// close and fstat load one relaxed counter while no channel is open (a
// byte-per-fd table otherwise).  May not: change the result of a call on
// any other fd or path, or allocate before the real call.
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "interpose/interpose.h"
#include "softnic/cm.h"

namespace cm = rdmasan::softnic::cm;
namespace ip = rdmasan::interpose;

#define RDMASAN_HOOK extern "C" __attribute__((visibility("default")))

namespace {

template <typename Fn>
Fn Next(const char* name) {
  return reinterpret_cast<Fn>(dlsym(RTLD_NEXT, name));
}

bool IsCmPath(const char* path) {
  // "/dev/infiniband/rdma_cm": the first bytes tell almost every path apart.
  return path && path[0] == '/' && path[1] == 'd' && strcmp(path, cm::kDevicePath) == 0 && ip::SoftnicListed();
}

mode_t ModeArg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

}  // namespace

RDMASAN_HOOK int open(const char* path, int flags, ...) {
  static const auto real = Next<int (*)(const char*, int, ...)>("open");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  if (IsCmPath(path)) return cm::Open(flags);
  return real(path, flags, mode);
}

RDMASAN_HOOK int open64(const char* path, int flags, ...) {
  static const auto real = Next<int (*)(const char*, int, ...)>("open64");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  if (IsCmPath(path)) return cm::Open(flags);
  return real(path, flags, mode);
}

RDMASAN_HOOK int __open_2(const char* path, int flags) {
  static const auto real = Next<int (*)(const char*, int)>("__open_2");
  if (IsCmPath(path)) return cm::Open(flags);
  return real(path, flags);
}

RDMASAN_HOOK int __open64_2(const char* path, int flags) {
  static const auto real = Next<int (*)(const char*, int)>("__open64_2");
  if (IsCmPath(path)) return cm::Open(flags);
  return real(path, flags);
}

RDMASAN_HOOK int openat(int dirfd, const char* path, int flags, ...) {
  static const auto real = Next<int (*)(int, const char*, int, ...)>("openat");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  if (IsCmPath(path)) return cm::Open(flags);
  return real(dirfd, path, flags, mode);
}

RDMASAN_HOOK int openat64(int dirfd, const char* path, int flags, ...) {
  static const auto real = Next<int (*)(int, const char*, int, ...)>("openat64");
  va_list ap;
  va_start(ap, flags);
  const mode_t mode = ModeArg(flags, ap);
  va_end(ap);
  if (IsCmPath(path)) return cm::Open(flags);
  return real(dirfd, path, flags, mode);
}

RDMASAN_HOOK ssize_t write(int fd, const void* buf, size_t n) {
  static const auto real = Next<ssize_t (*)(int, const void*, size_t)>("write");
  if (__builtin_expect(cm::IsChannel(fd), 0)) return cm::Write(fd, buf, n);
  return real(fd, buf, n);
}

RDMASAN_HOOK int close(int fd) {
  static const auto real = Next<int (*)(int)>("close");
  if (__builtin_expect(cm::IsChannel(fd), 0)) cm::Close(fd);
  return real(fd);
}

RDMASAN_HOOK int fstat(int fd, struct stat* st) {
  static const auto real = Next<int (*)(int, struct stat*)>("fstat");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, st);
    return 0;
  }
  return real(fd, st);
}

RDMASAN_HOOK int fstat64(int fd, struct stat64* st) {
  static const auto real = Next<int (*)(int, struct stat64*)>("fstat64");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, reinterpret_cast<struct stat*>(st));
    return 0;
  }
  return real(fd, st);
}

// Programs built against glibc before 2.33 call these.
RDMASAN_HOOK int __fxstat(int ver, int fd, struct stat* st) {
  static const auto real = Next<int (*)(int, int, struct stat*)>("__fxstat");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, st);
    return 0;
  }
  return real ? real(ver, fd, st) : (errno = ENOSYS, -1);
}

RDMASAN_HOOK int __fxstat64(int ver, int fd, struct stat64* st) {
  static const auto real = Next<int (*)(int, int, struct stat64*)>("__fxstat64");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, reinterpret_cast<struct stat*>(st));
    return 0;
  }
  return real ? real(ver, fd, st) : (errno = ENOSYS, -1);
}
