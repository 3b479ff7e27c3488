// softnic/safe_copy: the device's copies within this process, which fail
// with EFAULT instead of faulting when the application unmapped (or
// write-protected) memory under a live MR.
//
// A copy runs with a recovery point of its thread armed (sigsetjmp, no
// system call); a SIGSEGV or SIGBUS raised while it is armed returns there
// and the copy reports EFAULT.  Every other SIGSEGV/SIGBUS goes on to the
// disposition installed before ours: the program's handler, or the default
// action at the faulting instruction (the core dump shows where it
// happened).  The handler is installed by the first copy, not at start-up.
// Between arming and disarming only bytes are copied: no lock is taken and
// nothing allocated, so a fault abandons nothing (the caller's fabric lock
// is released by the caller as usual).
//
// May not: be used for memory of another process (Move uses
// process_vm_readv/writev there, which fail by themselves).  What remains:
// a program that installs its own SIGSEGV handler after the first copy,
// without chaining to the one it replaces, takes such a fault itself.
// Sanitizer builds never get here (access.h copies with process_vm_* in
// them: a siglongjmp must not leave a sanitizer's memmove interceptor).
//
// A small copy (at most kSmallCopy bytes, the ranges apart: a staged
// receive scattered at poll, a small local WRITE) needs no recovery point
// on x86-64: it runs in SafeCopySmall, a few instructions of assembly, and
// the handler sends a fault raised at one of them to the routine's EFAULT
// return, as a kernel's exception table does for copies from user space.
// sigsetjmp and the thread's recovery pointer cost such a copy more than
// the bytes.
#include <setjmp.h>
#include <signal.h>
#include <string.h>
#include <ucontext.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "softnic/access.h"

namespace rdmasan::softnic {
namespace {

thread_local sigjmp_buf* t_recover = nullptr;
struct sigaction g_prev[2];  // SIGSEGV, SIGBUS as they were
std::once_flag g_install_once;
std::atomic<bool> g_installed{false};

#if defined(__x86_64__)
#define RDMASAN_SAFE_COPY_SMALL 1
constexpr uint64_t kSmallCopy = 256;
}  // namespace
}  // namespace rdmasan::softnic

// SafeCopySmall(dst, src, n): copies n bytes forward, 8 at a time, then the
// rest one by one; returns 0, or EFAULT (at SafeCopySmallFault) when a load
// or store faulted.  Only the instructions in [SafeCopySmall,
// SafeCopySmallFault) may fault; none touches the stack.
extern "C" {
int rdmasan_safe_copy_small(void* dst, const void* src, uint64_t n);
extern const char rdmasan_safe_copy_small_fault[];
}
asm(R"(
	.text
	.p2align 4
	.globl	rdmasan_safe_copy_small
	.hidden	rdmasan_safe_copy_small
	.type	rdmasan_safe_copy_small, @function
rdmasan_safe_copy_small:
	cmpq	$8, %rdx
	jb	2f
1:	movq	(%rsi), %rax
	movq	%rax, (%rdi)
	addq	$8, %rsi
	addq	$8, %rdi
	subq	$8, %rdx
	cmpq	$8, %rdx
	jae	1b
2:	testq	%rdx, %rdx
	je	4f
3:	movb	(%rsi), %al
	movb	%al, (%rdi)
	incq	%rsi
	incq	%rdi
	decq	%rdx
	jne	3b
4:	xorl	%eax, %eax
	ret
	.globl	rdmasan_safe_copy_small_fault
	.hidden	rdmasan_safe_copy_small_fault
rdmasan_safe_copy_small_fault:
	movl	$14, %eax
	ret
	.size	rdmasan_safe_copy_small, .-rdmasan_safe_copy_small
)");
static_assert(EFAULT == 14, "SafeCopySmall's fault return");

namespace rdmasan::softnic {
namespace {

// Whether a fault at `uctx` was raised inside SafeCopySmall: then it
// returns EFAULT instead.
bool RedirectSmallCopyFault(void* uctx) {
  auto* uc = static_cast<ucontext_t*>(uctx);
  const auto pc = static_cast<uint64_t>(uc->uc_mcontext.gregs[REG_RIP]);
  const auto begin = reinterpret_cast<uint64_t>(&rdmasan_safe_copy_small);
  const auto fault = reinterpret_cast<uint64_t>(rdmasan_safe_copy_small_fault);
  if (pc < begin || pc >= fault) return false;
  uc->uc_mcontext.gregs[REG_RIP] = static_cast<greg_t>(fault);
  return true;
}
#endif

void OnFault(int sig, siginfo_t* info, void* uctx) {
#ifdef RDMASAN_SAFE_COPY_SMALL
  if (RedirectSmallCopyFault(uctx)) return;
#endif
  if (sigjmp_buf* r = t_recover) {
    t_recover = nullptr;
    siglongjmp(*r, 1);
  }
  const struct sigaction& prev = g_prev[sig == SIGBUS ? 1 : 0];
  if (prev.sa_flags & SA_SIGINFO) {
    prev.sa_sigaction(sig, info, uctx);
    return;
  }
  if (prev.sa_handler != SIG_DFL && prev.sa_handler != SIG_IGN) {
    prev.sa_handler(sig);
    return;
  }
  // The default action: a fault runs the instruction again and gets it; a
  // signal someone sent is sent again.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  sigaction(sig, &dfl, nullptr);
  if (info->si_code <= 0) raise(sig);
}

void Install() {
  struct sigaction sa {};
  sa.sa_sigaction = OnFault;
  // NODEFER: after the siglongjmp the signal is not left blocked.
  sa.sa_flags = SA_SIGINFO | SA_NODEFER | SA_ONSTACK;
  sigemptyset(&sa.sa_mask);
  const int sigs[2] = {SIGSEGV, SIGBUS};
  for (int i = 0; i < 2; ++i) {
    sigaction(sigs[i], nullptr, &g_prev[i]);
    sigaction(sigs[i], &sa, nullptr);
  }
  g_installed.store(true, std::memory_order_release);
}

void CopySegs(const Seg* dst, uint32_t ndst, const Seg* src, uint32_t nsrc) {
  uint32_t di = 0, si = 0;
  uint64_t doff = 0, soff = 0;
  while (di < ndst && si < nsrc) {
    uint64_t n = std::min<uint64_t>(dst[di].len - doff, src[si].len - soff);
    memmove(reinterpret_cast<void*>(dst[di].va + doff), reinterpret_cast<const void*>(src[si].va + soff), n);
    doff += n;
    soff += n;
    if (doff == dst[di].len) ++di, doff = 0;
    if (soff == src[si].len) ++si, soff = 0;
  }
}

#ifdef RDMASAN_SAFE_COPY_SMALL
// CopySegs through SafeCopySmall, for copies of at most kSmallCopy bytes
// whose pieces do not overlap (those go to memmove); -1 if it does not
// apply, else 0 or EFAULT.
int CopySegsSmall(const Seg* dst, uint32_t ndst, const Seg* src, uint32_t nsrc) {
  uint64_t total = 0;
  for (uint32_t i = 0; i < nsrc; ++i) total += src[i].len;
  if (total > kSmallCopy) return -1;
  for (uint32_t i = 0; i < ndst; ++i)
    for (uint32_t j = 0; j < nsrc; ++j)
      if (dst[i].len && src[j].len && dst[i].va < src[j].va + src[j].len &&
          src[j].va < dst[i].va + dst[i].len)
        return -1;  // overlapping: memmove's
  uint32_t di = 0, si = 0;
  uint64_t doff = 0, soff = 0;
  while (di < ndst && si < nsrc) {
    const uint64_t n = std::min<uint64_t>(dst[di].len - doff, src[si].len - soff);
    const uint64_t d = dst[di].va + doff, s = src[si].va + soff;
    if (n && rdmasan_safe_copy_small(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n))
      return EFAULT;
    doff += n;
    soff += n;
    if (doff == dst[di].len) ++di, doff = 0;
    if (soff == src[si].len) ++si, soff = 0;
  }
  return 0;
}
#endif

// A copy with a recovery point armed.
[[gnu::noinline]] int CopyRecoverable(const Seg* dst, uint32_t ndst, const Seg* src, uint32_t nsrc) {
  sigjmp_buf env;
  if (sigsetjmp(env, 0)) return EFAULT;
  t_recover = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  CopySegs(dst, ndst, src, nsrc);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_recover = nullptr;
  return 0;
}

}  // namespace

int CopyLocal(const Seg* dst, uint32_t ndst, const Seg* src, uint32_t nsrc) {
  if (__builtin_expect(!g_installed.load(std::memory_order_acquire), 0))
    std::call_once(g_install_once, Install);
#ifdef RDMASAN_SAFE_COPY_SMALL
  if (ndst == 1 && nsrc == 1) {  // the usual: one piece
    const uint64_t n = std::min(dst->len, src->len), d = dst->va, s = src->va;
    if (n <= kSmallCopy && (d >= s + n || s >= d + n))
      return n ? rdmasan_safe_copy_small(reinterpret_cast<void*>(d), reinterpret_cast<const void*>(s), n) : 0;
  } else if (const int rc = CopySegsSmall(dst, ndst, src, nsrc); rc >= 0) {
    return rc;
  }
#endif
  return CopyRecoverable(dst, ndst, src, nsrc);
}

}  // namespace rdmasan::softnic
