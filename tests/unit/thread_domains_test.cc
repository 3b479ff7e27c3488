// The thread-domain gates of interpose/thread_domains.h, driven directly:
// which objects belong to a thread domain, and when two threads inside one
// are a thread-domain-race finding (counted by the global reporter).  The
// verbs paths that enter the gates are the e2e programs'
// (tests/e2e/checks/thread_domain_race*.c).
#include "interpose/thread_domains.h"

#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <thread>

#include "core/report.h"

namespace rdmasan::interpose::td {
namespace {

size_t Races() { return core::GlobalReporter().Count(core::CheckId::kThreadDomainRace); }

// Handles stand in for the program's objects: the gates never dereference them.
struct Fakes {
  char pd, parent, plain_parent, td, qp, cq, other;
};

TEST(ThreadDomains, OnlyObjectsOfAParentDomainWithATdAreBound) {
  Fakes f{};
  const auto pd = reinterpret_cast<const ibv_pd*>(&f.parent);
  const auto plain = reinterpret_cast<const ibv_pd*>(&f.plain_parent);
  NoteParentDomain(pd, reinterpret_cast<const ibv_td*>(&f.td), 0);
  NoteParentDomain(plain, nullptr, 0);  // a parent domain without a TD
  const uint32_t bound0 = g_bound.load();
  Bind(&f.qp, pd);
  Bind(&f.cq, pd);
  Bind(&f.other, plain);
  Bind(&f.other, reinterpret_cast<const ibv_pd*>(&f.pd));  // an ordinary PD
  EXPECT_TRUE(Active());
  EXPECT_EQ(g_bound.load(), bound0 + 2);
  ASSERT_NE(GateOf(&f.qp), nullptr);
  EXPECT_EQ(GateOf(&f.qp), GateOf(&f.cq));  // one TD, one gate
  EXPECT_EQ(GateOf(&f.other), nullptr);
  Bind(&f.qp, pd);  // again: still one binding
  EXPECT_EQ(g_bound.load(), bound0 + 2);
  Unbind(&f.qp);
  Unbind(&f.cq);
  Unbind(&f.other);  // never bound: nothing
  EXPECT_EQ(g_bound.load(), bound0);
  EXPECT_EQ(GateOf(&f.qp), nullptr);
  ForgetParentDomain(pd);
  ForgetParentDomain(plain);
  Bind(&f.qp, pd);  // a forgotten parent domain binds nothing
  EXPECT_EQ(GateOf(&f.qp), nullptr);
}

TEST(ThreadDomains, TwoParentDomainsOfOneTdShareTheGate) {
  Fakes f{};
  const auto a = reinterpret_cast<const ibv_pd*>(&f.parent);
  const auto b = reinterpret_cast<const ibv_pd*>(&f.plain_parent);
  NoteParentDomain(a, reinterpret_cast<const ibv_td*>(&f.td), 0);
  NoteParentDomain(b, reinterpret_cast<const ibv_td*>(&f.td), 0);
  Bind(&f.qp, a);
  Bind(&f.cq, b);
  EXPECT_NE(GateOf(&f.qp), nullptr);
  EXPECT_EQ(GateOf(&f.qp), GateOf(&f.cq));
  Unbind(&f.qp);
  Unbind(&f.cq);
  ForgetParentDomain(a);
  ForgetParentDomain(b);
}

// One gate for the tests below.
Gate* TestGate(Fakes& f) {
  const auto pd = reinterpret_cast<const ibv_pd*>(&f.parent);
  NoteParentDomain(pd, reinterpret_cast<const ibv_td*>(&f.td), 0);
  Bind(&f.qp, pd);
  Gate* g = GateOf(&f.qp);
  Unbind(&f.qp);
  ForgetParentDomain(pd);
  return g;
}

TEST(ThreadDomains, NestedEntriesOfOneThreadAreNoRace) {
  Fakes f{};
  Gate* g = TestGate(f);
  ASSERT_NE(g, nullptr);
  const size_t before = Races();
  Enter(g, Verb::kWrBatch, 1, 0);  // a batch open
  Enter(g, Verb::kPollCq, 2, 0);   // a poll inside it
  Leave(g);                        // the poll ends; the batch still holds
  std::thread([&] { Enter(g, Verb::kPostSend, 3, 0), Leave(g); }).join();
  EXPECT_EQ(Races(), before + 1);  // the batch was still open
  Leave(g);                        // the batch ends
  std::thread([&] { Enter(g, Verb::kPostSend, 4, 0), Leave(g); }).join();
  EXPECT_EQ(Races(), before + 1);  // after it: none
}

TEST(ThreadDomains, AnOverlapIsReportedAndTheHolderKeepsTheGate) {
  Fakes f{};
  Gate* g = TestGate(f);
  ASSERT_NE(g, nullptr);
  const size_t before = Races();
  std::atomic<int> stage{0};
  std::thread holder([&] {
    Enter(g, Verb::kPostSend, 5, 0);
    stage = 1;
    while (stage != 2) std::this_thread::yield();
    Leave(g);
  });
  while (stage != 1) std::this_thread::yield();
  Enter(g, Verb::kPollCq, 6, 0);  // the race
  Leave(g);                       // not this thread's: the holder keeps the gate
  EXPECT_EQ(Races(), before + 1);
  std::thread([&] { Enter(g, Verb::kPostRecv, 7, 0), Leave(g); }).join();
  EXPECT_EQ(Races(), before + 2);  // still held by the first thread
  stage = 2;
  holder.join();
  Enter(g, Verb::kPollCq, 8, 0);  // free again
  Leave(g);
  EXPECT_EQ(Races(), before + 2);
}

TEST(ThreadDomains, SerialisedThreadsNeverRace) {
  Fakes f{};
  Gate* g = TestGate(f);
  ASSERT_NE(g, nullptr);
  const size_t before = Races();
  std::mutex mu;
  auto work = [&](core::ObjId obj) {
    for (int i = 0; i < 20000; ++i) {
      std::lock_guard<std::mutex> l(mu);
      Enter(g, i % 2 ? Verb::kPostSend : Verb::kWrBatch, obj, 0);
      if (i % 3 == 0) Enter(g, Verb::kPollCq, obj, 0), Leave(g);
      Leave(g);
    }
  };
  std::thread a(work, 10), b(work, 11), c(work, 12);
  a.join();
  b.join();
  c.join();
  EXPECT_EQ(Races(), before);
}

}  // namespace
}  // namespace rdmasan::interpose::td
