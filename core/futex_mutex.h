// core/futex_mutex: a process-private mutex whose uncontended lock is one
// compare-and-swap and whose unlock is one exchange, inline.
//
// softnic takes a queue's mutex at every post and every poll that finds a
// completion; a pthread mutex costs a call and about 35 instructions each
// way there, which is a sixth of a small SEND's instructions.  This is the
// classic three-state futex mutex (0 free, 1 held, 2 held with waiters):
// a waiter marks the word 2 and sleeps in FUTEX_WAIT_PRIVATE, and an
// unlock that finds 2 wakes one.  Unlike core::SpinLock a waiter sleeps,
// so it may be held across waits for other locks (softnic's send queue
// mutex is held while the fabric lock is taken).  Built from std::atomic
// in our own translation units, so ThreadSanitizer sees its
// acquire/release edges.  Satisfies Lockable (std::lock_guard,
// std::unique_lock, try_lock).
//
// May not: be shared between processes (FUTEX_PRIVATE), be recursive, or
// promise fairness.
#ifndef RDMASAN_CORE_FUTEX_MUTEX_H_
#define RDMASAN_CORE_FUTEX_MUTEX_H_

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>

namespace rdmasan::core {

class FutexMutex {
 public:
  constexpr FutexMutex() = default;
  FutexMutex(const FutexMutex&) = delete;
  FutexMutex& operator=(const FutexMutex&) = delete;

  void lock() {
    uint32_t expected = 0;
    if (__builtin_expect(word_.compare_exchange_strong(expected, 1, std::memory_order_acquire), 1)) return;
    LockSlow();
  }
  bool try_lock() {
    uint32_t expected = 0;
    return word_.compare_exchange_strong(expected, 1, std::memory_order_acquire);
  }
  void unlock() {
    if (__builtin_expect(word_.exchange(0, std::memory_order_release) == 2, 0)) Wake();
  }

 private:
  [[gnu::noinline]] void LockSlow() {
    // A short spin first: the holders here keep it for well under a
    // microsecond.
    for (int i = 0; i < 100; ++i) {
      uint32_t expected = 0;
      if (word_.load(std::memory_order_relaxed) == 0 &&
          word_.compare_exchange_weak(expected, 1, std::memory_order_acquire))
        return;
#if defined(__x86_64__) || defined(__i386__)
      __builtin_ia32_pause();
#endif
    }
    // Marked contended: whoever unlocks next wakes a sleeper.
    while (word_.exchange(2, std::memory_order_acquire) != 0)
      syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAIT_PRIVATE, 2, nullptr, nullptr, 0);
  }
  [[gnu::noinline]] void Wake() {
    syscall(SYS_futex, reinterpret_cast<uint32_t*>(&word_), FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
  }

  std::atomic<uint32_t> word_{0};
};
static_assert(sizeof(std::atomic<uint32_t>) == sizeof(uint32_t));

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_FUTEX_MUTEX_H_
