// core::BiasedLock: mutual exclusion while the bias stands, through its
// revocation, and after it; that the owner's way is really taken; try_lock
// never waits.
// core::FutexMutex: mutual exclusion with waiters that sleep (held across
// a sleep, so they do), try_lock's answers, and a wait woken by unlock.
#include "core/biased_lock.h"

#include <chrono>

#include "core/futex_mutex.h"

#include <atomic>
#include <mutex>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

namespace rdmasan {
namespace {

template <class L>
struct GuardedBy {
  L mu;
  uint64_t a = 0, b = 0;  // always equal outside the lock
};
using Guarded = GuardedBy<core::BiasedLock>;

enum class Take { kUser, kLock, kTry };

// `n` increments of both counters, checking they agree on entry.
template <class L>
void Work(GuardedBy<L>& g, int n, Take how, std::atomic<int>* torn) {
  for (int i = 0; i < n; ++i) {
    if (how == Take::kUser)
      g.mu.LockAsUser();
    else if (how == Take::kLock)
      g.mu.lock();
    else
      while (!g.mu.try_lock()) std::this_thread::yield();
    if (g.a != g.b) torn->fetch_add(1);
    ++g.a;
    ++g.b;
    g.mu.unlock();
  }
}

TEST(CoreBiasedLock, OneThreadAlone) {
  Guarded g;
  std::atomic<int> torn{0};
  Work(g, 100000, Take::kUser, &torn);
  EXPECT_EQ(g.a, 100000u);
  EXPECT_EQ(torn.load(), 0);
}

TEST(CoreBiasedLock, OwnerThenOthersRevokeAndShare) {
  // The first thread owns the lock and keeps using it while three others
  // arrive: the first of them revokes the bias, and every increment of
  // every thread lands.
  Guarded g;
  std::atomic<int> torn{0};
  std::atomic<bool> owner_started{false};
  std::thread owner([&] {
    g.mu.LockAsUser();  // becomes the owner
    g.mu.unlock();
    owner_started = true;
    Work(g, 200000, Take::kUser, &torn);
  });
  while (!owner_started) std::this_thread::yield();
  std::vector<std::thread> others;
  for (int t = 0; t < 3; ++t)
    others.emplace_back([&, t] { Work(g, 50000, t % 2 == 0 ? Take::kUser : Take::kLock, &torn); });
  owner.join();
  for (auto& t : others) t.join();
  EXPECT_EQ(g.a, 200000u + 3 * 50000u);
  EXPECT_EQ(g.a, g.b);
  EXPECT_EQ(torn.load(), 0);
}

TEST(CoreBiasedLock, AnotherThreadWaitsForTheOwnersHold) {
  // The owner holds the lock (its own way); a second thread's lock() must
  // wait until the owner lets go.
  Guarded g;
  g.mu.LockAsUser();
  g.mu.unlock();
  g.mu.LockAsUser();  // held by the owner, without the inner spin lock if biased
  std::atomic<bool> got{false};
  std::thread other([&] {
    g.mu.lock();
    got = true;
    g.mu.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  g.mu.unlock();
  other.join();
  EXPECT_TRUE(got.load());
  // Revoked for good: the former owner still gets the lock.
  g.mu.LockAsUser();
  g.mu.unlock();
}

TEST(CoreBiasedLock, BiasedToItsUserUntilAnotherThreadComes) {
  Guarded g;
  g.mu.lock();  // lock() never claims the bias
  g.mu.unlock();
  EXPECT_FALSE(g.mu.biased());
  g.mu.LockAsUser();
  g.mu.unlock();
  // Biased where membarrier(2) is there to revoke it (and not under
  // ThreadSanitizer, which cannot see that barrier); a plain lock elsewhere.
  EXPECT_EQ(g.mu.biased(), core::BiasSupported());
  std::thread([&] {
    g.mu.lock();
    g.mu.unlock();
  }).join();
  EXPECT_FALSE(g.mu.biased());
#if RDMASAN_BIASED_LOCKS
  EXPECT_TRUE(core::BiasSupported()) << "membarrier(2) PRIVATE_EXPEDITED is missing: locks are never biased";
#endif
}

TEST(CoreBiasedLock, TryLockNeverWaitsAndRevokes) {
  Guarded g;
  EXPECT_TRUE(g.mu.try_lock());  // free: taken, bias not claimed
  g.mu.unlock();
  EXPECT_FALSE(g.mu.biased());
  g.mu.LockAsUser();
  g.mu.unlock();
  EXPECT_TRUE(g.mu.try_lock());  // the owner, its own way where biased
  // Held by the owner: another thread's try_lock fails at once, and the
  // bias is gone for good.
  bool other_got = true;
  std::thread([&] { other_got = g.mu.try_lock(); }).join();
  EXPECT_FALSE(other_got);
  EXPECT_FALSE(g.mu.biased());
  g.mu.unlock();
  std::thread([&] {
    other_got = g.mu.try_lock();
    if (other_got) g.mu.unlock();
  }).join();
  EXPECT_TRUE(other_got);
  // The former owner now goes through the lock inside: a second try while
  // it holds the lock fails.
  g.mu.LockAsUser();
  std::thread([&] { other_got = g.mu.try_lock(); }).join();
  EXPECT_FALSE(other_got);
  g.mu.unlock();
}

TEST(CoreBiasedLock, ThreadTokensAreDistinct) {
  const uint64_t mine = core::ThreadToken();
  uint64_t theirs = 0;
  std::thread([&] { theirs = core::ThreadToken(); }).join();
  EXPECT_NE(mine, 0u);
  EXPECT_NE(theirs, 0u);
  EXPECT_NE(mine, theirs);
  EXPECT_EQ(mine, core::ThreadToken());
}

TEST(CoreFutexMutex, FourThreadsIncrementUnderIt) {
  core::FutexMutex mu;
  uint64_t a = 0, b = 0;
  std::atomic<int> torn{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < 100000; ++i) {
        std::lock_guard<core::FutexMutex> l(mu);
        if (a != b) torn.fetch_add(1);
        ++a;
        ++b;
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(a, 400000u);
  EXPECT_EQ(b, 400000u);
  EXPECT_EQ(torn.load(), 0);
}

TEST(CoreFutexMutex, TryLockAndASleepingWaiter) {
  core::FutexMutex mu;
  ASSERT_TRUE(mu.try_lock());
  EXPECT_FALSE(mu.try_lock());
  // A waiter that finds it held past its spin sleeps, and the unlock
  // wakes it: it gets the lock only after the holder lets go.
  std::atomic<bool> released{false}, got{false};
  std::thread waiter([&] {
    mu.lock();
    got = true;
    EXPECT_TRUE(released.load());
    mu.unlock();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(got.load());
  released = true;
  mu.unlock();
  waiter.join();
  EXPECT_TRUE(got.load());
  ASSERT_TRUE(mu.try_lock());
  mu.unlock();
}

}  // namespace
}  // namespace rdmasan
