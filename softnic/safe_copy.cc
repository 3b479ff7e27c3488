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
#include <setjmp.h>
#include <signal.h>
#include <string.h>

#include <algorithm>
#include <atomic>
#include <mutex>

#include "softnic/access.h"

namespace rdmasan::softnic {
namespace {

thread_local sigjmp_buf* t_recover = nullptr;
struct sigaction g_prev[2];  // SIGSEGV, SIGBUS as they were
std::once_flag g_install_once;

void OnFault(int sig, siginfo_t* info, void* uctx) {
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

}  // namespace

int CopyLocal(const Seg* dst, uint32_t ndst, const Seg* src, uint32_t nsrc) {
  std::call_once(g_install_once, Install);
  sigjmp_buf env;
  if (sigsetjmp(env, 0)) return EFAULT;
  t_recover = &env;
  std::atomic_signal_fence(std::memory_order_seq_cst);
  CopySegs(dst, ndst, src, nsrc);
  std::atomic_signal_fence(std::memory_order_seq_cst);
  t_recover = nullptr;
  return 0;
}

}  // namespace rdmasan::softnic
