// checkers_test: completions: error-completion, and how completions retire receives
// (checkers/keyed_ring.h, SRQs, flushes).
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "checkers/engine.h"
#include "checkers/keyed_ring.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ==================================================== error-completion ==

TEST(CheckersErrorCompletion, OncePerQpWithTheFailedWrStack) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}, /*stack=*/501), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true)}, /*stack=*/502), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, true), Wr(4, true)}, /*stack=*/503), kNone);
  EXPECT_EQ(
      b.f.Poll(b.cq, {Wc(b.qpn, 1), Wc(b.qpn, 2, IBV_WC_REM_ACCESS_ERR), Wc(b.qpn, 3, IBV_WC_WR_FLUSH_ERR)}),
      Ids{"error-completion"});
  ASSERT_EQ(b.f.last.size(), 1u);
  bool found = false;
  for (const auto& r : b.f.last[0].related) found |= r.stack == 502;
  EXPECT_TRUE(found) << "the stack of the failed WR (502) is not among the related stacks";
  for (const auto& r : b.f.last[0].related) EXPECT_NE(r.stack, 501u);
  // Reported once per QP: a later non-flush error on it is silent.
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 4, IBV_WC_RETRY_EXC_ERR)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
}

TEST(CheckersErrorCompletion, TwoErrorsInOneBatchReportOnce) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_LOC_PROT_ERR), Wc(b.qpn, 2, IBV_WC_LOC_PROT_ERR)}),
            Ids{"error-completion"});
}

TEST(CheckersErrorCompletion, EachQpReported) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId a = f.CreateQp(pd, cq, cq, Caps(8));
  ObjId b = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(a);
  f.ToRts(b);
  EXPECT_EQ(f.PostSend(a, {Wr(1, true)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(1, true)}), kNone);
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(a), 1, IBV_WC_RETRY_EXC_ERR), Wc(Fx::Qpn(b), 1, IBV_WC_RETRY_EXC_ERR)}),
            (Ids{"error-completion", "error-completion"}));
}

TEST(CheckersErrorCompletion, FlushesAloneAreSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.ModifyQp(b.qp, IBV_QPS_ERR), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_WR_FLUSH_ERR), Wc(b.qpn, 2, IBV_WC_WR_FLUSH_ERR)}), kNone);
}

TEST(CheckersErrorCompletion, SuccessIsSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1)}), kNone);
}

TEST(CheckersErrorCompletion, ReceiveErrorCarriesTheReceiveStack) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId scq = f.CreateCq(16), rcq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, scq, rcq, Caps(8));
  f.ToRts(qp);
  EXPECT_EQ(f.PostRecv(qp, {Rwr(7, {Sg(0x10000, 64, 0x11)})}, /*stack=*/777), kNone);
  EXPECT_EQ(f.Poll(rcq, {Wc(Fx::Qpn(qp), 7, IBV_WC_LOC_LEN_ERR, 0)}), Ids{"error-completion"});
  ASSERT_EQ(f.last.size(), 1u);
  bool found = false;
  for (const auto& r : f.last[0].related) found |= r.stack == 777;
  EXPECT_TRUE(found);
}

TEST(CheckersErrorCompletion, SrqReceiveErrorCarriesTheReceiveStack) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId scq = f.CreateCq(16), rcq = f.CreateCq(16);
  ObjId srq = f.CreateSrq(pd, 16);
  ObjId qp = f.CreateQp(pd, scq, rcq, Caps(8, 0), false, srq);
  f.ToRts(qp);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(9, {Sg(0x10000, 64, 0x11)})}, /*stack=*/999), kNone);
  EXPECT_EQ(f.Poll(rcq, {Wc(Fx::Qpn(qp), 9, IBV_WC_LOC_LEN_ERR, 0)}), Ids{"error-completion"});
  ASSERT_EQ(f.last.size(), 1u);
  bool found = false;
  for (const auto& r : f.last[0].related) found |= r.stack == 999;
  EXPECT_TRUE(found) << "the stack of the failed SRQ receive (999) is not among the related stacks";
}

// ===================================================== SRQ retirement ==

// A KeyedRing element: the wr_id it is retired by, and which post it was.
struct Keyed {
  uint64_t wr_id = 0;
  int post = 0;
};

std::vector<int> Posts(const checkers::KeyedRing<Keyed>& r) {
  std::vector<int> v;
  for (const Keyed& k : r) v.push_back(k.post);
  return v;
}

TEST(KeyedRing, FrontRetirementNeedsNoIndexAndKeepsTheSpanTight) {
  checkers::KeyedRing<Keyed> r;
  int post = 0;
  for (int i = 0; i < 4096; ++i) r.push_back(i).post = post++;
  for (int i = 0; i < 100000; ++i) {
    ASSERT_TRUE(r.Retire(i));
    r.push_back(4096 + i).post = post++;
  }
  EXPECT_FALSE(r.indexed());
  EXPECT_EQ(r.size(), 4096u);
  EXPECT_EQ(r.span(), 4096u);
  EXPECT_EQ(r.front().wr_id, 100000u);
}

TEST(KeyedRing, OutOfOrderRetirementKeepsTheOrderOfTheRest) {
  checkers::KeyedRing<Keyed> r;
  for (int i = 0; i < 6; ++i) r.push_back(10 + i).post = i;
  EXPECT_TRUE(r.Retire(13));  // the middle
  EXPECT_TRUE(r.indexed());
  EXPECT_TRUE(r.Retire(15));  // the newest
  EXPECT_EQ(Posts(r), (std::vector<int>{0, 1, 2, 4}));
  EXPECT_EQ(r.size(), 4u);
  EXPECT_TRUE(r.Retire(10));  // the front
  EXPECT_TRUE(r.Retire(11));
  EXPECT_EQ(Posts(r), (std::vector<int>{2, 4}));
  EXPECT_EQ(r.front().post, 2);
  EXPECT_TRUE(r.Retire(12));  // the tombstone behind it goes with it
  EXPECT_EQ(r.span(), 2u);    // post 4, and the tombstone of post 5
  EXPECT_EQ(r.front().post, 4);
  EXPECT_FALSE(r.Retire(13));  // retired already
  EXPECT_FALSE(r.Retire(99));
  EXPECT_EQ(r.size(), 1u);
  // Posts after the index was built are found by it too.
  r.push_back(20).post = 6;
  r.push_back(21).post = 7;
  EXPECT_TRUE(r.Retire(21));
  EXPECT_EQ(Posts(r), (std::vector<int>{4, 6}));
}

TEST(KeyedRing, DuplicateWrIdsRetireOldestFirst) {
  checkers::KeyedRing<Keyed> r;
  r.push_back(1).post = 0;
  r.push_back(7).post = 1;
  r.push_back(2).post = 2;
  r.push_back(7).post = 3;
  r.push_back(7).post = 4;
  EXPECT_TRUE(r.Retire(7));
  EXPECT_EQ(Posts(r), (std::vector<int>{0, 2, 3, 4}));
  r.push_back(7).post = 5;
  EXPECT_TRUE(r.Retire(7));
  EXPECT_EQ(Posts(r), (std::vector<int>{0, 2, 4, 5}));
  r.pop_front();  // post 0 (wr_id 1)
  r.pop_front();  // post 2 (wr_id 2): now a 7 is at the front
  EXPECT_EQ(r.front().post, 4);
  EXPECT_TRUE(r.Retire(7));
  EXPECT_TRUE(r.Retire(7));
  EXPECT_FALSE(r.Retire(7));
  EXPECT_TRUE(r.empty());
}

TEST(KeyedRing, AStuckFrontDoesNotGrowTheSpan) {
  // The oldest receive never completes while every later one does: the
  // tombstones behind it are compacted away, the order kept.
  checkers::KeyedRing<Keyed> r;
  r.push_back(~uint64_t{0}).post = -1;
  for (int i = 0; i < 8; ++i) r.push_back(i).post = i;
  for (int i = 0; i < 100000; ++i) {
    ASSERT_TRUE(r.Retire(i));
    r.push_back(8 + i).post = 8 + i;
    ASSERT_LE(r.span(), 2 * r.size() + 16);
  }
  EXPECT_EQ(Posts(r), (std::vector<int>{-1, 100000, 100001, 100002, 100003, 100004, 100005, 100006, 100007}));
  r.clear();
  EXPECT_TRUE(r.empty());
  EXPECT_FALSE(r.indexed());
  EXPECT_EQ(r.begin(), r.end());
  r.push_back(3).post = 3;
  EXPECT_TRUE(r.Retire(3));
  EXPECT_TRUE(r.empty());
}

TEST(KeyedRing, MatchesAListThatErasesTheFirstMatch) {
  // The retirement rule as the books had it (scan from the oldest, erase
  // the first match, else drop the oldest), against random streams with
  // few distinct wr_ids (many duplicates) and runs of in-order retirement.
  std::mt19937 rng(7);
  for (int round = 0; round < 40; ++round) {
    checkers::KeyedRing<Keyed> r;
    std::vector<Keyed> model;
    int post = 0;
    const uint32_t ids = 2 + rng() % 40;
    for (int step = 0; step < 3000; ++step) {
      const uint32_t op = rng() % 10;
      if (op < 4 || model.empty()) {
        const uint64_t id = rng() % ids;
        r.push_back(id).post = post;
        model.push_back({id, post++});
      } else if (op < 6) {
        // The oldest's wr_id: the in-order common case.
        const uint64_t id = model.front().wr_id;
        ASSERT_TRUE(r.Retire(id));
        model.erase(model.begin());
      } else if (op < 9) {
        const uint64_t id = rng() % (ids + 2);  // sometimes one that is not there
        auto it = std::find_if(model.begin(), model.end(), [id](const Keyed& k) { return k.wr_id == id; });
        const bool found = r.Retire(id);
        ASSERT_EQ(found, it != model.end()) << "round " << round << " step " << step;
        if (found) model.erase(it);
      } else {
        r.pop_front();
        model.erase(model.begin());
      }
      ASSERT_EQ(r.size(), model.size());
      ASSERT_LE(r.span(), 2 * r.size() + 16);
      if (!model.empty()) {
        ASSERT_EQ(r.front().post, model.front().post);
      }
      if (step % 97 == 0) {
        std::vector<int> want;
        for (const Keyed& k : model) want.push_back(k.post);
        ASSERT_EQ(Posts(r), want) << "round " << round << " step " << step;
      }
    }
  }
}

TEST(CheckersSrqRetirement, CompletionsAcrossQpsRetireTheirOwnReceives) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq_a = f.CreateCq(64), cq_b = f.CreateCq(64);
  ObjId srq = f.CreateSrq(pd, 16);
  ObjId a = f.CreateQp(pd, cq_a, cq_a, Caps(8, 0), false, srq);
  ObjId b = f.CreateQp(pd, cq_b, cq_b, Caps(8, 0), false, srq);
  f.ToRts(a);
  f.ToRts(b);
  std::vector<RecvWr> wrs;
  for (int i = 0; i < 8; ++i) wrs.push_back(Rwr(i, {Sg(0x10000 + 64 * i, 64, 0x11)}));
  EXPECT_EQ(f.PostSrqRecv(srq, wrs), kNone);
  // QP b's messages took receives 1 and 5; QP a's 0 and 2; b's CQ is
  // polled first.
  EXPECT_EQ(f.Poll(cq_b, {Wc(Fx::Qpn(b), 1, IBV_WC_SUCCESS, IBV_WC_RECV),
                          Wc(Fx::Qpn(b), 5, IBV_WC_SUCCESS, IBV_WC_RECV)}),
            kNone);
  EXPECT_EQ(SrqWrIds(f, srq), (std::vector<uint64_t>{0, 2, 3, 4, 6, 7}));
  EXPECT_EQ(f.eng.state().PendingOn(cq_a), 6u);
  EXPECT_EQ(f.Poll(cq_a, {Wc(Fx::Qpn(a), 0, IBV_WC_SUCCESS, IBV_WC_RECV),
                          Wc(Fx::Qpn(a), 2, IBV_WC_SUCCESS, IBV_WC_RECV)}),
            kNone);
  EXPECT_EQ(SrqWrIds(f, srq), (std::vector<uint64_t>{3, 4, 6, 7}));
  // A wr_id the SRQ does not hold retires the oldest receive.
  EXPECT_EQ(f.Poll(cq_a, {Wc(Fx::Qpn(a), 0x99, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_EQ(SrqWrIds(f, srq), (std::vector<uint64_t>{4, 6, 7}));
  EXPECT_EQ(f.eng.state().PendingOn(cq_b), 3u);
  // Refilled to the limit, and one more is an overflow: the books count
  // live receives, not the slots that retired ones left behind.
  wrs.clear();
  for (int i = 8; i < 21; ++i) wrs.push_back(Rwr(i, {Sg(0x10000, 64, 0x11)}));
  EXPECT_EQ(f.PostSrqRecv(srq, wrs), kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(21, {Sg(0x10000, 64, 0x11)})}), Ids{"rq-overflow"});
}

TEST(CheckersSrqRetirement, DuplicateWrIdsRetireTheOldestAndErrorsNameIt) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId scq = f.CreateCq(64), rcq = f.CreateCq(64);
  ObjId srq = f.CreateSrq(pd, 16);
  ObjId qp = f.CreateQp(pd, scq, rcq, Caps(8, 0), false, srq);
  f.ToRts(qp);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(1, {Sg(0x10000, 64, 0x11)})}, /*stack=*/501), kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(7, {Sg(0x10000, 64, 0x11)})}, /*stack=*/502), kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(7, {Sg(0x10000, 64, 0x11)})}, /*stack=*/503), kNone);
  EXPECT_EQ(f.Poll(rcq, {Wc(Fx::Qpn(qp), 7, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  std::vector<StackId> stacks;
  for (const auto& w : f.eng.state().Srq(srq)->rq) stacks.push_back(w.stack);
  EXPECT_EQ(stacks, (std::vector<StackId>{501, 503}));
  // The error completion of the other 7 names the receive still posted.
  EXPECT_EQ(f.Poll(rcq, {Wc(Fx::Qpn(qp), 7, IBV_WC_LOC_LEN_ERR, 0)}), Ids{"error-completion"});
  ASSERT_EQ(f.last.size(), 1u);
  bool found = false;
  for (const auto& r : f.last[0].related) found |= r.stack == 503;
  EXPECT_TRUE(found);
  EXPECT_EQ(SrqWrIds(f, srq), (std::vector<uint64_t>{1}));
}

TEST(CheckersSrqRetirement, RetiredReceivesAreNotInFlight) {
  // A receive retired from the middle of the SRQ (its slot a tombstone
  // until the front reaches it) no longer holds its MR.
  SrqSetup s;
  ObjId done = s.f.RegMr(s.pd, 0x40000, 0x1000, 0x44), busy = s.f.RegMr(s.pd, 0x50000, 0x1000, 0x55);
  EXPECT_EQ(
      s.f.PostSrqRecv(s.srq, {s.R(0), Rwr(1, {Sg(0x40000, 64, 0x44)}), Rwr(2, {Sg(0x50000, 64, 0x55)})}),
      kNone);
  EXPECT_EQ(s.f.Poll(s.cq, {Wc(Fx::Qpn(s.a), 1, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_FALSE(s.f.eng.state().LkeyInFlight(0x44));
  EXPECT_TRUE(s.f.eng.state().LkeyInFlight(0x55));
  EXPECT_EQ(s.f.DeregMr(done), kNone);
  EXPECT_EQ(s.f.DeregMr(busy), Ids{"dereg-in-flight"});
}

TEST(CheckersSrqRetirement, DeepSrqInOrderKeepsTheBooksExact) {
  // UCX's shape: 4095 receives posted, each completion reposted.
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq = f.CreateCq(8192);
  ObjId srq = f.CreateSrq(pd, 4095);
  ObjId a = f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq);
  ObjId b = f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq);
  f.ToRts(a);
  f.ToRts(b);
  std::vector<RecvWr> wrs;
  for (int i = 0; i < 4095; ++i) wrs.push_back(Rwr(i, {Sg(0x10000, 64, 0x11)}));
  EXPECT_EQ(f.PostSrqRecv(srq, wrs), kNone);
  for (uint64_t i = 0; i < 20000; ++i) {
    const ObjId qp = i % 3 ? a : b;
    ASSERT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), i, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
    ASSERT_EQ(f.PostSrqRecv(srq, {Rwr(4095 + i, {Sg(0x10000, 64, 0x11)})}), kNone);
  }
  const checkers::SrqState* s = f.eng.state().Srq(srq);
  EXPECT_EQ(s->rq.size(), 4095u);
  EXPECT_EQ(s->rq.front().wr_id, 20000u);
  EXPECT_FALSE(s->rq.indexed());
  EXPECT_EQ(f.eng.state().PendingOn(cq), 4095u);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(1, {Sg(0x10000, 64, 0x11)})}), Ids{"rq-overflow"});
}

TEST(CheckersRqRetirement, FlushRetiresOneEachInPostOrder) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq = f.CreateCq(64);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8, 8));
  f.ToRts(qp);
  std::vector<RecvWr> wrs;
  for (int i = 0; i < 4; ++i) wrs.push_back(Rwr(10 + i, {Sg(0x10000 + 64 * i, 64, 0x11)}));
  EXPECT_EQ(f.PostRecv(qp, wrs), kNone);
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), 10, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_EQ(f.Qp(qp).rq.size(), 3u);
  EXPECT_EQ(f.Qp(qp).rq.front().wr_id, 11u);
  // The QP fails: its receives come back flushed, in post order, on a CQ
  // that is both its send and its receive CQ (the wr_id tells the queue).
  EXPECT_EQ(f.ModifyQp(qp, IBV_QPS_ERR), kNone);
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), 11, IBV_WC_WR_FLUSH_ERR, 0)}), kNone);
  EXPECT_EQ(f.Qp(qp).rq.front().wr_id, 12u);
  EXPECT_EQ(
      f.Poll(cq, {Wc(Fx::Qpn(qp), 12, IBV_WC_WR_FLUSH_ERR, 0), Wc(Fx::Qpn(qp), 13, IBV_WC_WR_FLUSH_ERR, 0)}),
      kNone);
  EXPECT_TRUE(f.Qp(qp).rq.empty());
  EXPECT_EQ(f.eng.state().PendingOn(cq), 0u);
  // Nothing is left to retire: a stray flush changes nothing.
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), 14, IBV_WC_WR_FLUSH_ERR, 0)}), kNone);
  EXPECT_EQ(f.eng.state().PendingOn(cq), 0u);
}

}  // namespace
}  // namespace rdmasan::checkers_testing
