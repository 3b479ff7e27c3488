// core/spin_lock: a lock for critical sections of a few hundred nanoseconds.
//
// Uncontended, lock() is one atomic exchange and unlock() one release
// store (a pthread mutex costs two locked instructions and a call each
// way, which on the checked data path is a third of the budget).  Waiters
// spin briefly, then yield the CPU, so a holder that was preempted gets to
// run.  Built from std::atomic in our own translation units, so
// ThreadSanitizer sees its acquire/release edges.  Satisfies Lockable
// (std::lock_guard, std::unique_lock).
//
// May not: be held across anything that blocks (I/O, verbs, other locks'
// waits), or be used where fairness matters.
#ifndef RDMASAN_CORE_SPIN_LOCK_H_
#define RDMASAN_CORE_SPIN_LOCK_H_

#include <sched.h>

#include <atomic>

namespace rdmasan::core {

// One wait of a spinning loop: a pause instruction the first 64 times,
// then the CPU goes to another thread (a preempted holder gets to run).
inline void SpinWait(int spins) {
  if (spins < 64) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
  } else {
    sched_yield();
  }
}

class SpinLock {
 public:
  void lock() {
    while (locked_.exchange(true, std::memory_order_acquire))
      for (int spins = 0; locked_.load(std::memory_order_relaxed); ++spins) SpinWait(spins);
  }
  bool try_lock() {
    return !locked_.load(std::memory_order_relaxed) && !locked_.exchange(true, std::memory_order_acquire);
  }
  void unlock() { locked_.store(false, std::memory_order_release); }

 private:
  std::atomic<bool> locked_{false};
};

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_SPIN_LOCK_H_
