// Completions polled ahead of their post's books (checkers/state_early.cc):
// a second thread polls between the provider's post and the posting
// thread's books.  The WR must not stay outstanding; a completion no post
// matches must not retire an unrelated later WR.
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

using checkers::OneRecv;
using checkers::OneSend;
using checkers::RetiredWr;

TEST(CheckersEarly, SendPolledBeforeItsBooksIsRetiredByThem) {
  Basic b;
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 7)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(7, true, {b.sg()}, IBV_WR_RDMA_WRITE)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
  EXPECT_EQ(b.f.eng.state().PendingOn(b.cq), 0u);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);  // no dereg-in-flight
  EXPECT_EQ(b.f.DestroyQp(b.qp), kNone);
}

TEST(CheckersEarly, UnsignaledWrsBeforeItGoWithIt) {
  Basic b;
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 1u);  // 1 waits: 3 is not in the books yet
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, false, {b.sg()}), Wr(3, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
  EXPECT_EQ(b.f.Qp(b.qp).sq_signaled, 0u);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

TEST(CheckersEarly, ReceivePolledBeforeItsBooksIsRetiredByThem) {
  Basic b;
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 5, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(5, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.Qp(b.qp).rq.size(), 0u);
  EXPECT_EQ(b.f.eng.state().PendingOn(b.cq), 0u);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

TEST(CheckersEarly, SrqReceivePolledBeforeItsBooksIsRetiredByThem) {
  SrqSetup s;
  EXPECT_EQ(s.f.Poll(s.cq, {Wc(Fx::Qpn(s.b), 3, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {s.R(1), s.R(3)}), kNone);
  EXPECT_EQ(SrqWrIds(s.f, s.srq), (std::vector<uint64_t>{1}));
  EXPECT_EQ(s.f.eng.state().PendingOn(s.cq), 1u);
}

TEST(CheckersEarly, FlushOnAnEmptySqIsRetiredByItsPost) {
  // A QP in ERR flushes a WR inside its post; the flush was polled first.
  Basic b;
  b.f.ModifyQp(b.qp, IBV_QPS_ERR);
  b.f.Poll(b.cq, {Wc(b.qpn, 9, IBV_WC_WR_FLUSH_ERR)});
  b.f.PostSend(b.qp, {Wr(9, false, {b.sg()})});  // post-after-error may speak
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

TEST(CheckersEarly, AFlushOfEitherQueueIsMatchedByItsWrId) {
  // One CQ for both queues, both empty: the flush may be a receive's.
  Basic b;
  b.f.ModifyQp(b.qp, IBV_QPS_ERR);
  b.f.Poll(b.cq, {Wc(b.qpn, 5, IBV_WC_WR_FLUSH_ERR)});
  b.f.PostRecv(b.qp, {Rwr(4, {b.sg()})});  // another wr_id: stays
  EXPECT_EQ(b.f.Qp(b.qp).rq.size(), 1u);
  b.f.Poll(b.cq, {Wc(b.qpn, 4, IBV_WC_WR_FLUSH_ERR)});
  EXPECT_EQ(b.f.Qp(b.qp).rq.size(), 0u);
  b.f.PostRecv(b.qp, {Rwr(5, {b.sg()})});
  EXPECT_EQ(b.f.Qp(b.qp).rq.size(), 0u);
  EXPECT_EQ(b.f.eng.state().PendingOn(b.cq), 0u);
}

TEST(CheckersEarly, AnUnmatchedCompletionExpiresAfterItsPosts) {
  // wr_id 9 completes with nothing of that id ever posted: after
  // EarlyWcs::kPosts posts it no longer retires a WR with that id.
  Basic b;
  b.f.Poll(b.cq, {Wc(b.qpn, 9)});
  for (uint64_t i = 0; i < checkers::EarlyWcs::kPosts; ++i) {
    EXPECT_EQ(b.f.PostSend(b.qp, {Wr(100 + i, true, {b.sg()})}), kNone);
    EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 100 + i)}), kNone);
  }
  EXPECT_EQ(b.f.Qp(b.qp).early.n, 0u);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(9, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 1u);
  EXPECT_EQ(b.f.DeregMr(b.mr), Ids{"dereg-in-flight"});
}

TEST(CheckersEarly, WithinItsPostsItStillMatches) {
  Basic b;
  b.f.Poll(b.cq, {Wc(b.qpn, 9)});
  for (uint64_t i = 0; i + 1 < checkers::EarlyWcs::kPosts; ++i) {
    b.f.PostSend(b.qp, {Wr(100 + i, true, {b.sg()})});
    b.f.Poll(b.cq, {Wc(b.qpn, 100 + i)});
  }
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(9, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
}

TEST(CheckersEarly, ResetDropsThem) {
  Basic b;
  b.f.Poll(b.cq, {Wc(b.qpn, 9)});
  b.f.ModifyQp(b.qp, IBV_QPS_RESET);
  EXPECT_EQ(b.f.Qp(b.qp).early.n, 0u);
}

TEST(CheckersEarly, AtMostKMaxAreKeptTheOldestDroppedFirst) {
  Basic b(64);
  const uint64_t k = checkers::EarlyWcs::kMax;
  for (uint64_t i = 0; i <= k; ++i) b.f.Poll(b.cq, {Wc(b.qpn, 200 + i)});
  EXPECT_EQ(b.f.Qp(b.qp).early.n, k);
  std::vector<SendWr> chain;
  for (uint64_t i = 0; i <= k; ++i) chain.push_back(Wr(200 + i, true, {b.sg()}));
  b.f.PostSend(b.qp, chain);
  // The newest retired its WR and every one before it, 200 (dropped) too.
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
  EXPECT_EQ(b.f.Qp(b.qp).early.n, 0u);
}

// The compact entries (the live data path's) keep the same books.
TEST(CheckersEarly, CompactEntriesRetireThemToo) {
  Basic b;
  std::vector<RetiredWr> retired;
  const Completion send = Wc(b.qpn, 7, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE);
  ASSERT_TRUE(b.f.eng.PollSucceeded(b.cq, &send, 1, &retired));
  OneSend s;
  s.qp = b.qp;
  s.stack = 1;
  s.opcode = IBV_WR_RDMA_WRITE;
  s.send_flags = IBV_SEND_SIGNALED;
  s.num_sge = 1;
  s.has_sge = true;
  s.wr_id = 7;
  s.sge = b.sg();
  ASSERT_TRUE(b.f.eng.PostOneSend(s));
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);

  const Completion recv = Wc(b.qpn, 8, IBV_WC_SUCCESS, IBV_WC_RECV);
  ASSERT_TRUE(b.f.eng.PollSucceeded(b.cq, &recv, 1, &retired));
  OneRecv r;
  r.qp = b.qp;
  r.stack = 2;
  r.num_sge = 1;
  r.has_sge = true;
  r.wr_id = 8;
  r.sge = b.sg();
  ASSERT_TRUE(b.f.eng.PostOneRecv(r));
  EXPECT_EQ(b.f.Qp(b.qp).rq.size(), 0u);
  EXPECT_EQ(b.f.eng.state().PendingOn(b.cq), 0u);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

}  // namespace
}  // namespace rdmasan::checkers_testing
