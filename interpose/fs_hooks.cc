// softnic's device files, in the preloaded library only, while softnic is
// the device the program sees (interpose::SoftnicListed):
//  - an open of /dev/infiniband/rdma_cm gives softnic's emulated rdma_cm
//    device (softnic/cm.h) and its writes, fstats and closes go there;
//    librdmacm itself runs unmodified on top, and its verbs calls are
//    checked as the program's;
//  - the path-taking calls (open, stat and its variants, access, opendir,
//    fopen, readlink, realpath) see softnic0's device nodes and sysfs
//    entries (devfs.h).
// Otherwise every call passes straight to libc.
//
// Cost for other files: a path is told apart by its first two bytes
// (/s, /d) and a prefix compare; write, close and fstat load one relaxed
// counter while no rdma_cm channel is open (a byte-per-fd table otherwise).
// May not: change the result of a call on any other fd or path, or
// allocate before the real call.
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "core/own_fd.h"
#include "interpose/devfs.h"
#include "interpose/interpose.h"
#include "interpose/loader.h"
#include "softnic/cm.h"

namespace cm = rdmasan::softnic::cm;
namespace ip = rdmasan::interpose;
namespace devfs = rdmasan::interpose::devfs;

#define RDMASAN_HOOK extern "C" __attribute__((visibility("default")))

namespace {

bool IsCmPath(const char* path) {
  // "/dev/infiniband/rdma_cm": the first bytes tell almost every path apart.
  return path && path[0] == '/' && path[1] == 'd' && strcmp(path, cm::kDevicePath) == 0 &&
         ip::SoftnicListed();
}

mode_t ModeArg(int flags, va_list ap) {
  return (flags & O_CREAT) || (flags & O_TMPFILE) == O_TMPFILE ? static_cast<mode_t>(va_arg(ap, int)) : 0;
}

// A path the hooks resolve: the program's, or softnic's tree's in buf.
struct Path {
  char buf[PATH_MAX];
  devfs::Kind kind;
  const char* use;
  explicit Path(const char* p)
      : kind(devfs::Map(p, buf, sizeof(buf))), use(kind == devfs::Kind::kTree ? buf : p) {}
  bool node() const { return kind == devfs::Kind::kNode; }
};

// Opening a device node itself: nothing behind it (softnic is reached
// through the verbs, not the node).
int NodeOpen() {
  errno = ENXIO;
  return -1;
}

}  // namespace

// open and its variants: `real` is the next definition; the mode argument
// is read only where the flags say it was passed.
static int OpenPath(const char* path, int flags, int (*real)(const char*, int, ...), int dirfd,
                    int (*real_at)(int, const char*, int, ...), mode_t mode) {
  if (IsCmPath(path)) return cm::Open(flags);
  Path p(path);
  if (p.node()) return NodeOpen();
  return real ? real(p.use, flags, mode) : real_at(dirfd, p.use, flags, mode);
}

#define RDMASAN_OPEN_HOOK(name)                                               \
  RDMASAN_HOOK int name(const char* path, int flags, ...) {                   \
    static constinit ip::NextSym<int (*)(const char*, int, ...)> real(#name); \
    va_list ap;                                                               \
    va_start(ap, flags);                                                      \
    const mode_t mode = ModeArg(flags, ap);                                   \
    va_end(ap);                                                               \
    return OpenPath(path, flags, real.Get(), 0, nullptr, mode);               \
  }
RDMASAN_OPEN_HOOK(open)
RDMASAN_OPEN_HOOK(open64)

#define RDMASAN_OPENAT_HOOK(name)                                                  \
  RDMASAN_HOOK int name(int dirfd, const char* path, int flags, ...) {             \
    static constinit ip::NextSym<int (*)(int, const char*, int, ...)> real(#name); \
    va_list ap;                                                                    \
    va_start(ap, flags);                                                           \
    const mode_t mode = ModeArg(flags, ap);                                        \
    va_end(ap);                                                                    \
    return OpenPath(path, flags, nullptr, dirfd, real.Get(), mode);                \
  }
RDMASAN_OPENAT_HOOK(openat)
RDMASAN_OPENAT_HOOK(openat64)

// The fortified variants (_FORTIFY_SOURCE): no mode, by definition.
#define RDMASAN_OPEN2_HOOK(name)                                         \
  RDMASAN_HOOK int name(const char* path, int flags) {                   \
    static constinit ip::NextSym<int (*)(const char*, int)> real(#name); \
    if (IsCmPath(path)) return cm::Open(flags);                          \
    Path p(path);                                                        \
    if (p.node()) return NodeOpen();                                     \
    return real(p.use, flags);                                           \
  }
RDMASAN_OPEN2_HOOK(__open_2)
RDMASAN_OPEN2_HOOK(__open64_2)

RDMASAN_HOOK ssize_t write(int fd, const void* buf, size_t n) {
  static constinit ip::NextSym<ssize_t (*)(int, const void*, size_t)> real("write");
  if (__builtin_expect(cm::IsChannel(fd), 0)) return cm::Write(fd, buf, n);
  return real(fd, buf, n);
}

RDMASAN_HOOK int close(int fd) {
  static constinit ip::NextSym<int (*)(int)> real("close");
  // rdmasan's own descriptors are not the program's to close (core/own_fd.h).
  if (__builtin_expect(rdmasan::core::IsOwnFd(fd), 0)) {
    errno = EBADF;
    return -1;
  }
  if (__builtin_expect(cm::IsChannel(fd), 0)) cm::Close(fd);
  return real(fd);
}

RDMASAN_HOOK int fstat(int fd, struct stat* st) {
  static constinit ip::NextSym<int (*)(int, struct stat*)> real("fstat");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, st);
    return 0;
  }
  return real(fd, st);
}

RDMASAN_HOOK int fstat64(int fd, struct stat64* st) {
  static constinit ip::NextSym<int (*)(int, struct stat64*)> real("fstat64");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, reinterpret_cast<struct stat*>(st));
    return 0;
  }
  return real(fd, st);
}

// Programs built against glibc before 2.33 call these.
RDMASAN_HOOK int __fxstat(int ver, int fd, struct stat* st) {
  static constinit ip::NextSym<int (*)(int, int, struct stat*)> real("__fxstat");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, st);
    return 0;
  }
  return real ? real(ver, fd, st) : (errno = ENOSYS, -1);
}

RDMASAN_HOOK int __fxstat64(int ver, int fd, struct stat64* st) {
  static constinit ip::NextSym<int (*)(int, int, struct stat64*)> real("__fxstat64");
  if (__builtin_expect(cm::IsChannel(fd), 0)) {
    cm::Stat(fd, reinterpret_cast<struct stat*>(st));
    return 0;
  }
  return real ? real(ver, fd, st) : (errno = ENOSYS, -1);
}

// ------------------------------------------------------ path lookups ------

#define RDMASAN_STAT_HOOK(name, st_type)                                      \
  RDMASAN_HOOK int name(const char* path, st_type* st) {                      \
    static constinit ip::NextSym<int (*)(const char*, st_type*)> real(#name); \
    Path p(path);                                                             \
    if (p.node()) {                                                           \
      devfs::NodeStat(path, reinterpret_cast<struct stat*>(st));              \
      return 0;                                                               \
    }                                                                         \
    return real(p.use, st);                                                   \
  }
RDMASAN_STAT_HOOK(stat, struct stat)
RDMASAN_STAT_HOOK(stat64, struct stat64)
RDMASAN_STAT_HOOK(lstat, struct stat)
RDMASAN_STAT_HOOK(lstat64, struct stat64)

#define RDMASAN_XSTAT_HOOK(name, st_type)                                          \
  RDMASAN_HOOK int name(int ver, const char* path, st_type* st) {                  \
    static constinit ip::NextSym<int (*)(int, const char*, st_type*)> real(#name); \
    Path p(path);                                                                  \
    if (p.node()) {                                                                \
      devfs::NodeStat(path, reinterpret_cast<struct stat*>(st));                   \
      return 0;                                                                    \
    }                                                                              \
    return real ? real(ver, p.use, st) : (errno = ENOSYS, -1);                     \
  }
RDMASAN_XSTAT_HOOK(__xstat, struct stat)
RDMASAN_XSTAT_HOOK(__xstat64, struct stat64)
RDMASAN_XSTAT_HOOK(__lxstat, struct stat)
RDMASAN_XSTAT_HOOK(__lxstat64, struct stat64)

#define RDMASAN_FSTATAT_HOOK(name, st_type)                                             \
  RDMASAN_HOOK int name(int dirfd, const char* path, st_type* st, int flags) {          \
    static constinit ip::NextSym<int (*)(int, const char*, st_type*, int)> real(#name); \
    Path p(path);                                                                       \
    if (p.node()) {                                                                     \
      devfs::NodeStat(path, reinterpret_cast<struct stat*>(st));                        \
      return 0;                                                                         \
    }                                                                                   \
    return real(dirfd, p.use, st, flags);                                               \
  }
RDMASAN_FSTATAT_HOOK(fstatat, struct stat)
RDMASAN_FSTATAT_HOOK(fstatat64, struct stat64)

RDMASAN_HOOK int statx(int dirfd, const char* path, int flags, unsigned mask, struct statx* stx) {
  static constinit ip::NextSym<int (*)(int, const char*, int, unsigned, struct statx*)> real("statx");
  Path p(path);
  if (p.node()) {
    struct stat st;
    devfs::NodeStat(path, &st);
    memset(stx, 0, sizeof(*stx));
    stx->stx_mask = STATX_TYPE | STATX_MODE | STATX_NLINK;
    stx->stx_mode = static_cast<uint16_t>(st.st_mode);
    stx->stx_nlink = 1;
    stx->stx_blksize = 4096;
    stx->stx_rdev_major = major(st.st_rdev);
    stx->stx_rdev_minor = minor(st.st_rdev);
    return 0;
  }
  return real(dirfd, p.use, flags, mask, stx);
}

RDMASAN_HOOK int access(const char* path, int mode) {
  static constinit ip::NextSym<int (*)(const char*, int)> real("access");
  Path p(path);
  if (p.node()) return (mode & X_OK) ? (errno = EACCES, -1) : 0;
  return real(p.use, mode);
}

RDMASAN_HOOK int faccessat(int dirfd, const char* path, int mode, int flags) {
  static constinit ip::NextSym<int (*)(int, const char*, int, int)> real("faccessat");
  Path p(path);
  if (p.node()) return (mode & X_OK) ? (errno = EACCES, -1) : 0;
  return real(dirfd, p.use, mode, flags);
}

RDMASAN_HOOK int euidaccess(const char* path, int mode) {
  static constinit ip::NextSym<int (*)(const char*, int)> real("euidaccess");
  Path p(path);
  if (p.node()) return (mode & X_OK) ? (errno = EACCES, -1) : 0;
  return real(p.use, mode);
}

RDMASAN_HOOK DIR* opendir(const char* path) {
  static constinit ip::NextSym<DIR* (*)(const char*)> real("opendir");
  Path p(path);
  if (p.node()) {
    errno = ENOTDIR;
    return nullptr;
  }
  return real(p.use);
}

RDMASAN_HOOK FILE* fopen(const char* path, const char* mode) {
  static constinit ip::NextSym<FILE* (*)(const char*, const char*)> real("fopen");
  Path p(path);
  if (p.node()) {
    errno = ENXIO;
    return nullptr;
  }
  return real(p.use, mode);
}

RDMASAN_HOOK FILE* fopen64(const char* path, const char* mode) {
  static constinit ip::NextSym<FILE* (*)(const char*, const char*)> real("fopen64");
  Path p(path);
  if (p.node()) {
    errno = ENXIO;
    return nullptr;
  }
  return real(p.use, mode);
}

RDMASAN_HOOK ssize_t readlink(const char* path, char* buf, size_t n) {
  static constinit ip::NextSym<ssize_t (*)(const char*, char*, size_t)> real("readlink");
  Path p(path);
  if (p.node()) {
    errno = EINVAL;  // not a link
    return -1;
  }
  return real(p.use, buf, n);
}

RDMASAN_HOOK char* realpath(const char* path, char* resolved) {
  static constinit ip::NextSym<char* (*)(const char*, char*)> real("realpath");
  Path p(path);
  if (p.node()) {
    if (resolved) {
      snprintf(resolved, PATH_MAX, "%s", path);
      return resolved;
    }
    return strdup(path);
  }
  return real(p.use, resolved);
}
