// checkers_test: rq-overflow and cq-overrun: the receive queues and the CQs they complete
// on.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <cerrno>
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

}  // namespace
}  // namespace rdmasan::checkers_testing
