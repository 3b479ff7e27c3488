// dlsym and dlvsym, in the preloaded library only: a loader that dlopens
// libibverbs and looks its verbs up itself (NCCL's ibvwrap, plugin loaders:
// dlsym(handle, "ibv_open_device"), dlvsym(handle, "ibv_open_device",
// "IBVERBS_1.1")) is handed the shim's definition, so its calls are seen
// like a linked program's.
//
// Only a lookup on a real handle whose answer lies in libibverbs, for a
// name the shim defines (ibv_*, _ibv_*, the rate conversions), changes;
// dlvsym only when the version asked for is the default one (the shim
// defines each verb at its newest ABI; ibv_create_qp@IBVERBS_1.0 takes the
// 1.0 structs and stays the library's own).  Everything else is the next
// dlsym's answer unchanged.  RTLD_DEFAULT and RTLD_NEXT are not looked at:
// their answer depends on the caller, found from the return address, so
// the entry points are assembly that jumps to the next dlsym with the
// caller's return address still on the stack (a C wrapper would make every
// RTLD_NEXT lookup start after the shim: a malloc interposer loaded after
// it would find itself).  The shim's own lookups go around this file
// (loader.h), so a shim verb called through a pointer handed out here
// still reaches the real function.
//
// May not: be linked into test binaries (it would become their dlsym), or
// touch thread-local storage on the pseudo-handle path (ASan's runtime
// calls dlsym before any thread set-up of the shim ran).  On a target
// without an assembly entry here, dlsym and dlvsym are not interposed.
#include <dlfcn.h>

#include <atomic>

#include "interpose/loader.h"

namespace ip = rdmasan::interpose;

#define RDMASAN_DL_HIDDEN extern "C" __attribute__((visibility("hidden"), used))

namespace {

// Names the shim exports to programs (interpose/exports.map).
bool ShimName(const char* n) {
  auto starts = [n](const char* p) {
    const char* s = n;
    while (*p && *s == *p) ++s, ++p;
    return *p == 0;
  };
  return starts("ibv_") || starts("_ibv_") || starts("mult_to_ibv_rate") || starts("mbps_to_ibv_rate");
}

// The shim's own object: its load address, and a handle for lookups in it.
struct Self {
  void* base = nullptr;
  void* handle = nullptr;
};
const Self& GetSelf() {
  static const Self self = [] {
    Self s;
    Dl_info di;
    if (dladdr(reinterpret_cast<void*>(&ShimName), &di) && di.dli_fname) {
      s.base = di.dli_fbase;
      s.handle = dlopen(di.dli_fname, RTLD_NOLOAD | RTLD_LAZY);
    }
    return s;
  }();
  return self;
}

// `found` (the next dlsym's answer for `name`), or the shim's definition
// of `name` when `found` is libibverbs' own.
void* Redirect(const char* name, void* found) {
  if (!ShimName(name)) return found;
  Dl_info di;
  if (!dladdr(found, &di) || !ip::IsVerbsLibrary(di.dli_fname)) return found;
  const Self& self = GetSelf();
  const ip::DlsymFn next = ip::NextDlsym();
  if (!self.handle || !next) return found;
  // The handle's scope holds the shim's dependencies too: only a
  // definition in the shim itself counts.
  void* mine = next(self.handle, name);
  if (!mine || !dladdr(mine, &di) || di.dli_fbase != self.base) return found;
  return mine;
}

}  // namespace

// The C halves of the entry points below.
RDMASAN_DL_HIDDEN void* RdmasanNextDlsym() { return reinterpret_cast<void*>(ip::NextDlsym()); }
RDMASAN_DL_HIDDEN void* RdmasanNextDlvsym() { return reinterpret_cast<void*>(ip::NextDlvsym()); }

RDMASAN_DL_HIDDEN void* RdmasanDlsymOnHandle(void* handle, const char* name) {
  const ip::DlsymFn next = ip::NextDlsym();
  if (!next) return nullptr;
  void* f = next(handle, name);
  return f && name ? Redirect(name, f) : f;
}

RDMASAN_DL_HIDDEN void* RdmasanDlvsymOnHandle(void* handle, const char* name, const char* version) {
  const ip::DlvsymFn next = ip::NextDlvsym();
  if (!next) return nullptr;
  void* f = next(handle, name, version);
  if (!f || !name || !ShimName(name)) return f;
  const ip::DlsymFn next_sym = ip::NextDlsym();
  if (!next_sym || next_sym(handle, name) != f) return f;  // not the default version
  return Redirect(name, f);
}

// dlsym(handle, name) and dlvsym(handle, name, version): a pseudo handle
// (RTLD_DEFAULT 0, RTLD_NEXT -1) jumps to the next function with the stack
// as the caller left it; a real handle goes to the *OnHandle function.
// clang-format off
#if defined(__x86_64__)
#define RDMASAN_DL_ENTRY(fn, on_handle, next)      \
  "  .text\n"                                      \
  "  .globl " fn "\n"                              \
  "  .type " fn ", @function\n"                    \
  "  .p2align 4\n" fn ":\n"                        \
  "  .cfi_startproc\n"                             \
  "  testq %rdi, %rdi\n"                           \
  "  je 1f\n"                                      \
  "  cmpq $-1, %rdi\n"                             \
  "  je 1f\n"                                      \
  "  jmp " on_handle "\n"                          \
  "1:\n"                                           \
  "  pushq %rdi\n"                                 \
  "  .cfi_adjust_cfa_offset 8\n"                   \
  "  pushq %rsi\n"                                 \
  "  .cfi_adjust_cfa_offset 8\n"                   \
  "  pushq %rdx\n"                                 \
  "  .cfi_adjust_cfa_offset 8\n"                   \
  "  call " next "\n"                              \
  "  popq %rdx\n"                                  \
  "  .cfi_adjust_cfa_offset -8\n"                  \
  "  popq %rsi\n"                                  \
  "  .cfi_adjust_cfa_offset -8\n"                  \
  "  popq %rdi\n"                                  \
  "  .cfi_adjust_cfa_offset -8\n"                  \
  "  testq %rax, %rax\n"                           \
  "  je 2f\n"                                      \
  "  jmp *%rax\n"                                  \
  "2:\n"                                           \
  "  ret\n"                                        \
  "  .cfi_endproc\n"                               \
  "  .size " fn ", .-" fn "\n"
#elif defined(__aarch64__)
#define RDMASAN_DL_ENTRY(fn, on_handle, next)      \
  "  .text\n"                                      \
  "  .globl " fn "\n"                              \
  "  .type " fn ", %function\n"                    \
  "  .p2align 4\n" fn ":\n"                        \
  "  .cfi_startproc\n"                             \
  "  cbz x0, 1f\n"                                 \
  "  cmn x0, #1\n"                                 \
  "  b.eq 1f\n"                                    \
  "  b " on_handle "\n"                            \
  "1:\n"                                           \
  "  stp x29, x30, [sp, #-48]!\n"                  \
  "  .cfi_def_cfa_offset 48\n"                     \
  "  .cfi_offset 29, -48\n"                        \
  "  .cfi_offset 30, -40\n"                        \
  "  mov x29, sp\n"                                \
  "  stp x0, x1, [sp, #16]\n"                      \
  "  str x2, [sp, #32]\n"                          \
  "  bl " next "\n"                                \
  "  mov x16, x0\n"                                \
  "  ldp x0, x1, [sp, #16]\n"                      \
  "  ldr x2, [sp, #32]\n"                          \
  "  ldp x29, x30, [sp], #48\n"                    \
  "  .cfi_def_cfa_offset 0\n"                      \
  "  .cfi_restore 29\n"                            \
  "  .cfi_restore 30\n"                            \
  "  cbz x16, 2f\n"                                \
  "  br x16\n"                                     \
  "2:\n"                                           \
  "  mov x0, #0\n"                                 \
  "  ret\n"                                        \
  "  .cfi_endproc\n"                               \
  "  .size " fn ", .-" fn "\n"
#endif
// clang-format on

#ifdef RDMASAN_DL_ENTRY
// This file is compiled without LTO (interpose/CMakeLists.txt), so the
// functions the assembly names keep their names.
asm(RDMASAN_DL_ENTRY("dlsym", "RdmasanDlsymOnHandle", "RdmasanNextDlsym"));
asm(RDMASAN_DL_ENTRY("dlvsym", "RdmasanDlvsymOnHandle", "RdmasanNextDlvsym"));
#endif
