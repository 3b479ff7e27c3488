// core/biased_lock: a lock that costs its usual thread no atomic
// read-modify-write.
//
// Most RDMA programs drive each queue from one thread.  The first thread
// that takes a BiasedLock with LockAsUser() becomes its owner; until any
// other thread wants the lock, the owner takes and drops it with plain
// stores (a "busy" flag, and a look at whether the bias still stands).  The
// first other thread revokes the bias for good: it raises the revoked flag,
// runs a process-wide memory barrier (membarrier(2): the owner then either
// sees the flag or has its busy flag visible), waits for the owner to
// leave, and from then on every thread uses the lock inside.  Where
// membarrier is missing, and under ThreadSanitizer (which cannot see that
// barrier), there is no bias: it is the lock inside.
//
// The lock inside is a parameter (BiasedLock: a SpinLock, so it may not be
// held across anything that blocks).  try_lock never waits: a thread other
// than the owner revokes the bias (once) and fails if the owner holds the
// lock.  The owner's way is always in line: a call would cost the data
// path's lock more than the lock itself.
//
// May not: serve locks that many threads share from the start (each
// revocation is a system call that interrupts every running thread of the
// process), or be shared between processes.
#ifndef RDMASAN_CORE_BIASED_LOCK_H_
#define RDMASAN_CORE_BIASED_LOCK_H_

#include <atomic>
#include <cstdint>

#include "core/compiler.h"
#include "core/spin_lock.h"

#if defined(__SANITIZE_THREAD__)
#define RDMASAN_BIASED_LOCKS 0
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define RDMASAN_BIASED_LOCKS 0
#endif
#endif
#ifndef RDMASAN_BIASED_LOCKS
#define RDMASAN_BIASED_LOCKS 1
#endif

namespace rdmasan::core {

namespace bias_internal {
extern thread_local uint64_t t_token;
uint64_t NewToken();
}  // namespace bias_internal

// This thread's token: nonzero, never reused within the process.
RDMASAN_TLS_ACCESSOR inline uint64_t ThreadToken() {
  uint64_t t = bias_internal::t_token;
  return t ? t : bias_internal::NewToken();
}

// Whether locks may be biased in this process (membarrier registered).
bool BiasSupported();
// After fork, in the child: the barrier's registration is the parent's.
void BiasAfterFork();

template <class Inner>
class BasicBiasedLock {
 public:
  // Takes the lock and, if no thread owns it yet, makes this thread its
  // owner (for the threads that use what it guards day to day).
  void LockAsUser() { Lock(true); }
  // Takes the lock (Lockable); uses but never claims the bias.
  void lock() { Lock(false); }
  // Takes the lock if that needs no wait; never claims the bias.
  bool try_lock() {
#if RDMASAN_BIASED_LOCKS
    if (TryFast()) return true;
#endif
    return SlowTryLock();
  }
  // Whether an owner takes the lock its own way now (diagnostics, tests).
  bool biased() const {
    return owner_.load(std::memory_order_relaxed) != 0 && !revoked_.load(std::memory_order_relaxed);
  }
  [[gnu::always_inline]] void unlock() {
    if (fast_) {
      fast_ = false;
      busy_.store(false, std::memory_order_release);
      return;
    }
    mu_.unlock();
  }

 private:
  [[gnu::always_inline]] void Lock(bool may_own) {
#if RDMASAN_BIASED_LOCKS
    if (TryFast()) return;
#endif
    SlowLock(may_own);
  }
  // The owner's way: true if this thread owns the bias and it still stands.
  [[gnu::always_inline]] bool TryFast() {
    if (owner_.load(std::memory_order_relaxed) != ThreadToken()) return false;
    busy_.store(true, std::memory_order_relaxed);
    // Only the compiler is fenced here: a revoker's membarrier fences
    // this thread's CPU for it.
    std::atomic_signal_fence(std::memory_order_seq_cst);
    if (!revoked_.load(std::memory_order_relaxed)) {
      fast_ = true;
      return true;
    }
    busy_.store(false, std::memory_order_release);
    return false;
  }
  void SlowLock(bool may_own);
  bool SlowTryLock();
  // mu_ held: revokes another thread's bias; false if that owner still
  // holds the lock and `wait` is false (mu_ is then dropped).
  bool Revoke(bool wait);

  std::atomic<uint64_t> owner_{0};  // a ThreadToken, 0 while unowned
  std::atomic<bool> busy_{false};   // the owner holds the lock without mu_
  std::atomic<bool> revoked_{false};
  bool fast_ = false;  // the holder took the owner's way (read by the holder only)
  Inner mu_;
};

extern template class BasicBiasedLock<SpinLock>;

using BiasedLock = BasicBiasedLock<SpinLock>;

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_BIASED_LOCK_H_
