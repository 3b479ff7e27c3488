// checkers_test: object lifetimes and CQ events: destroy-in-use, use-after-destroy,
// unacked-cq-events, notify-without-poll, fork-with-mrs.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>
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

}  // namespace
}  // namespace rdmasan::checkers_testing
