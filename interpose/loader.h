// interpose/loader: how the shim reaches the real libibverbs, however the
// program loaded it.
//
// A program linked against libibverbs has it in the global scope, where
// dlvsym(RTLD_NEXT) finds it.  A library that dlopens it RTLD_LOCAL (a
// Python extension such as pyverbs, a plugin loader, NCCL) keeps it out of
// that scope: Real() then asks the library itself, found in the process with
// dlopen("libibverbs.so.1", RTLD_NOLOAD) at call time (it may be loaded long
// after the shim started).  A function not found is looked up again once
// the process has loaded another object (RealSym), so a verb called before
// the library came is not left without its real function for good.
//
// A hooked libc function reaches the one it wraps (libc's, or the next
// interposer's) through NextSym, built on NextDlsym() too.
//
// The shim's own lookups use NextDlsym()/NextDlvsym(), the functions the
// program would reach without the shim (libc's, or the next interposer's):
// the preloaded library also defines dlsym and dlvsym (dl_hooks.cc), and a
// lookup of its own through those would be handed its own definitions back.
// They are found without calling dlsym at all: libc's dlvsym is read from
// libc's dynamic symbol table (found through _r_debug), then asked for
// what comes after the shim.
//
// May not: call libc functions a sanitizer intercepts while it bootstraps
// (the first dlsym of a preloaded ASan runtime lands here before any
// constructor ran), allocate, or close a libibverbs it found (the shim holds
// pointers into it; the reference dlopen took keeps it loaded).
#ifndef RDMASAN_INTERPOSE_LOADER_H_
#define RDMASAN_INTERPOSE_LOADER_H_

#include <atomic>
#include <cstdint>

namespace rdmasan::interpose {

using DlsymFn = void* (*)(void*, const char*);
using DlvsymFn = void* (*)(void*, const char*, const char*);

// The dlsym and dlvsym after the shim (never the shim's own); null only if
// the process has no libc the shim can read.
DlsymFn NextDlsym();
DlvsymFn NextDlvsym();

// The libibverbs this process has loaded, in any scope, or null.  Found
// once, then kept.
void* LoadedVerbs();

// Whether the file at `path` is a libibverbs (its base name starts
// libibverbs.so).
bool IsVerbsLibrary(const char* path);

// Objects the process has loaded so far (dl_iterate_phdr's count): a lookup
// that failed is worth repeating only when this changed.
uint64_t LoadCount();

// The real function `name` at `version` (or at its default version; a null
// version: only that), or null: after the shim in the global scope, else
// in a libibverbs loaded RTLD_LOCAL.
void* Real(const char* name, const char* version);

// Real() of one function, cached once found; while not found, tried again
// on the first call after the process loaded something new.  Constant-
// initialized, so a function-local static of this type costs no guard.
class RealSym {
 public:
  constexpr RealSym(const char* name, const char* version) : name_(name), version_(version) {}
  void* Get() {
    void* f = fn_.load(std::memory_order_acquire);
    return f ? f : Retry();
  }

 private:
  void* Retry();
  const char* name_;
  const char* version_;
  std::atomic<void*> fn_{nullptr};
  std::atomic<uint64_t> tried_at_{~uint64_t{0}};
};

// The function `name` that comes after the shim in the global scope
// (libc's, or the next interposer's): dlsym(RTLD_NEXT, name) asked of
// NextDlsym(), so the lookup never passes through the shim's own dlsym hook.
// Null if there is none, or no libc could be read yet.
void* NextFunction(const char* name);

// NextFunction() of one libc function, for the hook that wraps it: looked up
// on the first call and kept, found or not (libc is loaded before any code
// runs; a function this libc lacks stays null).  Constant-initialized, so a
// function-local static of this type costs no guard and works in a call
// that another library's constructor makes before the shim's ran.  Called
// like the function: `static constinit NextSym<int (*)(int)> real("close");
// return real(fd);`.
template <typename Fn>
class NextSym {
 public:
  constexpr explicit NextSym(const char* name) : name_(name) {}
  Fn Get() {
    if (!looked_.load(std::memory_order_acquire)) Look();
    return Cached();
  }
  // What was found so far, without looking (null before the first Get()).
  Fn Cached() const { return reinterpret_cast<Fn>(fn_.load(std::memory_order_acquire)); }
  explicit operator bool() { return Get() != nullptr; }
  template <typename... Args>
  auto operator()(Args... args) {
    return Get()(args...);
  }

 private:
  // Racing first calls store the same answer.
  void Look() {
    if (!NextDlsym()) return;  // no libc read yet: looked for again next time
    fn_.store(NextFunction(name_), std::memory_order_release);
    looked_.store(true, std::memory_order_release);
  }
  const char* name_;
  std::atomic<void*> fn_{nullptr};
  std::atomic<bool> looked_{false};
};

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_LOADER_H_
