// Memory interposition, in the preloaded library only: free, realloc,
// munmap and fork (and daemon's fork) become Events when they touch
// registered memory.
//
// Cost when nothing overlaps: the released range is compared with the lowest
// and highest registered address (two relaxed atomic loads).  Only a range
// inside those bounds takes the lock of the registered-range set.  May not:
// allocate before the real free runs, or report from inside the shim itself
// (re-entry guard).  Not linked into test binaries, where it would shadow a
// sanitizer's own interceptors.
//
// Under a sanitizer whose runtime is preloaded ahead of this library
// (AddressSanitizer: `LD_PRELOAD=libasan.so:librdmasan.so`), the runtime's
// free and realloc come first and these are never called; the runtime's
// free hook (__sanitizer_install_malloc_and_free_hooks) reports each free
// to the same check instead, with the stack unwound past the runtime's own
// frames.
#include <dlfcn.h>
#include <execinfo.h>
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>

#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/loader.h"
#include "interpose/memory.h"

namespace ip = rdmasan::interpose;

namespace {
// Set while this library's free passes a block on to the real one, which
// (an instrumented program's sanitizer runtime, loaded after this library)
// may call its free hook for the same block.
thread_local bool t_in_free = false;
}  // namespace

extern "C" __attribute__((visibility("default"))) void free(void* p) {
  ip::FreeFn real = ip::RealFree();
  // The block of an object being destroyed: kept for use-after-destroy.
  if (p && ip::Holding() && ip::HoldBack(p, malloc_usable_size(p))) return;
  if (p && ip::MayOverlap(reinterpret_cast<uintptr_t>(p), 1)) {
    ip::Reentry re;
    if (re.outer() && ip::Checking()) {
      size_t n = malloc_usable_size(p);
      uintptr_t a = reinterpret_cast<uintptr_t>(p);
      if (ip::OverlapsRegistered(a, n)) ip::EmitFree(a, n, RDMASAN_CAPTURE_CALLER_FULL_STACK());
    }
  }
  if (real) {
    t_in_free = true;
    real(p);
    t_in_free = false;
  }
}

extern "C" __attribute__((visibility("default"))) void* realloc(void* p, size_t size) {
  static constinit ip::NextSym<ip::ReallocFn> real("realloc");
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
  static constinit ip::NextSym<ip::MunmapFn> real("munmap");
  const uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  if (ip::MayOverlap(a, length)) {
    ip::Reentry re;
    if (re.outer() && ip::Checking() && ip::OverlapsRegistered(a, length))
      ip::EmitFree(a, length, RDMASAN_CAPTURE_CALLER_FULL_STACK());
  }
  return real ? real(addr, length) : -1;
}

namespace {

// fork, and daemon's fork: the event (for fork-with-mrs) with the stack of
// the program's call, then the child lets go of the parent's trace.
pid_t ForkChecked(rdmasan::core::StackId stack) {
  static constinit ip::NextSym<ip::ForkFn> real("fork");
  {
    ip::Reentry re;
    // Before any verbs call there is nothing to check (and no trace to
    // open for a shell's fork).
    if (re.outer() && ip::Checking() && ip::Started()) {
      rdmasan::core::Event e;
      e.kind = rdmasan::core::EventKind::kFork;
      e.stack = stack;
      ip::Emit(e);
    }
  }
  if (!real) return -1;
  pid_t pid = real();
  if (pid == 0) ip::AfterForkInChild();
  return pid;
}

}  // namespace

extern "C" __attribute__((visibility("default"))) pid_t fork(void) {
  return ForkChecked(ip::Started() ? RDMASAN_CAPTURE_CALLER_STACK() : 0);
}

// glibc's daemon forks inside libc, past the fork above: done here as
// daemon(3) describes it, so its fork is checked, the child traced, and the
// parent ends as _exit does under the shim (trace, findings, exitcode).
extern "C" __attribute__((visibility("default"))) int daemon(int nochdir, int noclose) {
  const pid_t pid = ForkChecked(ip::Started() ? RDMASAN_CAPTURE_CALLER_STACK() : 0);
  if (pid < 0) return -1;
  if (pid > 0) _exit(0);
  if (setsid() < 0) return -1;
  if (!nochdir) (void)!chdir("/");
  if (!noclose) {
    const int fd = open("/dev/null", O_RDWR);
    if (fd < 0) return -1;
    for (int std_fd = 0; std_fd <= 2; ++std_fd) (void)dup2(fd, std_fd);
    if (fd > 2) close(fd);
  }
  return 0;
}

// ------------------------------------------------- under a sanitizer ------

extern "C" int __sanitizer_install_malloc_and_free_hooks(void (*malloc_hook)(const volatile void*, size_t),
                                                         void (*free_hook)(const volatile void*))
    __attribute__((weak));

namespace {

bool InSanitizerRuntime(const char* path) {
  const char* base = path ? strrchr(path, '/') : nullptr;
  base = base ? base + 1 : path;
  if (!base) return false;
  for (const char* rt : {"libasan.", "libtsan.", "libubsan.", "libmsan.", "libhwasan.", "libclang_rt."})
    if (strncmp(base, rt, strlen(rt)) == 0) return true;
  return false;
}

void NoMallocHook(const volatile void*, size_t) {}

// The stack of the program's call to free: unwound from inside the
// runtime's hook (the runtime keeps no frame pointers, so by its unwind
// tables: slow, and only for a free that overlaps registered memory), less
// the frames of the runtime and of this library.
rdmasan::core::StackId FreeCallerStack() {
  void* frames[rdmasan::core::kMaxStackFrames + 16];
  const int n = backtrace(frames, static_cast<int>(sizeof(frames) / sizeof(frames[0])));
  Dl_info self;
  if (!dladdr(reinterpret_cast<void*>(&NoMallocHook), &self)) self.dli_fbase = nullptr;
  int first = 0;
  for (; first < n; ++first) {
    Dl_info di;
    if (!dladdr(frames[first], &di)) break;
    if (di.dli_fbase != self.dli_fbase && !InSanitizerRuntime(di.dli_fname)) break;
  }
  uintptr_t pcs[rdmasan::core::kMaxStackFrames];
  size_t m = 0;
  for (int i = first; i < n && m < rdmasan::core::kMaxStackFrames; ++i)
    pcs[m++] = reinterpret_cast<uintptr_t>(frames[i]);
  return rdmasan::core::InternStack(pcs, m);
}

void SanitizerFreeHook(const volatile void* vp) {
  void* p = const_cast<void*>(vp);
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  if (!p || t_in_free || !ip::MayOverlap(a, 1)) return;
  ip::Reentry re;
  if (!re.outer() || !ip::Checking()) return;
  const size_t n = malloc_usable_size(p);  // the runtime's size of the block
  if (ip::OverlapsRegistered(a, n)) ip::EmitFree(a, n, FreeCallerStack());
}

__attribute__((constructor)) void InstallSanitizerFreeHook() {
  if (!__sanitizer_install_malloc_and_free_hooks) return;
  // backtrace() loads its unwinder at the first call: not inside a free.
  void* warm[2];
  backtrace(warm, 2);
  __sanitizer_install_malloc_and_free_hooks(NoMallocHook, SanitizerFreeHook);
}

}  // namespace
