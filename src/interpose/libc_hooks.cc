// Memory interposition, in the preloaded library only: free, realloc,
// munmap and fork become Events when they touch registered memory.
//
// Cost when nothing overlaps: the released range is compared with the lowest
// and highest registered address (two relaxed atomic loads).  Only a range
// inside those bounds takes the lock of the registered-range set.  May not:
// allocate before the real free runs, or report from inside the shim itself
// (re-entry guard).  Not linked into test binaries, where it would shadow a
// sanitizer's own interceptors.
#include <dlfcn.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include "core/stack.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/memory.h"

namespace ip = rdmasan::interpose;

extern "C" __attribute__((visibility("default"))) void free(void* p) {
  ip::FreeFn real = ip::RealFree();
  if (p && ip::MayOverlap(reinterpret_cast<uintptr_t>(p), 1)) {
    ip::Reentry re;
    if (re.outer() && ip::Checking()) {
      size_t n = malloc_usable_size(p);
      uintptr_t a = reinterpret_cast<uintptr_t>(p);
      if (ip::OverlapsRegistered(a, n)) ip::EmitFree(a, n, RDMASAN_CAPTURE_CALLER_STACK());
    }
  }
  if (real) real(p);
}

extern "C" __attribute__((visibility("default"))) void* realloc(void* p, size_t size) {
  static const auto real = reinterpret_cast<ip::ReallocFn>(dlsym(RTLD_NEXT, "realloc"));
  if (!real) return nullptr;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  const size_t old = p ? malloc_usable_size(p) : 0;
  const bool watch = p && ip::MayOverlap(a, old);
  const auto stack = watch ? RDMASAN_CAPTURE_CALLER_STACK() : 0;
  void* q = real(p, size);
  if (watch && q) {
    ip::Reentry re;
    // Moved: the whole old block is gone.  Shrunk in place: its tail is.
    uintptr_t fa = q != p ? a : a + size;
    size_t fn = q != p ? old : (size < old ? old - size : 0);
    if (re.outer() && ip::Checking() && fn && ip::OverlapsRegistered(fa, fn)) ip::EmitFree(fa, fn, stack);
  }
  return q;
}

extern "C" __attribute__((visibility("default"))) int munmap(void* addr, size_t length) {
  static const auto real = reinterpret_cast<ip::MunmapFn>(dlsym(RTLD_NEXT, "munmap"));
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (ip::MayOverlap(a, length)) {
    ip::Reentry re;
    if (re.outer() && ip::Checking() && ip::OverlapsRegistered(a, length))
      ip::EmitFree(a, length, RDMASAN_CAPTURE_CALLER_STACK());
  }
  return real ? real(addr, length) : -1;
}

extern "C" __attribute__((visibility("default"))) pid_t fork(void) {
  static const auto real = reinterpret_cast<ip::ForkFn>(dlsym(RTLD_NEXT, "fork"));
  {
    ip::Reentry re;
    if (re.outer() && ip::Checking()) {
      rdmasan::core::Event e;
      e.kind = rdmasan::core::EventKind::kFork;
      e.stack = RDMASAN_CAPTURE_CALLER_STACK();
      ip::Emit(e);
    }
  }
  if (!real) return -1;
  pid_t pid = real();
  if (pid == 0) ip::AfterForkInChild();
  return pid;
}
