// softnic/interrupt: see interrupt.h.
#include "softnic/interrupt.h"

#include <signal.h>

namespace rdmasan::softnic {

bool RestartAfterSignal() {
  for (int sig = 1; sig < NSIG; ++sig) {
    switch (sig) {
      case SIGSEGV:
      case SIGBUS:
      case SIGILL:
      case SIGFPE:
      case SIGTRAP:
      case SIGSYS:
      case SIGABRT:
      case SIGKILL:
      case SIGSTOP:
        continue;
      default:
        break;
    }
    struct sigaction sa;
    if (sigaction(sig, nullptr, &sa) != 0) continue;  // a number the kernel does not have
    const bool handler = (sa.sa_flags & SA_SIGINFO) ? sa.sa_sigaction != nullptr
                                                    : sa.sa_handler != SIG_DFL && sa.sa_handler != SIG_IGN;
    if (handler && !(sa.sa_flags & SA_RESTART)) return false;
  }
  return true;
}

}  // namespace rdmasan::softnic
