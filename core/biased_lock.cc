#include "core/biased_lock.h"

#include <linux/membarrier.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdio>

#include "core/report.h"

namespace rdmasan::core {
namespace bias_internal {

thread_local uint64_t t_token = 0;

uint64_t NewToken() {
  static std::atomic<uint64_t> next{1};
  t_token = next.fetch_add(1, std::memory_order_relaxed);
  return t_token;
}

}  // namespace bias_internal

namespace {

long Membarrier(int cmd) { return syscall(__NR_membarrier, cmd, 0, 0); }

// -1 unknown, 0 no, 1 yes.
std::atomic<int> g_supported{-1};

bool Register() {
  const long cmds = Membarrier(MEMBARRIER_CMD_QUERY);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) &&
         Membarrier(MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED) == 0;
}

}  // namespace

bool BiasSupported() {
  if (!RDMASAN_BIASED_LOCKS) return false;
  int s = g_supported.load(std::memory_order_acquire);
  if (s < 0) {
    s = Register() ? 1 : 0;
    g_supported.store(s, std::memory_order_release);
  }
  return s == 1;
}

void BiasAfterFork() {
  if (g_supported.load(std::memory_order_acquire) == 1 && !Register())
    g_supported.store(0, std::memory_order_release);
}

template <class Inner>
void BasicBiasedLock<Inner>::SlowLock(bool may_own) {
  mu_.lock();
  if (!RDMASAN_BIASED_LOCKS || revoked_.load(std::memory_order_relaxed)) return;
  const uint64_t owner = owner_.load(std::memory_order_relaxed), me = ThreadToken();
  if (owner == 0) {
    // Owned from the next lock on; this one holds mu_, which the next
    // owner's fast way never takes, so unlock() drops mu_ as usual.
    if (may_own && BiasSupported()) owner_.store(me, std::memory_order_relaxed);
    return;
  }
  if (owner == me) return;  // the owner, after a revocation it raced with
  Revoke(true);
}

template <class Inner>
bool BasicBiasedLock<Inner>::SlowTryLock() {
  if (!mu_.try_lock()) return false;
  if (!RDMASAN_BIASED_LOCKS || revoked_.load(std::memory_order_relaxed)) return true;
  const uint64_t owner = owner_.load(std::memory_order_relaxed);
  if (owner == 0 || owner == ThreadToken()) return true;
  return Revoke(false);
}

template <class Inner>
bool BasicBiasedLock<Inner>::Revoke(bool wait) {
  revoked_.store(true, std::memory_order_relaxed);
  // Every running thread of the process passes a full barrier: the owner
  // has either made busy_ visible or will see revoked_ and take mu_.
  if (Membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0) {
    // Registered at the bias, so this cannot fail while the bias exists;
    // if the kernel says otherwise, say so (the books may race).
    static std::atomic<bool> said{false};
    if (!said.exchange(true)) Diag("membarrier failed: a lock's bias was revoked without a barrier");
  }
  if (!wait && busy_.load(std::memory_order_acquire)) {
    mu_.unlock();  // the owner is inside: it leaves by busy_, and locks mu_ from now on
    return false;
  }
  for (int spins = 0; busy_.load(std::memory_order_acquire); ++spins) SpinWait(spins);
  return true;
}

template class BasicBiasedLock<SpinLock>;

}  // namespace rdmasan::core
