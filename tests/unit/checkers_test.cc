// Unit tests of checkers::Engine: hand-built core::Event sequences in, the
// exact CheckIds of the findings out (docs/RULES.md).  No verbs calls, no
// softnic: every event is made here, with object ids and stack ids chosen by
// the test.
#include <infiniband/verbs.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_split.h"

#include "checkers/engine.h"
#include "checkers/keyed_ring.h"
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
  // The issue's near-miss: max_send_wr WRs with the last one signaled, poll
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

// ========================================================= rq-overflow ==

TEST(CheckersRqOverflow, QpReceiveQueue) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq = f.CreateCq(256);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8, /*recv=*/4));
  EXPECT_EQ(f.ModifyQp(qp, IBV_QPS_INIT), kNone);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(f.PostRecv(qp, {Rwr(i, {Sg(0x10000 + 64 * i, 64, 0x11)})}), kNone);
  EXPECT_EQ(f.PostRecv(qp, {Rwr(4, {Sg(0x10000, 64, 0x11)})}), Ids{"rq-overflow"});
}

TEST(CheckersRqOverflow, PolledReceiveFreesItsSlot) {
  Basic b(8);
  // Basic's QP has max_recv_wr 16.
  std::vector<RecvWr> wrs;
  for (int i = 0; i < 16; ++i) wrs.push_back(Rwr(i, {b.sg(64 * i)}));
  EXPECT_EQ(b.f.PostRecv(b.qp, wrs), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 0, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(16, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(17, {b.sg()})}), Ids{"rq-overflow"});
}

TEST(CheckersRqOverflow, Srq) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId srq = f.CreateSrq(pd, 3);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(0, {Sg(0x10000, 64, 0x11)}), Rwr(1, {Sg(0x10040, 64, 0x11)}),
                                Rwr(2, {Sg(0x10080, 64, 0x11)})}),
            kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(3, {Sg(0x100c0, 64, 0x11)})}), Ids{"rq-overflow"});
}

// ========================================================== cq-overrun ==

TEST(CheckersCqOverrun, SummedOverTwoQpsOnOneCq) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(4);
  ObjId a = f.CreateQp(pd, cq, cq, Caps(8));
  ObjId b = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(a);
  f.ToRts(b);
  EXPECT_EQ(f.PostSend(a, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(1, true), Wr(2, true)}), kNone);
  // Unsignaled sends cannot complete on the CQ.
  EXPECT_EQ(f.PostSend(b, {Wr(3, false)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(4, true)}), Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, PollingMakesRoom) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(4);
  ObjId a = f.CreateQp(pd, cq, cq, Caps(8));
  ObjId b = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(a);
  f.ToRts(b);
  EXPECT_EQ(f.PostSend(a, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(a), 1), Wc(Fx::Qpn(b), 1)}), kNone);
  EXPECT_EQ(f.PostSend(a, {Wr(3, true)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(3, true)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(4, true)}), Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, SendsAndReceivesOfOneQpSummed) {
  Basic b(8, false, /*cqe=*/4);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(1, {b.sg()}), Rwr(2, {b.sg(64)})}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(3, {b.sg(128)})}), Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, SeparateSendAndRecvCqsCountedApart) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId scq = f.CreateCq(2), rcq = f.CreateCq(2);
  ObjId qp = f.CreateQp(pd, scq, rcq, Caps(8));
  f.ToRts(qp);
  EXPECT_EQ(f.PostSend(qp, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(f.PostRecv(qp, {Rwr(1, {Sg(0x10000, 64, 0x11)}), Rwr(2, {Sg(0x10040, 64, 0x11)})}), kNone);
  EXPECT_EQ(f.PostRecv(qp, {Rwr(3, {Sg(0x10080, 64, 0x11)})}), Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, SrqReceivesCountedOnceWithSendsOfItsQps) {
  SrqSetup s;
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {s.R(0), s.R(1), s.R(2)}), kNone);
  // 3 SRQ receives (not 6: two QPs share one SRQ) + 1 signaled send = 4.
  EXPECT_EQ(s.f.PostSend(s.a, {Wr(1, true)}), kNone);
  EXPECT_EQ(s.f.PostSend(s.b, {Wr(1, true)}), Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, PostingToTheSrqOverrunsTheCq) {
  // 5 receives on an SRQ whose QPs complete them on a 4-entry CQ.
  SrqSetup s;
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {s.R(0), s.R(1), s.R(2), s.R(3)}), kNone);
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {s.R(4)}), Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, CreateQpBindingAnSrqWithPostedReceives) {
  // cq-overrun is evaluated at create_qp too.  5 receives are
  // already posted on the SRQ; binding a QP of it to a 4-entry CQ lets 5
  // completions be pending there.
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq = f.CreateCq(4);
  ObjId srq = f.CreateSrq(pd, 16);
  std::vector<RecvWr> wrs;
  for (int i = 0; i < 5; ++i) wrs.push_back(Rwr(i, {Sg(0x10000 + 64 * i, 64, 0x11)}));
  EXPECT_EQ(f.PostSrqRecv(srq, wrs), kNone);
  Ids created;
  f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq, IBV_QPT_RC, &created);
  EXPECT_EQ(created, Ids{"cq-overrun"});
}

TEST(CheckersCqOverrun, QpCapacityAloneIsNotAnOverrun) {
  // Capacities are not summed: a QP sized beyond its CQ but posting little.
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(4);
  Ids created;
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(128, 128), false, 0, IBV_QPT_RC, &created);
  EXPECT_EQ(created, kNone);
  f.ToRts(qp);
  EXPECT_EQ(f.PostSend(qp, Chain(0, 4, 1, true)), kNone);
}

// ===================================================== dereg-in-flight ==

TEST(CheckersDeregInFlight, SendOutstanding) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), Ids{"dereg-in-flight"});
}

TEST(CheckersDeregInFlight, RightAfterTheRetiringCompletionIsSilent) {
  // The issue's near-miss: u u S referencing the MR, the S completion
  // polled, then the MR deregistered.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false, {b.sg(0)}), Wr(2, false, {b.sg(64)}), Wr(3, true, {b.sg(128)})}),
            kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3)}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

TEST(CheckersDeregInFlight, UnsignaledWhoseRetiringCompletionIsNotPolledYet) {
  // The signaled WR completed on the wire but was not polled: the earlier
  // unsignaled WR using the MR is still outstanding.
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId mr1 = f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId mr2 = f.RegMr(pd, 0x20000, 0x1000, 0x22);
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(qp);
  EXPECT_EQ(f.PostSend(qp, {Wr(1, false, {Sg(0x10000, 8, 0x11)}), Wr(2, true, {Sg(0x20000, 8, 0x22)})}),
            kNone);
  EXPECT_EQ(f.DeregMr(mr1), Ids{"dereg-in-flight"});
  (void)mr2;
}

TEST(CheckersDeregInFlight, ReceiveOutstanding) {
  Basic b(8);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(1, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), Ids{"dereg-in-flight"});
}

TEST(CheckersDeregInFlight, SrqReceiveOutstanding) {
  SrqSetup s;
  ObjId mr = s.f.RegMr(s.pd, 0x40000, 0x1000, 0x44);
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {Rwr(1, {Sg(0x40000, 64, 0x44)})}), kNone);
  EXPECT_EQ(s.f.DeregMr(mr), Ids{"dereg-in-flight"});
}

TEST(CheckersDeregInFlight, InlineWrDoesNotReferenceTheMr) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg(0, 16)}, IBV_WR_SEND, IBV_SEND_INLINE)}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

TEST(CheckersDeregInFlight, OtherMrIsSilent) {
  Basic b(8);
  ObjId other = b.f.RegMr(b.pd, 0x80000, 0x1000, 0x88);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.DeregMr(other), kNone);
}

TEST(CheckersDeregInFlight, AfterDestroyQpIsSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.DestroyQp(b.qp), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

// ====================================================== destroy-in-use ==

TEST(CheckersDestroyInUse, CqWithQp) {
  Basic b(8);
  EXPECT_EQ(b.f.DestroyCq(b.cq), Ids{"destroy-in-use"});
}

TEST(CheckersDestroyInUse, CqAfterItsQpIsSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.DestroyQp(b.qp), kNone);
  EXPECT_EQ(b.f.DestroyCq(b.cq), kNone);
}

TEST(CheckersDestroyInUse, PdWithMr) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId mr = f.RegMr(pd, 0x10000, 0x1000, 0x11);
  EXPECT_EQ(f.DeallocPd(pd), Ids{"destroy-in-use"});
  (void)mr;
}

TEST(CheckersDestroyInUse, PdAfterDeregIsSilent) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId mr = f.RegMr(pd, 0x10000, 0x1000, 0x11);
  EXPECT_EQ(f.DeregMr(mr), kNone);
  EXPECT_EQ(f.DeallocPd(pd), kNone);
}

TEST(CheckersDestroyInUse, PdWithQpSrqOrAh) {
  {
    Fx f;
    ObjId pd = f.AllocPd();
    ObjId cq = f.CreateCq(8);
    f.CreateQp(pd, cq, cq, Caps(8));
    EXPECT_EQ(f.DeallocPd(pd), Ids{"destroy-in-use"});
  }
  {
    Fx f;
    ObjId pd = f.AllocPd();
    f.CreateSrq(pd, 8);
    EXPECT_EQ(f.DeallocPd(pd), Ids{"destroy-in-use"});
  }
  {
    Fx f;
    ObjId pd = f.AllocPd();
    f.CreateAh(pd);
    EXPECT_EQ(f.DeallocPd(pd), Ids{"destroy-in-use"});
  }
}

TEST(CheckersDestroyInUse, SrqWithQp) {
  SrqSetup s;
  EXPECT_EQ(s.f.DestroySrq(s.srq), Ids{"destroy-in-use"});
}

TEST(CheckersDestroyInUse, SrqAfterItsQpsIsSilent) {
  SrqSetup s;
  EXPECT_EQ(s.f.DestroyQp(s.a), kNone);
  EXPECT_EQ(s.f.DestroyQp(s.b), kNone);
  EXPECT_EQ(s.f.DestroySrq(s.srq), kNone);
}

TEST(CheckersDestroyInUse, AhWithOutstandingUdWr) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8), false, 0, IBV_QPT_UD);
  f.ToRts(qp);
  ObjId ah = f.CreateAh(pd);
  SendWr w = Wr(1, true, {Sg(0x10000, 64, 0x11)});
  w.ah = ah;
  w.remote_qpn = 0x77;
  EXPECT_EQ(f.PostSend(qp, {w}), kNone);
  EXPECT_EQ(f.DestroyAh(ah), Ids{"destroy-in-use"});
}

TEST(CheckersDestroyInUse, AhAfterTheUdWrCompletedIsSilent) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8), false, 0, IBV_QPT_UD);
  f.ToRts(qp);
  ObjId ah = f.CreateAh(pd);
  SendWr w = Wr(1, true, {Sg(0x10000, 64, 0x11)});
  w.ah = ah;
  EXPECT_EQ(f.PostSend(qp, {w}), kNone);
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), 1)}), kNone);
  EXPECT_EQ(f.DestroyAh(ah), kNone);
}

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

// ================================================= notify-without-poll ==

struct EventSetup {
  Fx f;
  ObjId pd, mr, ch, cq, qp;
  uint32_t qpn;
  EventSetup() {
    pd = f.AllocPd();
    mr = f.RegMr(pd, 0x10000, 0x10000, 0x11);
    ch = f.CreateChannel();
    cq = f.CreateCq(64, ch);
    qp = f.CreateQp(pd, cq, cq, Caps(16, 16));
    qpn = Fx::Qpn(qp);
  }
  Sge sg(uint64_t off) const { return Sg(0x10000 + off, 64, 0x11); }
};

TEST(CheckersNotifyWithoutPoll, RcPingpongEventModeIsSilent) {
  // ibv_rc_pingpong -e: receives posted in INIT, the CQ armed before the
  // connection, then per iteration: get_cq_event, ack, re-arm, poll, post.
  EventSetup s;
  EXPECT_EQ(s.f.ModifyQp(s.qp, IBV_QPS_INIT), kNone);
  std::vector<RecvWr> rx;
  for (int i = 0; i < 8; ++i) rx.push_back(Rwr(100 + i, {s.sg(64 * i)}));
  EXPECT_EQ(s.f.PostRecv(s.qp, rx), kNone);
  EXPECT_EQ(s.f.ReqNotify(s.cq), kNone);
  EXPECT_EQ(s.f.ModifyQp(s.qp, IBV_QPS_RTR), kNone);
  EXPECT_EQ(s.f.ModifyQp(s.qp, IBV_QPS_RTS), kNone);
  EXPECT_EQ(s.f.PostSend(s.qp, {Wr(1, true, {s.sg(0x1000)})}), kNone);
  uint64_t next_recv = 108;
  for (int iter = 0; iter < 6; ++iter) {
    EXPECT_EQ(s.f.Wait(s.ch), kNone) << iter;
    EXPECT_EQ(s.f.GetEvent(s.cq, s.ch), kNone) << iter;
    EXPECT_EQ(s.f.Ack(s.cq, 1), kNone) << iter;
    EXPECT_EQ(s.f.ReqNotify(s.cq), kNone) << iter;
    // The poll after arming: the send completion and one receive.
    EXPECT_EQ(s.f.Poll(s.cq, {Wc(s.qpn, 1 + iter), Wc(s.qpn, 100 + iter, IBV_WC_SUCCESS, IBV_WC_RECV)}),
              kNone)
        << iter;
    EXPECT_EQ(s.f.PostRecv(s.qp, {Rwr(next_recv++, {s.sg(0)})}), kNone) << iter;
    EXPECT_EQ(s.f.PostSend(s.qp, {Wr(2 + iter, true, {s.sg(0x1000)})}), kNone) << iter;
  }
  EXPECT_EQ(s.f.DestroyQp(s.qp), kNone);
  EXPECT_EQ(s.f.DestroyCq(s.cq), kNone);
}

TEST(CheckersNotifyWithoutPoll, ArmPollEmptyThenWaitIsSilent) {
  EventSetup s;
  s.f.ToRts(s.qp);
  EXPECT_EQ(s.f.PostSend(s.qp, {Wr(1, true, {s.sg(0)})}), kNone);
  EXPECT_EQ(s.f.ReqNotify(s.cq), kNone);
  EXPECT_EQ(s.f.Poll(s.cq, {}), kNone);  // may be empty
  EXPECT_EQ(s.f.Wait(s.ch), kNone);
}

TEST(CheckersNotifyWithoutPoll, ArmThenWaitWithCompletionsPossiblyPending) {
  EventSetup s;
  s.f.ToRts(s.qp);
  EXPECT_EQ(s.f.PostSend(s.qp, {Wr(1, true, {s.sg(0)})}), kNone);
  EXPECT_EQ(s.f.ReqNotify(s.cq), kNone);
  EXPECT_EQ(s.f.Wait(s.ch), Ids{"notify-without-poll"});
}

TEST(CheckersNotifyWithoutPoll, ArmThenWaitWithReceivesPostedInRts) {
  EventSetup s;
  s.f.ToRts(s.qp);
  EXPECT_EQ(s.f.PostRecv(s.qp, {Rwr(1, {s.sg(0)})}), kNone);
  EXPECT_EQ(s.f.ReqNotify(s.cq), kNone);
  EXPECT_EQ(s.f.Wait(s.ch), Ids{"notify-without-poll"});
}

TEST(CheckersNotifyWithoutPoll, ArmWithNothingOutstandingThenPostThenWaitIsSilent) {
  // Completions of work posted after the arming raise an event.
  EventSetup s;
  s.f.ToRts(s.qp);
  EXPECT_EQ(s.f.ReqNotify(s.cq), kNone);
  EXPECT_EQ(s.f.PostSend(s.qp, {Wr(1, true, {s.sg(0)})}), kNone);
  EXPECT_EQ(s.f.Wait(s.ch), kNone);
}

TEST(CheckersNotifyWithoutPoll, OtherChannelIsSilent) {
  EventSetup s;
  ObjId ch2 = s.f.CreateChannel();
  s.f.ToRts(s.qp);
  EXPECT_EQ(s.f.PostSend(s.qp, {Wr(1, true, {s.sg(0)})}), kNone);
  EXPECT_EQ(s.f.ReqNotify(s.cq), kNone);
  EXPECT_EQ(s.f.Wait(ch2), kNone);
}

// =================================================== unacked-cq-events ==

TEST(CheckersUnackedCqEvents, DestroyWithUnackedEvent) {
  Fx f;
  ObjId ch = f.CreateChannel();
  ObjId cq = f.CreateCq(8, ch);
  EXPECT_EQ(f.ReqNotify(cq), kNone);
  EXPECT_EQ(f.GetEvent(cq, ch), kNone);
  EXPECT_EQ(f.ReqNotify(cq), kNone);
  EXPECT_EQ(f.GetEvent(cq, ch), kNone);
  EXPECT_EQ(f.Ack(cq, 1), kNone);
  EXPECT_EQ(f.DestroyCq(cq), Ids{"unacked-cq-events"});
}

TEST(CheckersUnackedCqEvents, AllAckedIsSilent) {
  Fx f;
  ObjId ch = f.CreateChannel();
  ObjId cq = f.CreateCq(8, ch);
  EXPECT_EQ(f.ReqNotify(cq), kNone);
  EXPECT_EQ(f.GetEvent(cq, ch), kNone);
  EXPECT_EQ(f.ReqNotify(cq), kNone);
  EXPECT_EQ(f.GetEvent(cq, ch), kNone);
  EXPECT_EQ(f.Ack(cq, 2), kNone);
  EXPECT_EQ(f.DestroyCq(cq), kNone);
}

TEST(CheckersUnackedCqEvents, OverAckIsReportedAtTheAck) {
  Fx f;
  ObjId ch = f.CreateChannel();
  ObjId cq = f.CreateCq(8, ch);
  EXPECT_EQ(f.ReqNotify(cq), kNone);
  EXPECT_EQ(f.GetEvent(cq, ch), kNone);
  EXPECT_EQ(f.Ack(cq, 1), kNone);
  EXPECT_EQ(f.Ack(cq, 1), Ids{"unacked-cq-events"});  // nothing left to ack
  EXPECT_EQ(f.DestroyCq(cq), kNone);
}

// A cyclic receive chain: the interposer copies one WR more than the queue
// holds and cannot tell which occurrence the provider refused; the books
// count what fit, not the chain (no phantom pending completions).
TEST(CheckersRqOverflow, CyclicChainCountsWhatFit) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId mr = f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId cq = f.CreateCq(16);
  QpCaps caps = Caps(8);
  caps.max_recv_wr = 16;
  ObjId qp = f.CreateQp(pd, cq, cq, caps);
  f.ToRts(qp);
  Event e;
  e.kind = EventKind::kPostRecv;
  e.obj = qp;
  e.ret = ENOMEM;
  e.err = ENOMEM;
  e.bad_index = 17;  // the refused WR is not among the 17 copied
  for (int i = 0; i < 17; ++i) e.recv_wrs.push_back(Rwr(1, {Sg(0x10000, 64, 0x11)}));
  // 16 fit: no cq-overrun on the 16-entry CQ.
  EXPECT_EQ(f.Feed(e), Ids{"rq-overflow"});
  EXPECT_EQ(f.eng.state().Qp(qp)->rq.size(), 16u);
  (void)mr;
}

// =================================================== use-after-destroy ==

// A call the interposer refused because its handle was destroyed: the
// event names the id the object had, with EINVAL.
Event Refused(EventKind k, ObjId obj, bool as_parent = false) {
  Event e;
  e.kind = k;
  (as_parent ? e.parent : e.obj) = obj;
  e.ret = as_parent || k == EventKind::kPollCq ? -1 : EINVAL;
  e.err = EINVAL;
  return e;
}

TEST(CheckersUseAfterDestroy, EveryCallOnADestroyedHandle) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  ObjId mr = f.RegMr(pd, 0x1000, 64, 7);
  EXPECT_EQ(f.DestroyQp(qp), kNone);
  EXPECT_EQ(f.Feed(Refused(EventKind::kDestroyQp, qp)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.Feed(Refused(EventKind::kPostSend, qp)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.Feed(Refused(EventKind::kPostRecv, qp)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.DestroyCq(cq), kNone);
  EXPECT_EQ(f.Feed(Refused(EventKind::kPollCq, cq)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.Feed(Refused(EventKind::kReqNotifyCq, cq)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.DeregMr(mr), kNone);
  EXPECT_EQ(f.Feed(Refused(EventKind::kDeregMr, mr)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.DeallocPd(pd), kNone);
  EXPECT_EQ(f.Feed(Refused(EventKind::kDeallocPd, pd)), Ids{"use-after-destroy"});
}

TEST(CheckersUseAfterDestroy, NamesWhereTheObjectWasDestroyed) {
  Fx f;
  ObjId pd = f.AllocPd();
  EXPECT_EQ(f.DeallocPd(pd), kNone);
  Event again = Refused(EventKind::kDeallocPd, pd);
  again.stack = 77;
  std::vector<Finding> got = f.eng.OnEvent(again);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_NE(got[0].message.find("PD 0x"), std::string::npos) << got[0].message;
  ASSERT_FALSE(got[0].related.empty());
  EXPECT_EQ(got[0].related[0].label, "PD destroyed at");
}

TEST(CheckersUseAfterDestroy, ClosedDeviceAsParent) {
  Fx f;
  Event close;
  close.kind = EventKind::kCloseDevice;
  close.obj = 4242;
  EXPECT_EQ(f.Feed(close), kNone);
  EXPECT_EQ(f.Feed(Refused(EventKind::kAllocPd, 4242, /*as_parent=*/true)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.Feed(Refused(EventKind::kCreateCq, 4242, /*as_parent=*/true)), Ids{"use-after-destroy"});
  EXPECT_EQ(f.Feed(Refused(EventKind::kCreateCompChannel, 4242, /*as_parent=*/true)),
            Ids{"use-after-destroy"});
}

TEST(CheckersUseAfterDestroy, FailedCallsOnLiveOrUnknownObjectsAreSilent) {
  Fx f;
  ObjId pd = f.AllocPd();
  EXPECT_EQ(f.Feed(Refused(EventKind::kDeallocPd, pd)), kNone);   // live: EINVAL for another reason
  EXPECT_EQ(f.Feed(Refused(EventKind::kDestroyQp, 999)), kNone);  // never known
  EXPECT_EQ(f.DeallocPd(pd), kNone);
}

// ===================================== post-bad-qp-state, post-after-error ==

TEST(CheckersPostState, SendBeforeRts) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  EXPECT_EQ(f.PostSend(qp, {Wr(1, true)}), Ids{"post-bad-qp-state"});  // RESET
  EXPECT_EQ(f.ModifyQp(qp, IBV_QPS_INIT), kNone);
  EXPECT_EQ(f.PostSend(qp, {Wr(2, true)}), Ids{"post-bad-qp-state"});
  EXPECT_EQ(f.ModifyQp(qp, IBV_QPS_RTR), kNone);
  EXPECT_EQ(f.PostSend(qp, {Wr(3, true)}), Ids{"post-bad-qp-state"});
}

TEST(CheckersPostState, SendInRtsAndSqdIsSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), kNone);
  EXPECT_EQ(b.f.ModifyQp(b.qp, IBV_QPS_SQD), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true)}), kNone);
}

TEST(CheckersPostState, ReceiveInResetOnly) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  EXPECT_EQ(f.PostRecv(qp, {Rwr(1, {Sg(0x10000, 64, 0x11)})}), Ids{"post-bad-qp-state"});
  EXPECT_EQ(f.ModifyQp(qp, IBV_QPS_INIT), kNone);
  EXPECT_EQ(f.PostRecv(qp, {Rwr(2, {Sg(0x10000, 64, 0x11)})}), kNone);
}

TEST(CheckersPostState, AfterErrorCompletion) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_RETRY_EXC_ERR)}), Ids{"error-completion"});
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true)}), Ids{"post-after-error"});
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(3, {b.sg()})}), Ids{"post-after-error"});
}

TEST(CheckersPostState, AfterModifyToErrAndAsyncEvent) {
  {
    Basic b(8);
    EXPECT_EQ(b.f.ModifyQp(b.qp, IBV_QPS_ERR), kNone);
    EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), Ids{"post-after-error"});
  }
  {
    Basic b(8);
    EXPECT_EQ(b.f.AsyncQpEvent(b.qp, IBV_QPS_ERR), kNone);
    EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), Ids{"post-after-error"});
  }
}

TEST(CheckersPostState, ResetAndReconnectClearsTheError) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_RETRY_EXC_ERR)}), Ids{"error-completion"});
  EXPECT_EQ(b.f.ModifyQp(b.qp, IBV_QPS_RESET), kNone);
  b.f.ToRts(b.qp);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true)}), kNone);
}

// ============================== invalid-lkey, sge-out-of-bounds, mr-access, sge-count ==

TEST(CheckersSgeRules, InvalidLkey) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x10000, 64, 0x99)})}), Ids{"invalid-lkey"});
}

TEST(CheckersSgeRules, LkeyOfAnotherPd) {
  Basic b(8);
  ObjId pd2 = b.f.AllocPd();
  b.f.RegMr(pd2, 0x50000, 0x1000, 0x55);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x50000, 64, 0x55)})}), Ids{"invalid-lkey"});
}

TEST(CheckersSgeRules, LkeyOfADeregisteredMr) {
  Basic b(8);
  ObjId mr2 = b.f.RegMr(b.pd, 0x50000, 0x1000, 0x55);
  EXPECT_EQ(b.f.DeregMr(mr2), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x50000, 64, 0x55)})}), Ids{"invalid-lkey"});
}

TEST(CheckersSgeRules, InlineAndZeroLengthSgesNeedNoLkey) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x999000, 16, 0x99)}, IBV_WR_SEND, IBV_SEND_INLINE)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, {Sg(0x999000, 0, 0x99)})}), kNone);
}

TEST(CheckersSgeRules, OutOfBounds) {
  Basic b(8);
  // MR is [0x10000, 0x20000).
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x1ffc0, 64, 0x11)})}), kNone);  // ends exactly at the end
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, {Sg(0x1ffc1, 64, 0x11)})}), Ids{"sge-out-of-bounds"});
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, true, {Sg(0xfff0, 64, 0x11)})}), Ids{"sge-out-of-bounds"});
}

TEST(CheckersSgeRules, MrAccess) {
  Basic b(8);
  ObjId ro = b.f.RegMr(b.pd, 0x50000, 0x1000, 0x55, IBV_ACCESS_REMOTE_READ);
  (void)ro;
  // Sending from a read-only MR is fine.
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x50000, 64, 0x55)})}), kNone);
  // RDMA READ writes into it: needs LOCAL_WRITE.
  SendWr rd = Wr(2, true, {Sg(0x50000, 64, 0x55)}, IBV_WR_RDMA_READ);
  rd.remote_addr = 0x1000;
  rd.rkey = 0x1;
  EXPECT_EQ(b.f.PostSend(b.qp, {rd}), Ids{"mr-access"});
  // So does a receive.
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(3, {Sg(0x50000, 64, 0x55)})}), Ids{"mr-access"});
  // And an atomic's local buffer.
  SendWr at = Wr(4, true, {Sg(0x50000, 8, 0x55)}, IBV_WR_ATOMIC_FETCH_AND_ADD);
  at.remote_addr = 0x1000;
  EXPECT_EQ(b.f.PostSend(b.qp, {at}), Ids{"mr-access"});
}

TEST(CheckersSgeRules, SgeCount) {
  Basic b(8);  // max_send_sge 4, max_recv_sge 4
  std::vector<Sge> four = {b.sg(0), b.sg(64), b.sg(128), b.sg(192)};
  std::vector<Sge> five = {b.sg(0), b.sg(64), b.sg(128), b.sg(192), b.sg(256)};
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, four)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, five)}), Ids{"sge-count"});
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(3, four)}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(4, five)}), Ids{"sge-count"});
}

// ==================================================== inline-too-large ==

TEST(CheckersInlineTooLarge, OverAndAtTheLimit) {
  Basic b(8);  // max_inline_data 64
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg(0, 32), b.sg(64, 32)}, IBV_WR_SEND, IBV_SEND_INLINE)}),
            kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, {b.sg(0, 32), b.sg(64, 33)}, IBV_WR_SEND, IBV_SEND_INLINE)}),
            Ids{"inline-too-large"});
  // Not inline: no limit but the MR.
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, true, {b.sg(0, 4096)})}), kNone);
}

// =================================================== atomic-misaligned ==

TEST(CheckersAtomicMisaligned, AddressAndLength) {
  Basic b(8);
  SendWr ok = Wr(1, true, {b.sg(0, 8)}, IBV_WR_ATOMIC_CMP_AND_SWP);
  ok.remote_addr = 0x2008;
  EXPECT_EQ(b.f.PostSend(b.qp, {ok}), kNone);
  SendWr mis = Wr(2, true, {b.sg(0, 8)}, IBV_WR_ATOMIC_FETCH_AND_ADD);
  mis.remote_addr = 0x2004;
  EXPECT_EQ(b.f.PostSend(b.qp, {mis}), Ids{"atomic-misaligned"});
  SendWr shortw = Wr(3, true, {b.sg(0, 4)}, IBV_WR_ATOMIC_FETCH_AND_ADD);
  shortw.remote_addr = 0x2000;
  EXPECT_EQ(b.f.PostSend(b.qp, {shortw}), Ids{"atomic-misaligned"});
  // A misaligned RDMA WRITE is no atomic.
  SendWr wr = Wr(4, true, {b.sg(0, 3)}, IBV_WR_RDMA_WRITE);
  wr.remote_addr = 0x2003;
  EXPECT_EQ(b.f.PostSend(b.qp, {wr}), kNone);
}

// ibv_wr_atomic_write copies its 8 bytes at the call: the WR has no SGE and
// only its remote address can be wrong; ibv_post_send's value is its SGEs.
TEST(CheckersAtomicMisaligned, AtomicWrite) {
  Basic b(8);
  SendWr ok = Wr(1, true, {}, IBV_WR_ATOMIC_WRITE);
  ok.num_sge = 0;
  ok.remote_addr = 0x2008;
  EXPECT_EQ(b.f.PostSend(b.qp, {ok}), kNone);
  SendWr mis = Wr(2, true, {}, IBV_WR_ATOMIC_WRITE);
  mis.num_sge = 0;
  mis.remote_addr = 0x200c;
  EXPECT_EQ(b.f.PostSend(b.qp, {mis}), Ids{"atomic-misaligned"});
  SendWr sge_ok = Wr(3, true, {b.sg(0, 8)}, IBV_WR_ATOMIC_WRITE);
  sge_ok.remote_addr = 0x2010;
  EXPECT_EQ(b.f.PostSend(b.qp, {sge_ok}), kNone);
  SendWr sge_long = Wr(4, true, {b.sg(0, 16)}, IBV_WR_ATOMIC_WRITE);
  sge_long.remote_addr = 0x2010;
  EXPECT_EQ(b.f.PostSend(b.qp, {sge_long}), Ids{"atomic-misaligned"});
}

// ===================================================== wr-id-duplicate ==

TEST(CheckersWrIdDuplicate, TwoOutstandingSignaled) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true)}), Ids{"wr-id-duplicate"});
}

TEST(CheckersWrIdDuplicate, NearMisses) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, false)}), kNone);  // unsignaled: no completion to confuse
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 5)}), kNone);      // retires the first (and nothing later)
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true)}), kNone);
}

TEST(CheckersWrIdDuplicate, WithinOneChain) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true), Wr(5, true)}), Ids{"wr-id-duplicate"});
}

// ibv_resize_cq changes the capacity the cq-overrun books hold posts to,
// and a CQ made smaller than what can still land in it is reported then.
TEST(CheckersCqOverrun, ResizeChangesTheCapacity) {
  Basic b(8, false, 8);
  Event r;
  r.kind = EventKind::kResizeCq;
  r.obj = b.cq;
  r.cqe = 4;
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true), Wr(2, true), Wr(3, true)}), kNone);
  EXPECT_EQ(b.f.Feed(r), kNone) << "three pending fit in four";
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(4, true)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true)}), Ids{"cq-overrun"}) << "the fifth past the new size";
  r.cqe = 2;
  EXPECT_EQ(b.f.Feed(r), Ids{"cq-overrun"}) << "resized below what is pending";
  r.cqe = 64;
  r.ret = EINVAL;
  EXPECT_EQ(b.f.Feed(r), kNone) << "a failed resize changes nothing";
}

// ======================================================= fork-with-mrs ==

TEST(CheckersForkWithMrs, ForkWithLiveMr) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x1000, 0x11);
  EXPECT_EQ(f.Fork(), Ids{"fork-with-mrs"});
}

// Copy-on-write breaks pinned pages only: ODP MRs follow the page tables.
TEST(CheckersForkWithMrs, OdpMrsDoNotCount) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0, SIZE_MAX, 0x11, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  f.RegMr(pd, 0x10000, 0x1000, 0x12, IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(f.Fork(), kNone);
  f.RegMr(pd, 0x20000, 0x1000, 0x13);
  EXPECT_EQ(f.Fork(), Ids{"fork-with-mrs"});
}

TEST(CheckersForkWithMrs, NearMisses) {
  {
    Fx f;
    EXPECT_EQ(f.ForkInit(), kNone);
    ObjId pd = f.AllocPd();
    f.RegMr(pd, 0x10000, 0x1000, 0x11);
    EXPECT_EQ(f.Fork(), kNone);
  }
  {
    Fx f;
    ObjId pd = f.AllocPd();
    ObjId mr = f.RegMr(pd, 0x10000, 0x1000, 0x11);
    EXPECT_EQ(f.DeregMr(mr), kNone);
    EXPECT_EQ(f.Fork(), kNone);
  }
}

// =========================================== buffer-modified-in-flight ==

Sge Hashed(uint64_t addr, uint32_t len, uint32_t lkey, uint64_t hash, uint64_t hash_now = 0) {
  Sge g = Sg(addr, len, lkey);
  g.hash = hash;
  g.hash_now = hash_now;
  return g;
}

Ids Retire(Fx& f, ObjId qp, std::vector<SendWr> wrs) {
  Event e;
  e.kind = EventKind::kRetire;
  e.obj = qp;
  for (auto& w : wrs) e.send_wrs.push_back(std::move(w));
  return f.Feed(e);
}

TEST(CheckersBufferModifiedInFlight, RetiredWrsAreHandedBackForRehashing) {
  // u u S with hashed SGEs: the S completion retires all three, and the
  // engine hands all three back (oldest first); an unhashed WR is not.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp,
                         {Wr(1, false, {Hashed(0x10000, 8, 0x11, 0xa1)}),
                          Wr(2, false, {Hashed(0x10040, 8, 0x11, 0xa2)}),
                          Wr(3, true, {Hashed(0x10080, 8, 0x11, 0xa3)}), Wr(4, true, {b.sg()})},
                         /*stack=*/600),
            kNone);
  EXPECT_TRUE(b.f.eng.TakeRetired().empty());
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3)}), kNone);
  auto r = b.f.eng.TakeRetired();
  ASSERT_EQ(r.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(r[i].qp, b.qp);
    EXPECT_EQ(r[i].wr.wr_id, i + 1);
    EXPECT_EQ(r[i].wr.stack, 600u);
  }
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 4)}), kNone);
  EXPECT_TRUE(b.f.eng.TakeRetired().empty());
}

TEST(CheckersBufferModifiedInFlight, ChangedHashReported) {
  Basic b(8);
  SendWr w = Wr(1, true, {Hashed(0x10000, 8, 0x11, 0xa1, 0xa1), Hashed(0x10040, 8, 0x11, 0xb2, 0xbb)});
  w.posted_at = 601;
  EXPECT_EQ(Retire(b.f, b.qp, {w}), Ids{"buffer-modified-in-flight"});
  ASSERT_EQ(b.f.last.size(), 1u);
  ASSERT_EQ(b.f.last[0].related.size(), 2u);
  EXPECT_EQ(b.f.last[0].related[0].stack, 601u);
  // Whose memory it is: the MR of the changed SGE's lkey, where registered.
  EXPECT_EQ(b.f.last[0].related[1].kind, core::StackKind::kRegistered);
  EXPECT_EQ(b.f.last[0].related[1].label, absl::StrFormat("MR 0x%x registered at", b.mr));
}

TEST(CheckersBufferModifiedInFlight, UnchangedOrUnhashedIsSilent) {
  Basic b(8);
  EXPECT_EQ(Retire(b.f, b.qp, {Wr(1, true, {Hashed(0x10000, 8, 0x11, 0xa1, 0xa1)})}), kNone);
  EXPECT_EQ(Retire(b.f, b.qp, {Wr(2, true, {Hashed(0x10000, 8, 0x11, 0, 0x55)})}), kNone);
}

// ===================================== free-in-flight, free-registered ==

TEST(CheckersFreeRange, FreeRegistered) {
  Basic b(8);  // MR [0x10000, +0x10000)
  EXPECT_EQ(FreeRange(b.f, 0x1fff0, 0x100), Ids{"free-registered"});
  EXPECT_EQ(FreeRange(b.f, 0x20000, 0x100), kNone);  // just past the MR
  EXPECT_EQ(FreeRange(b.f, 0xff00, 0x100), kNone);   // just before it
}

// ODP MRs pin nothing.  An implicit one (addr 0, length SIZE_MAX)
// registers every address by design: freeing memory under it is never
// reported; an explicit one still names its range, and is.
TEST(CheckersFreeRange, ImplicitOdpIsNotFreeRegisteredExplicitOdpIs) {
  Fx f;
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0, SIZE_MAX, 0x11, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(FreeRange(f, 0x10000, 0x100), kNone);
  f.RegMr(pd, 0x20000, 0x1000, 0x12, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_ON_DEMAND);
  EXPECT_EQ(FreeRange(f, 0x20000, 0x100), Ids{"free-registered"});
}

TEST(CheckersFreeRange, FreeInFlightSend) {
  Basic b(8);
  ObjId mr = b.mr;
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg(0x100, 64)})}), kNone);
  // MR still registered too: both.
  EXPECT_EQ(FreeRange(b.f, 0x10100, 8), (Ids{"free-in-flight", "free-registered"}));
  (void)mr;
}

TEST(CheckersFreeRange, AfterRetiringCompletionAndDeregIsSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false, {b.sg(0x100, 64)}), Wr(2, true, {b.sg(0x200, 64)})}), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 2)}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
  EXPECT_EQ(FreeRange(b.f, 0x10000, 0x10000), kNone);
}

TEST(CheckersFreeRange, InlineWrDoesNotHoldItsBuffer) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(qp);
  EXPECT_EQ(f.PostSend(qp, {Wr(1, true, {Sg(0x70000, 32, 0)}, IBV_WR_SEND, IBV_SEND_INLINE)}), kNone);
  EXPECT_EQ(FreeRange(f, 0x70000, 32), kNone);
}

TEST(CheckersFreeRange, FreeInFlightReceiveOnQp) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId mr = f.RegMr(pd, 0x10000, 0x1000, 0x11);
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(qp);
  EXPECT_EQ(f.PostRecv(qp, {Rwr(1, {Sg(0x10000, 64, 0x11)})}), kNone);
  EXPECT_EQ(f.DeregMr(mr), Ids{"dereg-in-flight"});
  EXPECT_EQ(FreeRange(f, 0x10000, 64), Ids{"free-in-flight"});
}

TEST(CheckersFreeRange, FreeInFlightReceiveOnSrq) {
  SrqSetup s;
  ObjId mr = s.f.RegMr(s.pd, 0x40000, 0x1000, 0x44);
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {Rwr(1, {Sg(0x40000, 64, 0x44)})}), kNone);
  EXPECT_EQ(s.f.DeregMr(mr), Ids{"dereg-in-flight"});
  // The NIC may still write the SRQ receive buffer.
  EXPECT_EQ(FreeRange(s.f, 0x40000, 64), Ids{"free-in-flight"});
}

// ========================================================= determinism ==

// One run touching every check whose message or stacks pick "an example"
// out of several candidates (CQ with many QPs, PD with many MRs, MR used by
// WRs of many QPs, fork with many MRs, a channel with many armed CQs).
std::vector<Event> RichTrace() {
  Fx f;
  ObjId pd = f.AllocPd();
  std::vector<ObjId> mrs;
  for (int i = 0; i < 12; ++i) mrs.push_back(f.RegMr(pd, 0x100000 * (i + 1), 0x10000, 0x100 + i));
  ObjId ch = f.CreateChannel();
  std::vector<ObjId> cqs, qps;
  for (int i = 0; i < 4; ++i) cqs.push_back(f.CreateCq(8, ch));
  for (int i = 0; i < 12; ++i) {
    ObjId qp = f.CreateQp(pd, cqs[i % 4], cqs[i % 4], Caps(4, 4));
    f.ToRts(qp);
    qps.push_back(qp);
  }
  // Every QP sends from MR 0 and from its own MR.
  for (int i = 0; i < 12; ++i)
    f.PostSend(qps[i],
               {Wr(1, true, {Sg(0x100000, 8, 0x100)}), Wr(2, true, {Sg(0x100000 * (i + 1), 8, 0x100 + i)})},
               1000 + i);
  for (ObjId cq : cqs) f.ReqNotify(cq);
  f.Wait(ch);                                                   // notify-without-poll: which CQ?
  f.DeregMr(mrs[0]);                                            // dereg-in-flight: which QP is the example?
  FreeRange(f, 0x100000, 8);                                    // free-in-flight: which QP?
  f.Fork();                                                     // fork-with-mrs: which MR?
  f.DestroyCq(cqs[1]);                                          // destroy-in-use: which QP?
  f.DeallocPd(pd);                                              // destroy-in-use: which MR?
  f.PostSend(qps[0], {Wr(3, true), Wr(4, true), Wr(5, true)});  // sq-overflow, cq-overrun
  for (int i = 0; i < 12; ++i)
    f.Poll(cqs[i % 4],
           {Wc(Fx::Qpn(qps[i]), 1, IBV_WC_REM_ACCESS_ERR), Wc(Fx::Qpn(qps[i]), 2, IBV_WC_WR_FLUSH_ERR)});
  return f.log;
}

std::string Render(const std::vector<Finding>& fs) {
  std::string s;
  for (const auto& f : fs) {
    s += std::string(core::CheckName(f.check)) + "|" + f.message + "|" + std::to_string(f.stack);
    for (const auto& r : f.related) s += "|" + r.label + "@" + std::to_string(r.stack);
    s += "\n";
  }
  return s;
}

TEST(CheckersDeterminism, SameEventsSameFindingsInFreshEngines) {
  const std::vector<Event> events = RichTrace();
  // Many engines alive at once (their tables at different addresses), with
  // unrelated allocations in between.
  std::vector<std::unique_ptr<Engine>> engines;
  std::vector<std::unique_ptr<char[]>> spacers;
  std::vector<std::string> outputs;
  for (int k = 0; k < 8; ++k) {
    // Half of them as a replay builds them (one thread, no locks), half as
    // the live pipeline does (locking, numbering): the same findings.
    engines.push_back(
        k % 2 ? std::make_unique<Engine>(/*assign_seq=*/false, core::CheckSet::All(), /*one_thread=*/true)
              : std::make_unique<Engine>(/*assign_seq=*/true));
    spacers.push_back(std::make_unique<char[]>(4096 * (k + 1)));
    std::vector<Finding> all;
    for (const auto& e : events) {
      auto fs = engines.back()->OnEvent(e);
      all.insert(all.end(), fs.begin(), fs.end());
    }
    outputs.push_back(Render(all));
  }
  EXPECT_FALSE(outputs[0].empty());
  for (size_t k = 1; k < outputs.size(); ++k) {
    if (outputs[0] == outputs[k]) continue;
    // Show the first differing finding only.
    std::vector<std::string> a = absl::StrSplit(outputs[0], '\n'), b = absl::StrSplit(outputs[k], '\n');
    size_t i = 0;
    while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
    ADD_FAILURE() << "engine " << k << " differs from engine 0 at finding " << i
                  << ":\n  engine 0: " << (i < a.size() ? a[i] : "<none>") << "\n  engine " << k << ": "
                  << (i < b.size() ? b[i] : "<none>");
    break;
  }
}

TEST(CheckersDeterminism, RichTraceRaisesTheExpectedChecks) {
  const std::vector<Event> events = RichTrace();
  Engine eng;
  Ids all;
  for (const auto& e : events) {
    Ids got = Names(eng.OnEvent(e));
    all.insert(all.end(), got.begin(), got.end());
  }
  Ids want = {"notify-without-poll", "dereg-in-flight", "free-in-flight", "fork-with-mrs",
              "destroy-in-use",      "destroy-in-use",  "sq-overflow",    "cq-overrun"};
  want.insert(want.end(), 12, std::string("error-completion"));
  EXPECT_EQ(all, want);
}

// ======================================================= quiet filters ==

// Random streams of the data path's events (and the control events that
// change what they may say) over a small, crowded setup: two PDs, MRs of
// both with and without local write, CQs and QPs with small random limits,
// an SRQ, random QP states.  Posts use random opcodes, flags, wr_ids from a
// small range, lkeys (live, dead, of the other PD), addresses in and out of
// bounds, failed posts; polls retire the queues' heads or random wr_ids,
// with some error completions.  An engine with the quiet filters
// (checkers/quiet.h) and one without must report the same findings, event
// by event.
std::vector<Event> RandomDataPath(uint32_t seed, int n_events) {
  std::mt19937 rng(seed);
  auto pick = [&](uint32_t n) { return static_cast<uint32_t>(rng() % n); };
  auto chance = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  // How often a stream breaks a rule: a third of the streams rarely, a
  // third often, a third in between (a post that no check speaks about
  // must be common, or the filters' "quiet" answer goes untested).
  const int chaos = static_cast<int>(seed % 3);
  auto fault = [&](int percent) {
    return chance(chaos == 0 ? percent / 4 : chaos == 1 ? percent : 3 * percent);
  };
  Fx f;
  ObjId pd = f.AllocPd(), other_pd = f.AllocPd();
  struct Mr {
    uint64_t addr;
    uint32_t lkey;
    ObjId id;
  };
  std::vector<Mr> mrs;
  for (uint32_t i = 0; i < 4; ++i) {
    const uint64_t addr = 0x100000 * (i + 1);
    const uint32_t access =
        i == 2 ? uint32_t{IBV_ACCESS_REMOTE_READ} : kAllAccess;  // one without local write
    mrs.push_back({addr, 0x100 + i, f.RegMr(i == 3 ? other_pd : pd, addr, 0x1000, 0x100 + i, access)});
  }
  std::vector<ObjId> cqs;
  for (int i = 0; i < 2; ++i) cqs.push_back(f.CreateCq(chaos == 2 ? 2 + pick(12) : 24 + pick(40)));
  ObjId srq = f.CreateSrq(pd, 2 + pick(6));
  std::vector<ObjId> qps;
  for (int i = 0; i < 3; ++i) {
    QpCaps caps = Caps(1 + pick(8), 2 + pick(8), 1 + pick(3), 1 + pick(3), pick(2) ? 0 : 8 + pick(64));
    ObjId scq = cqs[pick(2)], rcq = cqs[pick(2)];
    Ids ignored;
    qps.push_back(f.CreateQp(pd, scq, rcq, caps, chance(20), i == 2 ? srq : 0, IBV_QPT_RC, &ignored));
    f.ToRts(qps.back());
  }
  auto sges = [&](bool atomic) {
    std::vector<Sge> v;
    const uint32_t n = fault(10) ? pick(4) : 1;
    for (uint32_t k = 0; k < n; ++k) {
      const Mr& m = mrs[fault(20) ? pick(mrs.size()) : pick(2)];
      uint32_t lkey = fault(3) ? 0x999 : m.lkey;
      uint64_t addr = m.addr + (fault(3) ? 0xff8 : pick(64));
      uint32_t len = atomic && !fault(10) ? 8 : pick(5) == 0 ? 0 : 1 + pick(32);
      v.push_back(Sg(addr, len, lkey));
    }
    return v;
  };
  static constexpr uint32_t kOpcodes[] = {IBV_WR_SEND,
                                          IBV_WR_RDMA_WRITE,
                                          IBV_WR_RDMA_READ,
                                          IBV_WR_ATOMIC_CMP_AND_SWP,
                                          IBV_WR_ATOMIC_FETCH_AND_ADD,
                                          IBV_WR_SEND_WITH_IMM,
                                          IBV_WR_RDMA_WRITE_WITH_IMM};
  for (int i = 0; i < n_events; ++i) {
    const ObjId qp = qps[pick(qps.size())];
    const StackId stack = 1 + pick(6);  // repeats: reports deduplicate per (check, stack)
    const uint32_t action = pick(100);
    static uint64_t next_wr_id = 100;
    if (action < 40) {
      std::vector<SendWr> wrs;
      for (uint32_t k = 0, n = 1 + pick(3); k < n; ++k) {
        const uint32_t op = kOpcodes[fault(30) ? pick(7) : pick(2)];
        const bool atomic = op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
        SendWr w = Wr(fault(10) ? pick(6) : next_wr_id++, chance(50), sges(atomic), op,
                      fault(10) ? IBV_SEND_INLINE : 0);
        if (fault(3)) w.num_sge = 7;
        w.remote_addr = 0x5000 + (fault(10) ? 1 + pick(7) : 8 * pick(8));
        wrs.push_back(w);
      }
      if (fault(3)) {
        const uint32_t bad = pick(wrs.size());
        f.PostSend(qp, std::move(wrs), stack, ENOMEM, bad);
      } else {
        f.PostSend(qp, std::move(wrs), stack);
      }
    } else if (action < 60) {
      std::vector<RecvWr> wrs;
      for (uint32_t k = 0, n = fault(20) ? 2 : 1; k < n; ++k) wrs.push_back(Rwr(pick(6), sges(false)));
      if (qp == qps[2] && chance(50))
        f.PostSrqRecv(srq, std::move(wrs), stack);
      else
        f.PostRecv(qp, std::move(wrs), stack);
    } else if (action < 90) {
      const checkers::QpState& q = f.Qp(qp);
      std::vector<Completion> wcs;
      const bool send = pick(2);
      uint64_t wr_id = pick(6);
      if (send && !q.sq.empty()) wr_id = q.sq[pick(q.sq.size())].wr_id;
      if (!send && !q.rq.empty()) wr_id = q.rq.front().wr_id;
      const uint32_t status = !fault(5)    ? IBV_WC_SUCCESS
                              : chance(50) ? IBV_WC_WR_FLUSH_ERR
                                           : IBV_WC_REM_ACCESS_ERR;
      wcs.push_back(Wc(Fx::Qpn(qp), wr_id, status, send ? IBV_WC_RDMA_WRITE : IBV_WC_RECV));
      f.Poll(send ? q.send_cq : q.recv_cq, wcs);
    } else if (action < 93) {
      static constexpr uint32_t kStates[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                             IBV_QPS_SQD,   IBV_QPS_ERR,  IBV_QPS_RTS, IBV_QPS_RTS};
      f.ModifyQp(qp, fault(50) ? kStates[pick(8)] : uint32_t{IBV_QPS_RTS});
    } else {
      // Re-register one MR: the lkey dies for a while (the MR caches must
      // notice), then comes back.
      Mr& m = mrs[pick(mrs.size())];
      f.DeregMr(m.id);
      m.id = f.RegMr(m.lkey == 0x103 ? other_pd : pd, m.addr, 0x1000, m.lkey);
    }
  }
  return f.log;
}

TEST(CheckersQuietFilters, SameFindingsWithAndWithoutThem) {
  absl::flat_hash_map<std::string, int> fired;  // check -> findings, over every stream
  int posts = 0, silent_posts = 0;
  for (uint32_t seed = 1; seed <= 300; ++seed) {
    const std::vector<Event> events = RandomDataPath(seed, 300);
    Engine filtered, full;
    full.DisableQuietFiltersForTest();
    for (size_t i = 0; i < events.size(); ++i) {
      const std::string a = Render(filtered.OnEvent(events[i])), b = Render(full.OnEvent(events[i]));
      if (a != b) {
        ADD_FAILURE() << "seed " << seed << ", event " << i << " (" << core::EventKindName(events[i].kind)
                      << "):\n  with the filters:\n"
                      << a << "  without:\n"
                      << b;
        return;
      }
      for (absl::string_view line : absl::StrSplit(b, '\n', absl::SkipEmpty()))
        ++fired[std::string(line.substr(0, line.find('|')))];
      const EventKind k = events[i].kind;
      if (k == EventKind::kPostSend || k == EventKind::kPostRecv) {
        ++posts;
        silent_posts += b.empty();
      }
    }
  }
  // The streams reach every check the filters stand in for, and plenty of
  // posts that none of them speaks about.
  for (const char* id :
       {"post-bad-qp-state", "post-after-error", "sq-overflow", "unsignaled-deadlock", "unsignaled-run",
        "cq-overrun", "sge-count", "invalid-lkey", "sge-out-of-bounds", "mr-access", "inline-too-large",
        "atomic-misaligned", "wr-id-duplicate", "rq-overflow", "error-completion"})
    EXPECT_GT(fired[id], 0) << id;
  EXPECT_GT(silent_posts, posts / 4) << silent_posts << " of " << posts;
}

// ====================================================== lock domains ==

TEST(CheckersDomains, QueuesThatShareNoCqOrSrqHaveTheirOwnDomains) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq1 = f.CreateCq(64), cq2 = f.CreateCq(64), cq3 = f.CreateCq(64), srq = f.CreateSrq(pd, 16);
  EXPECT_NE(f.eng.DomainOf(cq1), 0u);
  EXPECT_NE(f.eng.DomainOf(cq1), f.eng.DomainOf(cq2));
  ObjId a = f.CreateQp(pd, cq1, cq1, Caps(8));
  ObjId b = f.CreateQp(pd, cq2, cq2, Caps(8));
  EXPECT_EQ(f.eng.DomainOf(a), f.eng.DomainOf(cq1));
  EXPECT_EQ(f.eng.DomainOf(b), f.eng.DomainOf(cq2));
  EXPECT_NE(f.eng.DomainOf(a), f.eng.DomainOf(b));
  // A QP whose send and receive CQs differ joins them; a QP on an SRQ joins
  // the SRQ (and so every CQ its receives can complete on).
  ObjId c = f.CreateQp(pd, cq1, cq3, Caps(8));
  EXPECT_EQ(f.eng.DomainOf(cq3), f.eng.DomainOf(cq1));
  EXPECT_EQ(f.eng.DomainOf(c), f.eng.DomainOf(a));
  ObjId d = f.CreateQp(pd, cq2, cq2, Caps(8), false, srq);
  EXPECT_EQ(f.eng.DomainOf(srq), f.eng.DomainOf(b));
  EXPECT_EQ(f.eng.DomainOf(d), f.eng.DomainOf(b));
  EXPECT_NE(f.eng.DomainOf(a), f.eng.DomainOf(b));
  // Destroyed objects leave their domain; unknown ones have none.
  EXPECT_TRUE(f.Simple(EventKind::kDestroyQp, c).empty());
  EXPECT_EQ(f.eng.DomainOf(c), 0u);
  EXPECT_EQ(f.eng.DomainOf(9999), 0u);
}

TEST(CheckersDomains, LargeObjectIdsWorkLikeSmallOnes) {
  // The engine indexes small ids directly and hashes the rest: both kinds
  // side by side, with the same books and findings.
  for (ObjId first : {ObjId{1}, ObjId{1} << 40, ~ObjId{0} - 100}) {
    Fx f;
    f.NumberFrom(first);
    ObjId pd = f.AllocPd();
    f.RegMr(pd, 0x10000, 0x10000, 0x11);
    ObjId cq = f.CreateCq(64);
    ObjId qp = f.CreateQp(pd, cq, cq, Caps(2));
    f.ToRts(qp);
    EXPECT_NE(f.eng.DomainOf(qp), 0u) << first;
    EXPECT_EQ(f.eng.DomainOf(qp), f.eng.DomainOf(cq)) << first;
    EXPECT_EQ(f.PostSend(qp, {Wr(1, true, {Sg(0x10000, 8, 0x11)}), Wr(2, true)}), kNone) << first;
    EXPECT_EQ(f.PostSend(qp, {Wr(3, true)}), Ids{"sq-overflow"}) << first;
    EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(qp), 2)}), kNone) << first;
    EXPECT_EQ(f.SqSize(qp), 1u) << first;  // wr 3 (posted past the limit) is still booked
    EXPECT_TRUE(f.Simple(EventKind::kDestroyQp, qp).empty());
    EXPECT_EQ(f.eng.DomainOf(qp), 0u) << first;
  }
}

TEST(CheckersDomains, AnEventOnAnotherDomainRunsWhileOneIsHeld) {
  Basic b(8);
  ObjId cq2 = b.f.CreateCq(64);
  ObjId qp2 = b.f.CreateQp(b.pd, cq2, cq2, Caps(8));
  b.f.ToRts(qp2);
  auto post = [&](ObjId qp) {
    Event e;
    e.kind = EventKind::kPostSend;
    e.obj = qp;
    e.stack = 77;
    e.send_wrs.push_back(Wr(1, true, {b.sg()}));
    std::vector<Finding> out;
    b.f.eng.OnEvent(e, &out, nullptr);
  };
  auto held = b.f.eng.LockDomainForTest(b.qp);
  ASSERT_TRUE(held.owns_lock());
  // A post to the other QP completes while the first QP's domain is held.
  std::atomic<bool> other_done{false};
  std::thread other([&] {
    post(qp2);
    other_done = true;
  });
  for (int i = 0; i < 2000 && !other_done; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_TRUE(other_done) << "a post to a QP of another domain waited for a held domain";
  other.join();
  // A post to the held QP waits, and so does an event that takes every lock.
  std::atomic<bool> same_done{false}, control_done{false};
  std::thread same([&] {
    post(b.qp);
    same_done = true;
  });
  std::thread control([&] {
    Event e;
    e.kind = EventKind::kAllocPd;
    e.obj = 5000;
    std::vector<Finding> out;
    b.f.eng.OnEvent(e, &out, nullptr);
    control_done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(same_done);
  EXPECT_FALSE(control_done);
  held.unlock();
  same.join();
  control.join();
  EXPECT_EQ(b.f.SqSize(b.qp), 1u);
  EXPECT_EQ(b.f.SqSize(qp2), 1u);
}

TEST(CheckersDomains, NumberedEventsGetIncreasingSeqsUnderTheirLocks) {
  Engine eng(/*assign_seq=*/true);
  std::vector<uint64_t> seqs;
  for (EventKind k : {EventKind::kAllocPd, EventKind::kCreateCq, EventKind::kPollCq}) {
    Event e;
    e.kind = k;
    e.obj = k == EventKind::kPollCq ? 2 : seqs.size() + 1;
    std::vector<Finding> out;
    eng.OnEvent(e, &out, nullptr);
    seqs.push_back(e.seq);
  }
  EXPECT_EQ(seqs, (std::vector<uint64_t>{1, 2, 3}));
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

}  // namespace
}  // namespace rdmasan::checkers_testing

namespace rdmasan::checkers_testing {
namespace {

// Threads posting and polling on their own queues while another thread
// keeps creating, merging and destroying domains and registering MRs: the
// books stay exact (every WR retired) and, under TSan, nothing races.
TEST(CheckersDomains, DataPathRacesControlPathSafely) {
  Engine eng(/*assign_seq=*/true);
  std::atomic<ObjId> next{1};
  auto feed = [&](Event e) {
    std::vector<Finding> out;
    eng.OnEvent(e, &out, nullptr);
    return out.size();
  };
  auto make = [&](EventKind k, auto fill) {
    Event e;
    e.kind = k;
    e.obj = next.fetch_add(1);
    fill(e);
    feed(e);
    return e.obj;
  };
  const ObjId pd = make(EventKind::kAllocPd, [](Event&) {});
  make(EventKind::kRegMr, [&](Event& e) {
    e.parent = pd;
    e.addr = e.iova = 0x10000;
    e.length = 0x10000;
    e.lkey = 0x11;
    e.access = kAllAccess;
  });
  auto create_qp = [&](ObjId scq, ObjId rcq, uint32_t qpn) {
    ObjId qp = make(EventKind::kCreateQp, [&](Event& e) {
      e.parent = pd;
      e.send_cq = scq;
      e.recv_cq = rcq;
      e.qp_type = IBV_QPT_RC;
      e.qp_num = qpn;
      e.caps = Caps(64);
    });
    for (uint32_t s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      Event m;
      m.kind = EventKind::kModifyQp;
      m.obj = qp;
      m.attr_mask = IBV_QP_STATE;
      m.qp_state = s;
      feed(m);
    }
    return qp;
  };
  constexpr int kThreads = 4, kPairs = 3000;
  std::vector<ObjId> cqs, qps;
  for (int t = 0; t < kThreads; ++t) {
    cqs.push_back(make(EventKind::kCreateCq, [](Event& e) { e.cqe = 256; }));
    qps.push_back(create_qp(cqs.back(), cqs.back(), 0x100 + t));
  }
  std::atomic<bool> stop{false};
  std::atomic<size_t> findings{0};
  std::vector<std::thread> workers;
  for (int t = 0; t < kThreads; ++t)
    workers.emplace_back([&, t] {
      for (int i = 0; i < kPairs; ++i) {
        Event post;
        post.kind = EventKind::kPostSend;
        post.obj = qps[t];
        post.stack = 10 + t;
        post.send_wrs.push_back(Wr(i, true, {Sg(0x10000 + 64 * t, 8, 0x11)}));
        findings += feed(post);
        Event poll;
        poll.kind = EventKind::kPollCq;
        poll.obj = cqs[t];
        poll.wcs.push_back(Wc(0x100 + t, i));
        findings += feed(poll);
      }
    });
  std::thread control([&] {
    for (uint32_t round = 0; !stop; ++round) {
      // Two CQs joined by one QP (a merge), then all destroyed; an MR
      // registered and deregistered (the MR caches' generation moves).
      ObjId a = make(EventKind::kCreateCq, [](Event& e) { e.cqe = 16; });
      ObjId b = make(EventKind::kCreateCq, [](Event& e) { e.cqe = 16; });
      ObjId q = create_qp(a, b, 0x1000 + round % 1000);
      ObjId mr = make(EventKind::kRegMr, [&](Event& e) {
        e.parent = pd;
        e.addr = e.iova = 0x900000;
        e.length = 4096;
        e.lkey = 0x900 + round % 16;
      });
      for (auto [k, o] : {std::pair{EventKind::kDeregMr, mr},
                          {EventKind::kDestroyQp, q},
                          {EventKind::kDestroyCq, a},
                          {EventKind::kDestroyCq, b}}) {
        Event d;
        d.kind = k;
        d.obj = o;
        feed(d);
      }
    }
  });
  for (auto& w : workers) w.join();
  stop = true;
  control.join();
  EXPECT_EQ(findings.load(), 0u);
  for (ObjId q : qps) EXPECT_EQ(eng.state().Qp(q)->sq.size(), 0u);
}

}  // namespace
}  // namespace rdmasan::checkers_testing

// ===================================================== injected faults ==
// Findings name the fault the harness injected before them (kDecision
// events, core/decision.h); decisions themselves raise nothing.
#include "absl/strings/str_format.h"
#include "core/decision.h"

namespace rdmasan::checkers_testing {
namespace {
namespace injected {

// A decision as interpose/faults records it.
Event Decision(core::Point point, uint64_t outcome, uint32_t qpn = 0, uint64_t wr_id = 0,
               bool has_wr = false) {
  Event e;
  e.kind = EventKind::kDecision;
  e.count = static_cast<uint32_t>(point);
  e.obj = 3;
  e.length = 1;
  e.addr = outcome;
  e.qp_num = qpn;
  if (point == core::Point::kWcError || has_wr) {
    Completion c;
    c.wr_id = wr_id;
    c.status = point == core::Point::kWcError ? static_cast<uint32_t>(outcome) : 0;
    c.qp_num = qpn;
    e.wcs.push_back(c);
  }
  return e;
}

std::string Hex(uint32_t v) { return absl::StrFormat("0x%x", v); }

TEST(CheckersInjected, ErrorCompletionNamesTheInjectedWcError) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(0x12, true)}), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kWcError, IBV_WC_RETRY_EXC_ERR, b.qpn, 0x12)), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 0x12, IBV_WC_RETRY_EXC_ERR)}), Ids{"error-completion"});
  ASSERT_EQ(b.f.last.size(), 1u);
  EXPECT_EQ(b.f.last[0].context,
            "after injected wc.error RETRY_EXC_ERR on QP " + Hex(b.qpn) + " wr_id=0x12 (decision #1)");
}

TEST(CheckersInjected, NoFaultNoContext) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), kNone);
  // A scheduler's decision on the same QP is no fault.
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kSchedHold, 1, b.qpn, 1, true)), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_REM_ACCESS_ERR)}), Ids{"error-completion"});
  ASSERT_EQ(b.f.last.size(), 1u);
  EXPECT_EQ(b.f.last[0].context, "");
}

TEST(CheckersInjected, AFaultOnAnotherQpIsNotNamed) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId a = f.CreateQp(pd, cq, cq, Caps(8));
  ObjId b = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(a);
  f.ToRts(b);
  EXPECT_EQ(f.PostSend(a, {Wr(1, true)}), kNone);
  EXPECT_EQ(f.PostSend(b, {Wr(1, true)}), kNone);
  EXPECT_EQ(f.Feed(Decision(core::Point::kWcError, IBV_WC_RETRY_EXC_ERR, Fx::Qpn(a), 1)), kNone);
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(b), 1, IBV_WC_REM_OP_ERR)}), Ids{"error-completion"});
  ASSERT_EQ(f.last.size(), 1u);
  EXPECT_EQ(f.last[0].context, "");
  // The post after the error on a (post-after-error) is on a: named.
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(a), 1, IBV_WC_RETRY_EXC_ERR)}), Ids{"error-completion"});
  EXPECT_EQ(f.last[0].context,
            "after injected wc.error RETRY_EXC_ERR on QP " + Hex(Fx::Qpn(a)) + " wr_id=0x1 (decision #1)");
}

TEST(CheckersInjected, TheLatestFaultOnTheQpIsNamed) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true), Wr(2, true)}), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kPostSend, (uint64_t{ENOMEM} << 32) | 2, b.qpn, 7, true)), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kSchedPick, 2, b.qpn)), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kWcError, IBV_WC_REM_ACCESS_ERR, b.qpn, 2)), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1), Wc(b.qpn, 2, IBV_WC_REM_ACCESS_ERR)}), Ids{"error-completion"});
  ASSERT_EQ(b.f.last.size(), 1u);
  EXPECT_EQ(b.f.last[0].context,
            "after injected wc.error REM_ACCESS_ERR on QP " + Hex(b.qpn) + " wr_id=0x2 (decision #3)");
}

TEST(CheckersInjected, AFindingAboutNoQpNamesTheLatestFaultAnywhere) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kSchedPick, 1)), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kRegMr, ENOMEM)), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), Ids{"dereg-in-flight"});
  ASSERT_EQ(b.f.last.size(), 1u);
  EXPECT_EQ(b.f.last[0].context, "after injected reg_mr ENOMEM (decision #2)");
}

TEST(CheckersInjected, PostFaultIsDescribedWithItsErrnoAndWr) {
  Basic b(8);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kPostSend, (uint64_t{EINVAL} << 32) | 1, b.qpn, 0x40, true)),
            kNone);
  // A later finding on the QP (a post to it in ERR) names the failed post.
  EXPECT_EQ(b.f.ModifyQp(b.qp, IBV_QPS_ERR), kNone);
  Ids got = b.f.PostSend(b.qp, {Wr(9, true)});
  ASSERT_FALSE(got.empty());
  EXPECT_EQ(b.f.last[0].context,
            "after injected post_send EINVAL at WR 0 on QP " + Hex(b.qpn) + " wr_id=0x40 (decision #1)");
}

// A replay of the events (one thread, the seqs they carry) numbers the
// decisions as the live engine (numbering events itself) did.
TEST(CheckersInjected, ReplayNamesTheSameDecisions) {
  Basic b(8);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kSchedPick, 1, b.qpn)), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(5, true)}), kNone);
  EXPECT_EQ(b.f.Feed(Decision(core::Point::kWcError, IBV_WC_RETRY_EXC_ERR, b.qpn, 5)), kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 5, IBV_WC_RETRY_EXC_ERR)}), Ids{"error-completion"});
  const std::string live = b.f.last.at(0).context;
  EXPECT_NE(live.find("(decision #2)"), std::string::npos) << live;
  Engine replay(/*assign_seq=*/false, core::CheckSet::All(), /*one_thread=*/true);
  std::vector<Finding> all;
  for (const Event& e : b.f.log)
    for (Finding& f : replay.OnEvent(e)) all.push_back(std::move(f));
  ASSERT_EQ(all.size(), 1u);
  EXPECT_EQ(all[0].context, live);
  // A live engine that numbers events itself agrees too.
  Engine numbered(/*assign_seq=*/true);
  std::vector<Finding> got;
  std::vector<checkers::RetiredWr> retired;
  for (Event e : b.f.log) numbered.OnEvent(e, &got, &retired);
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].context, live);
}

// Live, a decision another thread records after an event's seq was taken
// may be seen while that event is checked: it is not named, since the
// replay (in seq order) checks the event before it.
TEST(CheckersInjected, ADecisionWithALaterSeqIsNotNamed) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true)}), kNone);
  Event d = Decision(core::Point::kWcError, IBV_WC_RETRY_EXC_ERR, b.qpn, 1);
  d.seq = 1000;
  EXPECT_TRUE(b.f.eng.OnEvent(d).empty());
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 1, IBV_WC_RETRY_EXC_ERR)}), Ids{"error-completion"});
  ASSERT_EQ(b.f.last.size(), 1u);
  EXPECT_EQ(b.f.last[0].context, "");
}

}  // namespace injected
}  // namespace
}  // namespace rdmasan::checkers_testing

// ====================================== hang books (Engine::Outstanding) ==
// The watchdog's `hang` report (interpose/watchdog.h) names, per CQ, the
// outstanding WRs that could still complete there; these are its books.
namespace rdmasan::checkers_testing {
namespace {
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

// ===================================================== memory windows ==
// rkey-not-bumped, invalidate-in-flight, and the window extensions of
// destroy-in-use and free-registered (issue 13).

TEST(CheckersWindows, RebindWithTheSameKeyIsRkeyNotBumped) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.RemoteInv(0x4000101), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000101)}), Ids{"rkey-not-bumped"});
  EXPECT_NE(w.f.last[0].message.find("rkey 0x4000101"), std::string::npos) << w.f.last[0].message;
  // The near miss: bumped before the rebind.
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(3, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 3, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(4, mw, w.mr, 0x4000102)}), kNone);
}

TEST(CheckersWindows, FirstBindWithTheAllocatedKeyAndType1AreSilent) {
  Windows w;
  ObjId mw2 = w.AllocMw(0x4000200);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw2, w.mr, 0x4000200)}), kNone);
  // Type 1: ibv_bind_mw picks the key; the same key again is not the
  // program's doing.
  ObjId mw1 = w.AllocMw(0x4000300, IBV_MW_TYPE_1);
  EXPECT_EQ(w.BindMwVerb(mw1, 0x4000301, 2), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.BindMwVerb(mw1, 0x4000301, 3), kNone);
}

TEST(CheckersWindows, RebindBeforeTheLocalInvCompletedIsInvalidateInFlight) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(3, mw, w.mr, 0x4000102)}), Ids{"invalidate-in-flight"});
  EXPECT_NE(w.f.last[0].message.find("while its LOCAL_INV (rkey 0x4000101"), std::string::npos)
      << w.f.last[0].message;
}

TEST(CheckersWindows, PolledLocalInvThenDeallocIsSilent) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101, 0x10100, 0x100, false)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
  // The signaled LOCAL_INV retires the unsignaled bind with it.
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)}), kNone);
  EXPECT_EQ(w.DeallocMw(mw), kNone);
  EXPECT_EQ(w.f.DeregMr(w.mr), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x10000, 0x10000), kNone);
}

TEST(CheckersWindows, DeallocDeregAndFreeDuringTheLocalInv) {
  for (int variant = 0; variant < 3; ++variant) {
    SCOPED_TRACE(variant);
    Windows w;
    ObjId mw = w.AllocMw(0x4000100);
    EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
    EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
    if (variant == 0) {
      EXPECT_EQ(w.DeallocMw(mw), Ids{"invalidate-in-flight"});
    }
    if (variant == 1) {
      EXPECT_EQ(w.f.DeregMr(w.mr), Ids{"invalidate-in-flight"});
    }
    if (variant == 2) {
      EXPECT_EQ(FreeRange(w.f, 0x10180, 0x10), (Ids{"free-registered", "invalidate-in-flight"}));
      // The window covered [0x10100, +0x100) only.
      EXPECT_EQ(FreeRange(w.f, 0x10400, 0x10), Ids{"free-registered"});
    }
  }
}

TEST(CheckersWindows, RemoteInvalidationSeenThenRebindIsSilent) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.RemoteInv(0x4000101), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000102)}), kNone);
  EXPECT_EQ(w.RemoteInv(0x4000102), kNone);
  EXPECT_EQ(w.DeallocMw(mw), kNone);
  EXPECT_EQ(w.f.DeregMr(w.mr), kNone);
}

TEST(CheckersWindows, DeregWithAValidWindowIsDestroyInUse) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  Event e;
  e.kind = EventKind::kDeregMr;
  e.obj = w.mr;
  e.ret = EBUSY;  // as a NIC refuses it
  e.err = EBUSY;
  EXPECT_EQ(w.f.Feed(e), Ids{"destroy-in-use"});
  EXPECT_NE(w.f.last[0].message.find("rkey 0x4000101"), std::string::npos) << w.f.last[0].message;
  // A zero-length bind unbinds: then the dereg is fine.
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000102, 0, 0)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.f.DeregMr(w.mr), kNone);
}

TEST(CheckersWindows, DeallocPdWithAWindowIsDestroyInUse) {
  Fx f;
  ObjId pd = f.AllocPd();
  Event e;
  e.kind = EventKind::kAllocMw;
  e.parent = pd;
  e.rkey = 0x4000100;
  e.count = IBV_MW_TYPE_1;
  ObjId mw = f.Created(e);
  EXPECT_EQ(f.DeallocPd(pd), Ids{"destroy-in-use"});
  EXPECT_NE(f.last[0].message.find("memory window"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Simple(EventKind::kDeallocMw, mw), kNone);
  EXPECT_EQ(f.DeallocPd(pd), kNone);
}

TEST(CheckersWindows, FreeUnderAValidWindowNamesItsKey) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x10100, 0x10), Ids{"free-registered"});
  EXPECT_NE(w.f.last[0].message.find("rkey 0x4000101"), std::string::npos) << w.f.last[0].message;
  // Outside the window: the MR's message.
  EXPECT_EQ(FreeRange(w.f, 0x10800, 0x10), Ids{"free-registered"});
  EXPECT_EQ(w.f.last[0].message.find("window"), std::string::npos) << w.f.last[0].message;
}

TEST(CheckersWindows, ReregMrFollowsTheNewKeysAndRange) {
  Windows w;
  Event e;
  e.kind = EventKind::kReregMr;
  e.obj = w.mr;
  e.count = IBV_REREG_MR_CHANGE_TRANSLATION;
  e.addr = e.iova = 0x80000;
  e.length = 0x1000;
  e.lkey = 0x22;
  e.rkey = 0x10022;
  EXPECT_EQ(w.f.Feed(e), kNone);
  // The old lkey is gone, the new one names [0x80000, +0x1000).
  EXPECT_EQ(w.f.PostSend(w.qp, {Wr(1, true, {Sg(0x10000, 8, 0x11)})}), Ids{"invalid-lkey"});
  EXPECT_EQ(w.f.PostSend(w.qp, {Wr(2, true, {Sg(0x80000, 8, 0x22)})}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_LOC_PROT_ERR)}), Ids{"error-completion"});
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_WR_FLUSH_ERR)}), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x10000, 0x100), kNone);
  EXPECT_EQ(FreeRange(w.f, 0x80000, 0x100), Ids{"free-registered"});
}

TEST(CheckersWindows, ErrorCompletionCarriesTheDevicesReason) {
  Windows w;
  EXPECT_EQ(w.f.PostSend(w.qp, {Wr(7, true, {w.sg()}, IBV_WR_RDMA_WRITE)}), kNone);
  Event r;
  r.kind = EventKind::kWcReason;
  r.obj = w.cq;
  r.wcs.push_back(Wc(w.qpn, 7, IBV_WC_REM_ACCESS_ERR));
  r.text = "REM_ACCESS_ERR: rkey 0x40001a02 was invalidated by LOCAL_INV (pid 4242, wr_id 0x7)";
  EXPECT_EQ(w.f.Feed(r), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 7, IBV_WC_REM_ACCESS_ERR)}), Ids{"error-completion"});
  EXPECT_NE(w.f.last[0].message.find("reason (softnic): REM_ACCESS_ERR: rkey 0x40001a02 was invalidated"),
            std::string::npos)
      << w.f.last[0].message;
}

TEST(CheckersWindows, WindowPostsReplayAlike) {
  // The same events through a fresh one-thread engine (replay) give the
  // same findings.
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)});
  w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)});
  w.f.PostSend(w.qp, {Windows::Bind(3, mw, w.mr, 0x4000101)});
  FreeRange(w.f, 0x10100, 8);
  Engine live(false), replay(false, core::CheckSet::All(), true);
  std::vector<std::string> a, b;
  for (const Event& e : w.f.log) {
    for (const auto& x : live.OnEvent(e)) a.push_back(x.message);
    for (const auto& x : replay.OnEvent(e)) b.push_back(x.message);
  }
  EXPECT_EQ(a, b);
  EXPECT_GE(a.size(), 3u);
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

std::vector<uint64_t> SrqWrIds(const Fx& f, ObjId srq) {
  std::vector<uint64_t> v;
  for (const auto& w : f.eng.state().Srq(srq)->rq) v.push_back(w.wr_id);
  return v;
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

// ======================================================= device memory ==
// ibv_reg_dm_mr: the interposer's kRegMr has addr 0 and iova 0 (zero-based
// offsets into the device's memory) and access with IBV_ACCESS_ZERO_BASED.

ObjId RegDmMr(Fx& f, ObjId pd, uint64_t len, uint32_t lkey) {
  Event e;
  e.kind = EventKind::kRegMr;
  e.parent = pd;
  e.addr = e.iova = 0;
  e.length = len;
  e.lkey = e.rkey = lkey;
  e.access = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  return f.Created(e);
}

TEST(CheckersDeviceMemory, ZeroBasedSgesInsideTheDmMrAreValid) {
  Basic b(8);
  RegDmMr(b.f, b.pd, 0x100, 0x22);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0, 64, 0x22)})}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, {Sg(0xc0, 0x40, 0x22)})}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(3, {Sg(0x80, 0x80, 0x22)})}), kNone);
}

TEST(CheckersDeviceMemory, SgePastTheDmMrIsOutOfBounds) {
  Basic b(8);
  RegDmMr(b.f, b.pd, 0x100, 0x22);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0xc0, 0x41, 0x22)})}), Ids{"sge-out-of-bounds"});
}

TEST(CheckersDeviceMemory, DmMrOfAnotherPdIsAnInvalidLkey) {
  Basic b(8);
  ObjId pd2 = b.f.AllocPd();
  RegDmMr(b.f, pd2, 0x100, 0x22);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0, 64, 0x22)})}), Ids{"invalid-lkey"});
}

// A DM MR holds none of the program's memory: a free of low addresses (the
// numbers its SGEs use) is neither under it nor in flight through it; the
// same free under an ordinary MR at those addresses is.
TEST(CheckersDeviceMemory, FreeOfTheSameNumbersIsNeitherRegisteredNorInFlight) {
  Basic b(8);
  RegDmMr(b.f, b.pd, 0x1000, 0x22);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x100, 64, 0x22)})}), kNone);
  EXPECT_EQ(FreeRange(b.f, 0x100, 0x40), kNone);
  b.f.RegMr(b.pd, 0x0, 0x1000, 0x33);
  EXPECT_EQ(FreeRange(b.f, 0x100, 0x40), Ids{"free-registered"});
}

// Deregistering a DM MR still used by an outstanding WR is dereg-in-flight,
// as for any MR.
TEST(CheckersDeviceMemory, DeregInFlightStillApplies) {
  Basic b(8);
  ObjId dm_mr = RegDmMr(b.f, b.pd, 0x1000, 0x22);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x100, 64, 0x22)})}), kNone);
  EXPECT_EQ(b.f.DeregMr(dm_mr), Ids{"dereg-in-flight"});
}

// ================================================================= XRC ==
// An XRC SRQ's receives complete on its own CQ (kCreateSrq's recv_cq),
// named by whichever target QP took them (one of another process, unknown
// here, too); an initiator has no receive queue, a target no send queue.

struct Xrc {
  Fx f;
  ObjId pd, cq, srq, ini, tgt;
  explicit Xrc(uint32_t srq_wr = 8, int32_t cqe = 64) {
    pd = f.AllocPd();
    f.RegMr(pd, 0x10000, 0x10000, 0x11);
    cq = f.CreateCq(cqe);
    Event e;
    e.kind = EventKind::kCreateSrq;
    e.parent = pd;
    e.recv_cq = cq;
    e.caps.max_recv_wr = srq_wr;
    e.caps.max_recv_sge = 1;
    srq = f.Created(e);
    ini = f.CreateQp(pd, cq, 0, Caps(8, 0, 1, 0), false, 0, IBV_QPT_XRC_SEND);
    tgt = f.CreateQp(0, 0, 0, Caps(0, 0, 0, 0, 0), false, 0, IBV_QPT_XRC_RECV);
    f.ToRts(ini);
    f.ToRts(tgt);
  }
  RecvWr R(uint64_t id) const { return Rwr(id, {Sg(0x10000 + 64 * id, 64, 0x11)}); }
};

TEST(CheckersXrc, SrqReceivesRetireOnItsCq) {
  Xrc x;
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(0), x.R(1), x.R(2), x.R(3)}), kNone);
  EXPECT_EQ(x.f.eng.state().PendingOn(x.cq), 4u);
  EXPECT_EQ(x.f.PostSend(x.ini, {Wr(50, true, {Sg(0x10000, 8, 0x11)})}), kNone);
  EXPECT_EQ(x.f.eng.state().PendingOn(x.cq), 5u);
  // The target QP's receive, then one by a target QP this process does
  // not know, then the initiator's send completion.
  EXPECT_EQ(x.f.Poll(x.cq, {Wc(Fx::Qpn(x.tgt), 2, IBV_WC_SUCCESS, IBV_WC_RECV),
                            Wc(0x7777, 0, IBV_WC_SUCCESS, IBV_WC_RECV), Wc(Fx::Qpn(x.ini), 50)}),
            kNone);
  EXPECT_EQ(SrqWrIds(x.f, x.srq), (std::vector<uint64_t>{1, 3}));
  EXPECT_EQ(x.f.SqSize(x.ini), 0u);
  EXPECT_EQ(x.f.eng.state().PendingOn(x.cq), 2u);
  // A send completion of an unknown QP is no receive.
  EXPECT_EQ(x.f.Poll(x.cq, {Wc(0x7777, 9, IBV_WC_SUCCESS, IBV_WC_SEND)}), kNone);
  EXPECT_EQ(SrqWrIds(x.f, x.srq), (std::vector<uint64_t>{1, 3}));
  // Destroyed, the SRQ no longer counts on its CQ.
  EXPECT_EQ(x.f.DestroySrq(x.srq), kNone);
  EXPECT_EQ(x.f.eng.state().PendingOn(x.cq), 0u);
}

TEST(CheckersXrc, RqOverflowCountsTheXrcSrq) {
  Xrc x(2);
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(0), x.R(1)}), kNone);
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(2)}), Ids{"rq-overflow"});
  // (The post "succeeded": the books hold 0, 1, 2.)  Completions on the
  // SRQ's CQ give slots back.
  EXPECT_EQ(x.f.Poll(x.cq, {Wc(Fx::Qpn(x.tgt), 0, IBV_WC_SUCCESS, IBV_WC_RECV),
                            Wc(Fx::Qpn(x.tgt), 1, IBV_WC_SUCCESS, IBV_WC_RECV)}),
            kNone);
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(3)}), kNone);
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(4)}), Ids{"rq-overflow"});
}

TEST(CheckersXrc, CqOverrunCountsTheXrcSrqOnItsCq) {
  Xrc x(8, 4);
  EXPECT_EQ(x.f.PostSend(x.ini, {Wr(1, true, {Sg(0x10000, 8, 0x11)}), Wr(2, true, {Sg(0x10000, 8, 0x11)})}),
            kNone);
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(0), x.R(1)}), kNone);
  // Two signaled sends and two receives fill the CQ: one more of either
  // can overrun it.
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, {x.R(2)}), Ids{"cq-overrun"});
  EXPECT_EQ(x.f.PostSend(x.ini, {Wr(3, true, {Sg(0x10000, 8, 0x11)})}), Ids{"cq-overrun"});
}

TEST(CheckersXrc, NoQueueOnTheWrongSide) {
  Xrc x;
  // (Other checks may speak too: the QP has no receive SGEs, a target no PD.)
  auto message_of = [&x](const char* check) {
    for (const auto& f : x.f.last)
      if (core::CheckName(f.check) == std::string(check)) return f.message;
    return std::string("(no ") + check + ")";
  };
  x.f.PostRecv(x.ini, {x.R(0)});
  EXPECT_NE(message_of("rq-overflow").find("an XRC_SEND QP, which has no receive queue"), std::string::npos)
      << message_of("rq-overflow");
  x.f.PostRecv(x.tgt, {x.R(0)});
  EXPECT_NE(message_of("rq-overflow").find("post receives to an XRC SRQ"), std::string::npos)
      << message_of("rq-overflow");
  x.f.PostSend(x.tgt, {Wr(1, true, {Sg(0x10000, 8, 0x11)})});
  EXPECT_NE(message_of("sq-overflow").find("XRC_RECV QP, which has no send queue"), std::string::npos)
      << message_of("sq-overflow");
}

TEST(CheckersXrc, TrafficLikeRdmaCoresTestsIsClean) {
  // Both directions share one CQ per side, as rdma-core's XRC tests do.
  Xrc x(20, 100);
  std::vector<RecvWr> wrs;
  for (int i = 0; i < 20; ++i) wrs.push_back(x.R(i % 8));
  EXPECT_EQ(x.f.PostSrqRecv(x.srq, wrs), kNone);
  for (int i = 0; i < 20; ++i) {
    EXPECT_EQ(x.f.PostSend(x.ini, {Wr(100 + i, true, {Sg(0x10000, 8, 0x11)})}), kNone);
    EXPECT_EQ(x.f.Poll(x.cq, {Wc(Fx::Qpn(x.ini), 100 + i), Wc(0x5555, i % 8, IBV_WC_SUCCESS, IBV_WC_RECV)}),
              kNone);
  }
  EXPECT_EQ(x.f.eng.state().PendingOn(x.cq), 0u);
}

// ======================================================= tag matching ==
// A TM SRQ's tagged buffers (ibv_post_srq_ops TAG_ADD) are the device's
// until the completion that ends its use of them (kTmWc events).

struct TmSetup {
  Fx f;
  ObjId pd, mr, ro, cq, srq, qp;
  uint32_t qpn;
  TmSetup() {
    pd = f.AllocPd();
    mr = f.RegMr(pd, 0x10000, 0x10000, 0x11);
    ro = f.RegMr(pd, 0x40000, 0x1000, 0x44, IBV_ACCESS_REMOTE_READ);
    cq = f.CreateCq(64);
    Event e;
    e.kind = EventKind::kCreateSrq;
    e.parent = pd;
    e.caps.max_recv_wr = 16;
    e.caps.max_recv_sge = 1;
    e.qp_type = IBV_SRQT_TM;
    e.send_cq = cq;
    srq = f.Created(e);
    qp = f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq);
    qpn = Fx::Qpn(qp);
    f.ToRts(qp);
  }
  static SendWr Op(uint32_t opcode, uint64_t wr_id, uint32_t handle, bool signaled,
                   std::vector<Sge> sges = {}, uint64_t recv_wr_id = 0) {
    SendWr w = Wr(wr_id, false, std::move(sges), opcode);
    w.send_flags = signaled ? IBV_OPS_SIGNALED : 0;
    w.imm_data = handle;
    w.remote_addr = recv_wr_id;
    w.compare_add = 0x5a;
    w.swap = ~0ull;
    return w;
  }
  // TAG_ADD of [0x10000 + off, +64) as handle h, recv_wr_id 0x100 + h.
  Ids Add(uint32_t h, uint64_t off = 0, bool signaled = false, uint32_t lkey = 0x11) {
    return Ops({Op(IBV_WR_TAG_ADD, 0x900 + h, h, signaled, {Sg(0x10000 + off, 64, lkey)}, 0x100 + h)});
  }
  Ids Ops(std::vector<SendWr> wrs) {
    Event e;
    e.kind = EventKind::kPostSrqOps;
    e.obj = srq;
    for (auto& w : wrs) e.send_wrs.push_back(std::move(w));
    return f.Feed(e);
  }
  // A polled completion, as the interposer emits it: its kTmWc event, then
  // the poll event.
  Ids Polled(Completion c, uint32_t flags) {
    Event t;
    t.kind = EventKind::kTmWc;
    t.obj = cq;
    t.count = flags;
    t.wcs.push_back(c);
    Ids got = f.Feed(t);
    Ids more = f.Poll(cq, {c});
    got.insert(got.end(), more.begin(), more.end());
    return got;
  }
  Ids Recv(uint64_t wr_id, uint32_t flags, uint32_t status = IBV_WC_SUCCESS) {
    return Polled(Wc(qpn, wr_id, status, IBV_WC_TM_RECV), flags);
  }
  Ids OpDone(uint64_t wr_id, uint32_t opcode, uint32_t status = IBV_WC_SUCCESS) {
    return Polled(Wc(0, wr_id, status, opcode), 0);
  }
};

TEST(CheckersTm, TaggedBufferIsInFlightUntilItsEagerMatchIsPolled) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), Ids{"dereg-in-flight"});
  const Finding& d = t.f.last[0];
  ASSERT_EQ(d.related.size(), 2u);
  EXPECT_NE(d.related[0].label.find("tagged buffer recv_wr_id=0x103 TAG_ADD posted at"), std::string::npos)
      << d.related[0].label;
}

TEST(CheckersTm, EagerMatchRetiresTheTag) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Recv(0x103, IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

TEST(CheckersTm, RendezvousHoldsTheBufferUntilItsData) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Recv(0x103, IBV_WC_TM_MATCH), kNone);
  EXPECT_EQ(t.f.eng.state().LkeyInFlight(0x11), true) << "matched, data not yet in";
  EXPECT_EQ(t.Recv(0x103, IBV_WC_TM_DATA_VALID), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

TEST(CheckersTm, IncompleteRendezvousEndsTheBuffersUse) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Recv(0x103, IBV_WC_TM_MATCH), kNone);
  t.Recv(0x103, 0, IBV_WC_TM_RNDV_INCOMPLETE);  // software finishes the transfer
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

TEST(CheckersTm, FreeingATaggedBufferIsFreeInFlight) {
  TmSetup t;
  EXPECT_EQ(t.Add(3, 128), kNone);
  Event e;
  e.kind = EventKind::kFreeRange;
  e.addr = 0x10000 + 160;
  e.length = 8;
  EXPECT_EQ(t.f.Feed(e), (Ids{"free-in-flight", "free-registered"}));
}

TEST(CheckersTm, SignaledRemovalFreesTheBufferAtItsCompletion) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Ops({TmSetup::Op(IBV_WR_TAG_DEL, 0x77, 3, true)}), kNone);
  EXPECT_TRUE(t.f.eng.state().LkeyInFlight(0x11)) << "the removal has not completed";
  EXPECT_EQ(t.OpDone(0x77, IBV_WC_TM_DEL), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

TEST(CheckersTm, UnsignaledRemovalFreesTheBufferAtOnce) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Ops({TmSetup::Op(IBV_WR_TAG_DEL, 0x77, 3, false)}), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

TEST(CheckersTm, FailedRemovalOfAMatchedTagLeavesItInFlight) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Recv(0x103, IBV_WC_TM_MATCH), kNone);
  EXPECT_EQ(t.Ops({TmSetup::Op(IBV_WR_TAG_DEL, 0x77, 3, true)}), kNone);
  t.OpDone(0x77, 0, IBV_WC_TM_ERR);
  EXPECT_TRUE(t.f.eng.state().LkeyInFlight(0x11));
  EXPECT_EQ(t.Recv(0x103, IBV_WC_TM_DATA_VALID), kNone);
  EXPECT_FALSE(t.f.eng.state().LkeyInFlight(0x11));
}

TEST(CheckersTm, ListOperationCompletionsRetireNoReceive) {
  // A TM_ADD completion on the SRQ's CQ names no QP: it must not retire a
  // posted receive of the SRQ (nor the tag).
  TmSetup t;
  ObjId mr2 = t.f.RegMr(t.pd, 0x80000, 0x1000, 0x88);
  EXPECT_EQ(t.f.PostSrqRecv(t.srq, {Rwr(1, {Sg(0x80000, 64, 0x88)})}), kNone);
  EXPECT_EQ(t.Add(3, 0, /*signaled=*/true), kNone);
  EXPECT_EQ(t.OpDone(0x903, IBV_WC_TM_ADD), kNone);
  EXPECT_EQ(t.f.eng.state().Srq(t.srq)->rq.size(), 1u);
  EXPECT_EQ(t.f.eng.state().Srq(t.srq)->tags.size(), 1u);
  EXPECT_EQ(t.f.DeregMr(mr2), Ids{"dereg-in-flight"});
}

TEST(CheckersTm, UnexpectedMessageTakesAnOrdinaryReceive) {
  // TM_RECV without TM flags: an unexpected message in an SRQ receive.
  TmSetup t;
  ObjId mr2 = t.f.RegMr(t.pd, 0x80000, 0x1000, 0x88);
  EXPECT_EQ(t.f.PostSrqRecv(t.srq, {Rwr(1, {Sg(0x80000, 64, 0x88)})}), kNone);
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Recv(1, 0), kNone);
  EXPECT_EQ(t.f.eng.state().Srq(t.srq)->tags.size(), 1u);
  EXPECT_EQ(t.f.DeregMr(mr2), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), Ids{"dereg-in-flight"});
}

TEST(CheckersTm, NoFlagsFromTheProviderMatchByWrId) {
  TmSetup t;
  EXPECT_EQ(t.Add(3), kNone);
  EXPECT_EQ(t.Recv(0x103, checkers::kTmFlagsUnknown), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

TEST(CheckersTm, TagBuffersAreCheckedAsReceives) {
  TmSetup t;
  EXPECT_EQ(t.Add(1, 0, false, 0x99), Ids{"invalid-lkey"});
  EXPECT_NE(t.f.last[0].message.find("post_srq_ops (TAG_ADD) to SRQ"), std::string::npos)
      << t.f.last[0].message;
  EXPECT_EQ(t.Ops({TmSetup::Op(IBV_WR_TAG_ADD, 5, 2, false, {Sg(0x40000, 64, 0x44)}, 0x55)}),
            Ids{"mr-access"});
  EXPECT_EQ(t.Ops({TmSetup::Op(IBV_WR_TAG_ADD, 6, 4, false, {Sg(0x1fff0, 64, 0x11)}, 0x56)}),
            Ids{"sge-out-of-bounds"});
}

TEST(CheckersTm, RefusedOperationsChangeNothing) {
  TmSetup t;
  Event e;
  e.kind = EventKind::kPostSrqOps;
  e.obj = t.srq;
  e.ret = e.err = ENOMEM;
  e.bad_index = 0;
  e.send_wrs.push_back(TmSetup::Op(IBV_WR_TAG_ADD, 1, 0, false, {Sg(0x10000, 64, 0x11)}, 0x100));
  EXPECT_EQ(t.f.Feed(e), kNone);
  EXPECT_EQ(t.f.DeregMr(t.mr), kNone);
}

}  // namespace
}  // namespace rdmasan::checkers_testing
