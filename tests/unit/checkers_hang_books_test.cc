// checkers_test: the books of the hang report (Engine::Outstanding).
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <atomic>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ====================================== hang books (Engine::Outstanding) ==
// The watchdog's `hang` report (interpose/watchdog.h) names, per CQ, the
// outstanding WRs that could still complete there; these are its books.

namespace hang_books {

const checkers::CqOutstanding* Find(const std::vector<checkers::CqOutstanding>& all, ObjId cq) {
  for (const auto& b : all)
    if (b.cq == cq) return &b;
  return nullptr;
}

TEST(HangBooks, EmptyCqHasNothingThatCanComplete) {
  Basic b;
  auto books = b.f.eng.Outstanding();
  ASSERT_EQ(books.size(), 1u);
  EXPECT_EQ(books[0].cq, b.cq);
  EXPECT_FALSE(books[0].armed);
  ASSERT_EQ(books[0].queues.size(), 1u);
  EXPECT_EQ(books[0].queues[0].qp, b.qp);
  EXPECT_EQ(books[0].queues[0].qpn, b.qpn);
  EXPECT_EQ(books[0].queues[0].state, static_cast<uint32_t>(IBV_QPS_RTS));
  EXPECT_EQ(books[0].CouldComplete(), 0u);
}

TEST(HangBooks, SignaledSendsAndReceivesCouldComplete) {
  Basic b;
  b.f.PostSend(b.qp, {Wr(1, false, {b.sg()}), Wr(2, true, {b.sg()}), Wr(3, false, {b.sg()})});
  b.f.PostRecv(b.qp, {Rwr(10, {b.sg()}), Rwr(11, {b.sg()})});
  EXPECT_TRUE(b.f.ReqNotify(b.cq).empty());
  auto books = b.f.eng.Outstanding();
  const auto* c = Find(books, b.cq);
  ASSERT_NE(c, nullptr);
  EXPECT_TRUE(c->armed);
  ASSERT_EQ(c->queues.size(), 1u);
  EXPECT_EQ(c->queues[0].signaled_sends, 1u);
  EXPECT_EQ(c->queues[0].unsignaled_sends, 2u);
  EXPECT_EQ(c->queues[0].recvs, 2u);
  EXPECT_EQ(c->CouldComplete(), 3u);
  // The signaled send's completion retires it and the unsignaled one
  // before it; the last unsignaled send can then never complete alone.
  EXPECT_TRUE(b.f.Poll(b.cq, {Wc(b.qpn, 2)}).empty());
  books = b.f.eng.Outstanding();
  c = Find(books, b.cq);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(c->queues[0].signaled_sends, 0u);
  EXPECT_EQ(c->queues[0].unsignaled_sends, 1u);
  EXPECT_EQ(c->CouldComplete(), 2u);  // the receives
}

TEST(HangBooks, UnsignaledSendsOnlyCompleteInAFlush) {
  Basic b;
  b.f.PostSend(b.qp, {Wr(1, false, {b.sg()})});
  auto books = b.f.eng.Outstanding();
  EXPECT_EQ(books[0].CouldComplete(), 0u);
  b.f.ModifyQp(b.qp, IBV_QPS_ERR);  // every outstanding WR is flushed now
  books = b.f.eng.Outstanding();
  EXPECT_EQ(books[0].queues[0].state, static_cast<uint32_t>(IBV_QPS_ERR));
  EXPECT_EQ(books[0].CouldComplete(), 1u);
}

TEST(HangBooks, SendAndReceiveSidesLandOnTheirOwnCqs) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId ch = f.CreateChannel();
  ObjId scq = f.CreateCq(64), rcq = f.CreateCq(64, ch);
  ObjId qp = f.CreateQp(pd, scq, rcq, Caps(8));
  f.ToRts(qp);
  f.PostSend(qp, {Wr(1, true, {Sg(0x10000, 8, 0x11)})});
  auto books = f.eng.Outstanding();
  ASSERT_EQ(books.size(), 2u);
  EXPECT_EQ(books[0].cq, scq);  // in CQ id order
  EXPECT_EQ(books[1].cq, rcq);
  EXPECT_EQ(books[0].CouldComplete(), 1u);
  EXPECT_EQ(books[1].CouldComplete(), 0u);  // no receive posted: nothing can land there
  EXPECT_EQ(books[1].channel, ch);
  EXPECT_EQ(books[0].channel, 0u);
}

TEST(HangBooks, SrqReceivesCountOnTheirCq) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq = f.CreateCq(64);
  ObjId srq = f.CreateSrq(pd, 16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8), false, srq);
  f.ToRts(qp);
  f.PostSrqRecv(srq, {Rwr(1, {Sg(0x10000, 8, 0x11)}), Rwr(2, {Sg(0x10000, 8, 0x11)})});
  auto books = f.eng.Outstanding();
  ASSERT_EQ(books.size(), 1u);
  ASSERT_EQ(books[0].queues.size(), 2u);
  EXPECT_EQ(books[0].queues[0].qp, qp);
  EXPECT_EQ(books[0].queues[0].recvs, 0u);  // its receives are the SRQ's
  EXPECT_EQ(books[0].queues[1].srq, srq);
  EXPECT_EQ(books[0].queues[1].recvs, 2u);
  EXPECT_EQ(books[0].CouldComplete(), 2u);
}

TEST(HangBooks, UnackedEventsAndDestroyedCqs) {
  Fx f;
  ObjId ch = f.CreateChannel();
  ObjId cq = f.CreateCq(16, ch), other = f.CreateCq(16);
  f.ReqNotify(cq);
  f.Poll(cq, {});
  f.Wait(ch);
  f.GetEvent(cq, ch);
  auto books = f.eng.Outstanding();
  ASSERT_EQ(books.size(), 2u);
  EXPECT_EQ(books[0].events_unacked, 1u);
  EXPECT_TRUE(books[0].queues.empty());
  f.Ack(cq, 1);
  f.DestroyCq(other);
  books = f.eng.Outstanding();
  ASSERT_EQ(books.size(), 1u);
  EXPECT_EQ(books[0].events_unacked, 0u);
}

// Thread-safe: asked while other threads post and poll on their own QPs.
TEST(HangBooks, ConcurrentWithTheDataPath) {
  Engine eng(/*assign_seq=*/true);
  uint64_t id = 1;
  auto feed = [&](Event e) {
    std::vector<Finding> fs;
    eng.OnEvent(e, &fs, nullptr);
  };
  auto make = [&](EventKind k, auto&& fill) {
    Event e;
    e.kind = k;
    e.obj = id++;
    fill(e);
    feed(e);
    return e.obj;
  };
  ObjId pd = make(EventKind::kAllocPd, [](Event&) {});
  make(EventKind::kRegMr, [&](Event& e) {
    e.parent = pd;
    e.addr = e.iova = 0x10000;
    e.length = 0x10000;
    e.lkey = 0x11;
    e.access = kAllAccess;
  });
  constexpr int kThreads = 3;
  ObjId cqs[kThreads], qps[kThreads];
  for (int t = 0; t < kThreads; ++t) {
    cqs[t] = make(EventKind::kCreateCq, [](Event& e) { e.cqe = 4096; });
    qps[t] = make(EventKind::kCreateQp, [&](Event& e) {
      e.parent = pd;
      e.send_cq = e.recv_cq = cqs[t];
      e.qp_type = IBV_QPT_RC;
      e.qp_num = 0x100 + t;
      e.caps = Caps(64);
    });
    for (uint32_t s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      Event e;
      e.kind = EventKind::kModifyQp;
      e.obj = qps[t];
      e.attr_mask = IBV_QP_STATE;
      e.qp_state = s;
      feed(e);
    }
  }
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      for (uint64_t i = 0; !stop.load(); ++i) {
        Event p;
        p.kind = EventKind::kPostSend;
        p.obj = qps[t];
        p.send_wrs.push_back(Wr(i, true, {Sg(0x10000, 8, 0x11)}));
        std::vector<Finding> fs;
        eng.OnEvent(p, &fs, nullptr);
        Event c;
        c.kind = EventKind::kPollCq;
        c.obj = cqs[t];
        c.count = 1;
        c.wcs.push_back(Wc(0x100 + t, i));
        eng.OnEvent(c, &fs, nullptr);
      }
    });
  for (int i = 0; i < 200; ++i) {
    auto books = eng.Outstanding();
    ASSERT_EQ(books.size(), static_cast<size_t>(kThreads));
    for (const auto& b : books) EXPECT_LE(b.CouldComplete(), 1u);  // one post ahead of its poll at most
  }
  stop = true;
  for (auto& t : threads) t.join();
}

}  // namespace hang_books

}  // namespace
}  // namespace rdmasan::checkers_testing
