// checkers_test: sq-overflow (the SQ model: what a completion retires), unsignaled-deadlock,
// unsignaled-run.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <cerrno>

#include <gtest/gtest.h>

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ============================================================ SQ model ==

TEST(CheckersSqOverflow, FillingExactlyIsSilentOneMoreOverflows) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 8, 1, true)), kNone);  // all signaled
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(8, true)}), Ids{"sq-overflow"});
}

TEST(CheckersSqOverflow, OneChainLongerThanTheSq) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 9, 1, true)), Ids{"sq-overflow"});
}

TEST(CheckersSqOverflow, LimitIsTheReturnedMaxSendWr) {
  // A provider may round up: the event carries what it returned (13).
  Basic b(13);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 13, 1, true)), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(13, true)}), Ids{"sq-overflow"});
}

TEST(CheckersSqOverflow, UnsignaledRetiredByLaterSignaledNoOverflowAfter) {
  // The near-miss: max_send_wr WRs with the last one signaled, poll
  // its completion, post max_send_wr again: silent.
  Basic b(2);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 2)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, false), Wr(4, true)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 2u);
}

TEST(CheckersSqOverflow, HalfMarkSignalingRetiredByPollsNeverOverflows) {
  // max_send_wr 8, signaled at the half mark and at the end; the completions
  // of both are polled, and the SQ refilled, ten times over.
  Basic b(8);
  for (int round = 0; round < 10; ++round) {
    const uint64_t base = round * 8;
    EXPECT_EQ(b.f.PostSend(b.qp, Chain(base, 8, 4, true)), kNone) << round;
    EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, base + 3), Wc(b.qpn, base + 7)}), kNone) << round;
    EXPECT_EQ(b.f.SqSize(b.qp), 0u) << round;
  }
}

TEST(CheckersSqOverflow, SignaledCompletionRetiresEarlierNotLater) {
  Basic b(8);
  // u u S u
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, false), Wr(3, true), Wr(4, false)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3)}), kNone);
  ASSERT_EQ(b.f.SqSize(b.qp), 1u);
  EXPECT_EQ(b.f.Qp(b.qp).sq.front().wr_id, 4u);
  // 1 outstanding + 7 fits; one more does not.
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(10, 7, 1, true)), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(20, true)}), Ids{"sq-overflow"});
}

TEST(CheckersSqOverflow, CompletionOfOneSignaledWrDoesNotRetireTheNextSignaled) {
  Basic b(4);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(1, 4, 1, true)), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 2)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 2u);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(5, 2, 1, true)), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(7, true)}), Ids{"sq-overflow"});
}

TEST(CheckersSqOverflow, ErrorAndFlushCompletionsRetireOneEachInOrder) {
  Basic b(8);
  // u u u S: an error on the first, then flushes, one at a time.
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, false), Wr(3, false), Wr(4, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_REM_ACCESS_ERR)}), Ids{"error-completion"});
  ASSERT_EQ(b.f.SqSize(b.qp), 3u);
  EXPECT_EQ(b.f.Qp(b.qp).sq.front().wr_id, 2u);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 2, IBV_WC_WR_FLUSH_ERR)}), kNone);
  ASSERT_EQ(b.f.SqSize(b.qp), 2u);
  EXPECT_EQ(b.f.Qp(b.qp).sq.front().wr_id, 3u);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3, IBV_WC_WR_FLUSH_ERR), Wc(b.qpn, 4, IBV_WC_WR_FLUSH_ERR)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
}

TEST(CheckersSqOverflow, FlushesWithEqualWrIdsRetireOneEach) {
  // Programs often leave wr_id 0 everywhere.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(0, false), Wr(0, false), Wr(0, true)}), kNone);
  EXPECT_EQ(b.f.ModifyQp(b.qp, IBV_QPS_ERR), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 3u);  // moving to ERR retires nothing: flushes do
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 0, IBV_WC_WR_FLUSH_ERR)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 2u);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 0, IBV_WC_WR_FLUSH_ERR)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 1u);
}

TEST(CheckersSqOverflow, SqSigAllMakesEveryWrSignaled) {
  Basic b(8, /*sig_all=*/true);
  // No flags at all: no unsignaled-run, no unsignaled-deadlock.
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 8, 0, false)), kNone);
  for (const auto& w : b.f.Qp(b.qp).sq) EXPECT_TRUE(w.signaled);
  // The completion of WR 0 retires WR 0 only.
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 0)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 7u);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(8, false)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(9, false)}), Ids{"sq-overflow"});
}

TEST(CheckersSqOverflow, CompletionWithTheIdOfAnUnsignaledWrRetiresNothing) {
  // Without sq_sig_all an unsignaled WR produces no completion; a success
  // completion naming its wr_id (a different, later signaled WR reusing the
  // id aside) does not retire it.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 2u);
}

TEST(CheckersSqOverflow, FailedPostOnlyTheAcceptedPrefixOccupies) {
  Basic b(4);
  // The provider took WRs 0 and 1 and rejected the chain at index 2.
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 3, 1, true), 0, ENOMEM, 2), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 2u);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(10, 2, 1, true)), kNone);
}

TEST(CheckersSqModel, ACompletionOfAQpNotBoundToThePolledCqRetiresNothing) {
  Basic b(8);
  ObjId cq2 = b.f.CreateCq(64);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.Poll(cq2, {Wc(b.qpn, 1)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 1u);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1)}), kNone);
  EXPECT_EQ(b.f.SqSize(b.qp), 0u);
}

// ================================================= unsignaled-deadlock ==

TEST(CheckersUnsignaledDeadlock, SqFilledWithOnlyUnsignaled) {
  Basic b(4);
  // 4 unsignaled also pass half of 4: both are reported, in check order.
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 4, 0, false)), (Ids{"unsignaled-deadlock", "unsignaled-run"}));
}

TEST(CheckersUnsignaledDeadlock, AcrossPostsAfterTheSignaledWasRetired) {
  Basic b(4);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 2)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, false), Wr(4, false)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, false), Wr(6, false)}), (Ids{"unsignaled-deadlock", "unsignaled-run"}));
}

TEST(CheckersUnsignaledDeadlock, FillingWrSignaledIsSilent) {
  Basic b(4);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, true), Wr(3, false), Wr(4, true)}), kNone);
}

TEST(CheckersUnsignaledDeadlock, SignaledStillOutstandingIsSilent) {
  // The SQ is full, but a signaled WR in it will retire its predecessors.
  Basic b(4);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false), Wr(2, true), Wr(3, false), Wr(4, false)}), kNone);
}

TEST(CheckersUnsignaledDeadlock, NotFullIsSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 4, 0, false)), kNone);
}

// ====================================================== unsignaled-run ==

TEST(CheckersUnsignaledRun, SignalingExactlyAtTheHalfMarkIsSilent) {
  // max_send_wr 8: every 4th WR signaled, i.e. at the half mark; completions
  // polled as they come; 20 rounds.
  Basic b(8);
  for (int round = 0; round < 20; ++round) {
    const uint64_t base = round * 4;
    EXPECT_EQ(b.f.PostSend(b.qp, Chain(base, 4, 4, false)), kNone) << round;
    EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, base + 3)}), kNone) << round;
  }
}

TEST(CheckersUnsignaledRun, RunOfExactlyHalfThenSignaledIsSilent) {
  // 4 unsignaled (the run reaches half of 8, does not pass it), then signaled.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(0, false), Wr(1, false), Wr(2, false), Wr(3, false), Wr(4, true)}), kNone);
}

TEST(CheckersUnsignaledRun, RunPassingHalfWarns) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 5, 0, false)), Ids{"unsignaled-run"});
}

TEST(CheckersUnsignaledRun, RunAcrossPostsWarns) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(0, 3, 0, false)), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, Chain(3, 2, 0, false)), Ids{"unsignaled-run"});
}

TEST(CheckersUnsignaledRun, SignaledWrResetsTheRun) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(0, false), Wr(1, false), Wr(2, false), Wr(3, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(4, false), Wr(5, false), Wr(6, false), Wr(7, true)}), kNone);
}

TEST(CheckersUnsignaledRun, OddDepth) {
  // max_send_wr 5: half is 2.5; a run of 2 is fine, 3 passes it.
  Basic b(5);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(0, false), Wr(1, false), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 2)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, false), Wr(4, false), Wr(5, false), Wr(6, true)}),
            Ids{"unsignaled-run"});
}

}  // namespace
}  // namespace rdmasan::checkers_testing
