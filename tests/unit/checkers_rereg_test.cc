// Unit tests of rereg-in-flight (checkers/rereg_in_flight.cc) and of the
// books after ibv_rereg_mr: hand-built kReregMr events, as the interposer
// makes them (obj = the MR, count = the IBV_REREG_MR_* flags, parent = the
// new PD, addr/length/iova = the new range, access; lkey/rkey = the keys
// after the call; ret = what ibv_rereg_mr returned).
// Below them, use-after-destroy (checkers/use_after_destroy.{h,cc}) over
// its whole table of verbs x handle kinds: events as the interposer makes
// them when it refuses a call on a dead handle (the old id where the handle
// goes, ret EINVAL or -1, err EINVAL, the verb's code in attr_mask when it
// is not the event kind's own).
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "checkers/use_after_destroy.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

Event Rereg(ObjId mr, uint32_t flags, uint32_t lkey_after, int32_t ret = 0, StackId stack = 0) {
  Event e;
  e.kind = EventKind::kReregMr;
  e.obj = mr;
  e.count = flags;
  e.lkey = lkey_after;
  e.rkey = lkey_after + 0x10000;
  e.ret = ret;
  e.err = ret ? EINVAL : 0;
  e.stack = stack;
  return e;
}

// IBV_REREG_MR_CHANGE_TRANSLATION to [addr, +len); a NIC's new
// registration (softnic's too) comes with a new key.
Event MoveTo(ObjId mr, uint64_t addr, uint64_t len, uint32_t lkey_after, int32_t ret = 0, StackId stack = 0) {
  Event e = Rereg(mr, IBV_REREG_MR_CHANGE_TRANSLATION, lkey_after, ret, stack);
  e.addr = e.iova = addr;
  e.length = len;
  return e;
}

Event NewPd(ObjId mr, ObjId pd, uint32_t lkey) {
  Event e = Rereg(mr, IBV_REREG_MR_CHANGE_PD, lkey);
  e.parent = pd;
  return e;
}

Event NewAccess(ObjId mr, uint32_t access, uint32_t lkey) {
  Event e = Rereg(mr, IBV_REREG_MR_CHANGE_ACCESS, lkey);
  e.access = access;
  return e;
}

// The stack of the event that created `obj`.
StackId CreatedAt(const Fx& f, ObjId obj) {
  for (const Event& e : f.log)
    if (e.obj == obj && (e.kind == EventKind::kRegMr || e.kind == EventKind::kAllocMw)) return e.stack;
  ADD_FAILURE() << "no creation of 0x" << std::hex << obj;
  return 0;
}

bool Has(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

// ===================================================== rereg-in-flight ==

TEST(CheckersReregInFlight, TranslationWithASendOutstanding) {
  // The trigger: a SEND posted from the MR, the MR moved to other
  // memory before its completion was polled.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(0x2a, true, {b.sg(0, 8)})}, /*stack=*/7), kNone);
  ASSERT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22, 0, /*stack=*/9)), Ids{"rereg-in-flight"});
  const Finding& f = b.f.last[0];
  EXPECT_EQ(f.stack, 9u) << "the rereg's own stack first";
  EXPECT_TRUE(Has(f.message, absl::StrFormat("MR 0x%x (lkey 0x11) re-registered (translation to [0x80000, "
                                             "+4096)) with 1 outstanding WR(s) using it, e.g. on QP 0x%x",
                                             b.mr, b.qp)))
      << f.message;
  ASSERT_EQ(f.related.size(), 2u);
  EXPECT_EQ(f.related[0].kind, core::StackKind::kPosted);
  EXPECT_EQ(f.related[0].label, "outstanding WR wr_id=0x2a SEND posted at");
  EXPECT_EQ(f.related[0].stack, 7u);
  EXPECT_EQ(f.related[1].kind, core::StackKind::kRegistered);
  EXPECT_EQ(f.related[1].label, absl::StrFormat("MR 0x%x registered at", b.mr));
  EXPECT_EQ(f.related[1].stack, CreatedAt(b.f, b.mr));
  // Nothing else rides along: the MR is not deregistered.
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 0x2a)}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), kNone);
}

TEST(CheckersReregInFlight, PdChangeWithAReceiveOutstanding) {
  Basic b(8);
  ObjId pd2 = b.f.AllocPd();
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(5, {b.sg()})}), kNone);
  ASSERT_EQ(b.f.Feed(NewPd(b.mr, pd2, 0x11)), Ids{"rereg-in-flight"});
  EXPECT_TRUE(Has(b.f.last[0].message, absl::StrFormat("(PD 0x%x -> 0x%x)", b.pd, pd2)))
      << b.f.last[0].message;
  EXPECT_EQ(b.f.last[0].related[0].label, "outstanding WR wr_id=0x5 RECV posted at");
}

TEST(CheckersReregInFlight, AccessChangeWithAnSrqReceiveOutstanding) {
  SrqSetup s;
  ObjId mr = s.f.RegMr(s.pd, 0x40000, 0x1000, 0x44);
  EXPECT_EQ(s.f.PostSrqRecv(s.srq, {Rwr(1, {Sg(0x40000, 64, 0x44)})}), kNone);
  ASSERT_EQ(s.f.Feed(NewAccess(mr, IBV_ACCESS_LOCAL_WRITE, 0x44)), Ids{"rereg-in-flight"});
  EXPECT_TRUE(Has(s.f.last[0].message, absl::StrFormat("(access 0x%x -> 0x1)", kAllAccess)))
      << s.f.last[0].message;
  EXPECT_TRUE(Has(s.f.last[0].message, absl::StrFormat("e.g. on SRQ 0x%x", s.srq))) << s.f.last[0].message;
}

TEST(CheckersReregInFlight, AllThreeChangesAtOnceAreNamed) {
  Basic b(8);
  ObjId pd2 = b.f.AllocPd();
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()}, IBV_WR_RDMA_WRITE)}), kNone);
  Event e = MoveTo(b.mr, 0x90000, 0x100, 0x33);
  e.count |= IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  e.parent = pd2;
  e.access = IBV_ACCESS_LOCAL_WRITE;
  ASSERT_EQ(b.f.Feed(e), Ids{"rereg-in-flight"});
  EXPECT_TRUE(Has(b.f.last[0].message, absl::StrFormat("(translation to [0x90000, +256), PD 0x%x -> 0x%x, "
                                                       "access 0x%x -> 0x1)",
                                                       b.pd, pd2, kAllAccess)))
      << b.f.last[0].message;
}

TEST(CheckersReregInFlight, UnsignaledWrWhoseRetiringCompletionIsNotPolledYet) {
  // The signaled WR after it uses another MR; until its completion is
  // polled, the unsignaled WR using this MR is outstanding.
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId mr1 = f.RegMr(pd, 0x10000, 0x1000, 0x11);
  f.RegMr(pd, 0x20000, 0x1000, 0x22);
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  f.ToRts(qp);
  EXPECT_EQ(f.PostSend(qp, {Wr(1, false, {Sg(0x10000, 8, 0x11)}), Wr(2, true, {Sg(0x20000, 8, 0x22)})}),
            kNone);
  ASSERT_EQ(f.Feed(MoveTo(mr1, 0x30000, 0x1000, 0x31)), Ids{"rereg-in-flight"});
  EXPECT_EQ(f.last[0].related[0].label, "outstanding WR wr_id=0x1 SEND posted at");
}

TEST(CheckersReregInFlight, RightAfterTheRetiringCompletionIsSilent) {
  // The control: u u S using the MR, S's completion polled, then the rereg.
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, false, {b.sg(0)}), Wr(2, false, {b.sg(64)}), Wr(3, true, {b.sg(128)})}),
            kNone);
  EXPECT_EQ(b.f.Poll(b.cq, {Wc(b.qpn, 3)}), kNone);
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22)), kNone);
  EXPECT_EQ(b.f.Feed(NewAccess(b.mr, IBV_ACCESS_LOCAL_WRITE, 0x22)), kNone);
}

TEST(CheckersReregInFlight, IdleMrIsSilentWhileAnotherIsInUse) {
  Basic b(8);
  ObjId idle = b.f.RegMr(b.pd, 0x40000, 0x1000, 0x44);
  ObjId pd2 = b.f.AllocPd();
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(2, {b.sg(64)})}), kNone);
  EXPECT_EQ(b.f.Feed(MoveTo(idle, 0x50000, 0x1000, 0x45)), kNone);
  EXPECT_EQ(b.f.Feed(NewPd(idle, pd2, 0x45)), kNone);
  EXPECT_EQ(b.f.Feed(NewAccess(idle, 0, 0x45)), kNone);
}

TEST(CheckersReregInFlight, InlineAndEmptySgesDoNotUseTheMr) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg(0, 16)}, IBV_WR_SEND, IBV_SEND_INLINE)}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, {b.sg(0, 0)})}), kNone);
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22)), kNone);
}

TEST(CheckersReregInFlight, CallsThatCannotHaveTouchedTheMrAreSilent) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  // No change asked for.
  EXPECT_EQ(b.f.Feed(Rereg(b.mr, 0, 0x11)), kNone);
  // Refused by libibverbs before the provider saw it: "Old MR is valid".
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x11, IBV_REREG_MR_ERR_INPUT)), kNone);
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x11, IBV_REREG_MR_ERR_DONT_FORK_NEW)), kNone);
  // Failed in the device: the MR "shouldn't be used", the WR is as lost.
  ASSERT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x11, IBV_REREG_MR_ERR_CMD)), Ids{"rereg-in-flight"});
  EXPECT_TRUE(Has(b.f.last[0].message, "; the call failed (-4)")) << b.f.last[0].message;
  // Moved, then restoring fork on the old range failed: "New MR is valid".
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22, IBV_REREG_MR_ERR_DO_FORK_OLD)),
            Ids{"rereg-in-flight"});
}

TEST(CheckersReregInFlight, AValidWindowBoundToTheMr) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}, /*stack=*/21), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  ASSERT_EQ(w.f.Feed(NewAccess(w.mr, IBV_ACCESS_LOCAL_WRITE, 0x11)), Ids{"rereg-in-flight"});
  const Finding& f = w.f.last[0];
  EXPECT_TRUE(
      Has(f.message, absl::StrFormat("while memory window MW 0x%x bound to it is valid (rkey 0x4000101 "
                                     "grants remote access to [0x10100, +256))",
                                     mw)))
      << f.message;
  ASSERT_EQ(f.related.size(), 3u);
  EXPECT_EQ(f.related[0].kind, core::StackKind::kBound);
  EXPECT_EQ(f.related[0].stack, 21u);
  EXPECT_EQ(f.related[1].kind, core::StackKind::kAllocated);
  EXPECT_EQ(f.related[1].stack, CreatedAt(w.f, mw));
  EXPECT_EQ(f.related[2].kind, core::StackKind::kRegistered);
  // Invalidated and its completion polled: the window no longer depends
  // on the MR.
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 2, IBV_WC_SUCCESS, IBV_WC_LOCAL_INV)}), kNone);
  EXPECT_EQ(w.f.Feed(NewAccess(w.mr, IBV_ACCESS_LOCAL_WRITE, 0x11)), kNone);
}

TEST(CheckersReregInFlight, WindowWhoseLocalInvIsInFlightIsInvalidateInFlight) {
  Windows w;
  ObjId mw = w.AllocMw(0x4000100);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::Bind(1, mw, w.mr, 0x4000101)}), kNone);
  EXPECT_EQ(w.f.Poll(w.cq, {Wc(w.qpn, 1, IBV_WC_SUCCESS, IBV_WC_BIND_MW)}), kNone);
  EXPECT_EQ(w.f.PostSend(w.qp, {Windows::LocalInv(2, 0x4000101)}), kNone);
  ASSERT_EQ(w.f.Feed(MoveTo(w.mr, 0x80000, 0x1000, 0x22)), Ids{"invalidate-in-flight"});
  EXPECT_TRUE(
      Has(w.f.last[0].message, absl::StrFormat("MR 0x%x (lkey 0x11) re-registered while the LOCAL_INV "
                                               "of MW 0x%x",
                                               w.mr, mw)))
      << w.f.last[0].message;
  // A call that changes nothing says nothing.
  EXPECT_EQ(w.f.Feed(Rereg(w.mr, 0, 0x22)), kNone);
}

TEST(CheckersReregInFlight, OnByDefaultAndOffWhenDisabled) {
  EXPECT_TRUE(core::CheckDefaultOn(core::CheckId::kReregInFlight));
  EXPECT_EQ(core::CheckSeverity(core::CheckId::kReregInFlight), core::Severity::kError);
  core::CheckSet without;
  ASSERT_TRUE(core::CheckSet::Parse("-rereg-in-flight", &without).ok());
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22)), Ids{"rereg-in-flight"});
  Engine eng(false, without);
  size_t found = 0;
  for (const Event& e : b.f.log) found += eng.OnEvent(e).size();
  EXPECT_EQ(found, 0u);
}

TEST(CheckersReregInFlight, ReplayGivesTheSameFindings) {
  // The events through a fresh one-thread engine (what `rdmasan replay`
  // runs) give the same findings, related stacks included.
  Windows w;
  ObjId pd2 = w.f.AllocPd();
  ObjId mw = w.AllocMw(0x4000100);
  w.f.PostSend(w.qp, {Wr(1, true, {w.sg(0, 8)})});
  w.f.Feed(MoveTo(w.mr, 0x80000, 0x1000, 0x22));
  w.f.PostSend(w.qp, {Windows::Bind(2, mw, w.mr, 0x4000101, 0x80000)});
  w.f.Feed(NewPd(w.mr, pd2, 0x22));
  std::vector<std::string> a, b;
  auto text = [](const Finding& x) {
    std::string s = absl::StrCat(core::CheckName(x.check), " ", x.stack, " ", x.message);
    for (const auto& r : x.related) absl::StrAppend(&s, " | ", r.label, " ", r.stack);
    return s;
  };
  Engine live(false), replay(false, core::CheckSet::All(), true);
  for (const Event& e : w.f.log) {
    for (const auto& x : live.OnEvent(e)) a.push_back(text(x));
    for (const auto& x : replay.OnEvent(e)) b.push_back(text(x));
  }
  EXPECT_EQ(a, b);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(Has(a[0], "rereg-in-flight")) << a[0];
  EXPECT_TRUE(Has(a[1], "rereg-in-flight")) << a[1];
}

// ======================================================= the books ==

TEST(CheckersReregBooks, TranslationMovesTheKeyAndTheRange) {
  Basic b(8);
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22)), kNone);
  const checkers::MrState* m = b.f.eng.state().Mr(b.mr);
  ASSERT_NE(m, nullptr);
  EXPECT_EQ(m->addr, 0x80000u);
  EXPECT_EQ(m->iova, 0x80000u);
  EXPECT_EQ(m->length, 0x1000u);
  EXPECT_EQ(m->lkey, 0x22u);
  EXPECT_EQ(m->rkey, 0x10022u);
  EXPECT_EQ(m->pd, b.pd);
  EXPECT_EQ(m->access, kAllAccess);
  EXPECT_EQ(b.f.eng.state().MrByLkey(0x22), b.mr);
  EXPECT_EQ(b.f.eng.state().MrByLkey(0x11), 0u);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x10000, 8, 0x11)})}), Ids{"invalid-lkey"});
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(2, true, {Sg(0x80ff8, 8, 0x22)})}), kNone);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(3, true, {Sg(0x80ff8, 16, 0x22)})}), Ids{"sge-out-of-bounds"});
}

TEST(CheckersReregBooks, MovedDespiteTheForkErrorOfTheOldRange) {
  Basic b(8);
  EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22, IBV_REREG_MR_ERR_DO_FORK_OLD)), kNone);
  EXPECT_EQ(b.f.eng.state().MrByLkey(0x22), b.mr);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {Sg(0x80000, 8, 0x22)})}), kNone);
}

TEST(CheckersReregBooks, AFailedCallChangesNothing) {
  Basic b(8);
  for (int32_t ret : {IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_ERR_DONT_FORK_NEW, IBV_REREG_MR_ERR_CMD,
                      IBV_REREG_MR_ERR_CMD_AND_DO_FORK_NEW}) {
    EXPECT_EQ(b.f.Feed(MoveTo(b.mr, 0x80000, 0x1000, 0x22, ret)), kNone);
    EXPECT_EQ(b.f.eng.state().MrByLkey(0x11), b.mr) << ret;
    EXPECT_EQ(b.f.eng.state().Mr(b.mr)->addr, 0x10000u) << ret;
  }
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
}

TEST(CheckersReregBooks, NewPdMakesTheMrForeignToTheOldPdsQps) {
  Basic b(8);
  ObjId pd2 = b.f.AllocPd();
  EXPECT_EQ(b.f.Feed(NewPd(b.mr, pd2, 0x11)), kNone);
  EXPECT_EQ(b.f.eng.state().Mr(b.mr)->pd, pd2);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), Ids{"invalid-lkey"});
  // The MR belongs to pd2 now: pd2 cannot go, the old PD's MR is gone.
  EXPECT_EQ(b.f.DeallocPd(pd2), Ids{"destroy-in-use"});
}

TEST(CheckersReregBooks, NewAccessIsWhatMrAccessChecks) {
  Basic b(8);
  EXPECT_EQ(b.f.Feed(NewAccess(b.mr, 0, 0x11)), kNone);
  EXPECT_EQ(b.f.eng.state().Mr(b.mr)->access, 0u);
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(1, {b.sg()})}), Ids{"mr-access"});
  EXPECT_EQ(b.f.Feed(NewAccess(b.mr, IBV_ACCESS_LOCAL_WRITE, 0x11)), Ids{"rereg-in-flight"});
  EXPECT_EQ(b.f.PostRecv(b.qp, {Rwr(2, {b.sg(64)})}), kNone);
}

// =================================================== use-after-destroy ==

using checkers::UadVerb;

enum class Where { kObj, kParent, kSendCq, kRecvCq, kSrq, kChannel, kAh, kMw };

Event Dead(EventKind k, ObjId id, Where w = Where::kObj, UadVerb verb = UadVerb::kByKind,
           int32_t ret = EINVAL) {
  Event e;
  e.kind = k;
  switch (w) {
    case Where::kObj:
      e.obj = id;
      break;
    case Where::kParent:
      e.parent = id;
      break;
    case Where::kSendCq:
      e.send_cq = id;
      break;
    case Where::kRecvCq:
      e.recv_cq = id;
      break;
    case Where::kSrq:
      e.srq = id;
      break;
    case Where::kChannel:
      e.channel = id;
      break;
    case Where::kAh:
      e.send_wrs.emplace_back().ah = id;
      break;
    case Where::kMw:
      e.send_wrs.emplace_back().bind.mw = id;
      break;
  }
  e.attr_mask = static_cast<uint32_t>(verb);
  e.ret = ret;
  e.err = EINVAL;
  return e;
}

Event Destroyed(EventKind k, ObjId id) {
  Event e;
  e.kind = k;
  e.obj = id;
  return e;
}

const Ids kUad = {"use-after-destroy"};

TEST(CheckersUseAfterDestroyTable, CreationsOnADeallocatedPd) {
  Fx f;
  ObjId pd = f.AllocPd();
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDeallocPd, pd)), kNone);
  for (EventKind k : {EventKind::kCreateQp, EventKind::kRegMr, EventKind::kCreateSrq, EventKind::kCreateAh,
                      EventKind::kAllocMw})
    EXPECT_EQ(f.Feed(Dead(k, pd, Where::kParent, UadVerb::kByKind, -1)), kUad) << core::EventKindName(k);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateAh, pd, Where::kParent, UadVerb::kCreateAhFromWc, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kRegMr, pd, Where::kParent, UadVerb::kRegDmabufMr, -1)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_reg_dmabuf_mr on PD"), std::string::npos) << f.last[0].message;
}

TEST(CheckersUseAfterDestroyTable, QpVerbsOfADestroyedQp) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyQp, qp)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifyQp, qp)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_modify_qp of QP"), std::string::npos) << f.last[0].message;
  for (UadVerb v : {UadVerb::kQueryQp, UadVerb::kAttachMcast, UadVerb::kDetachMcast, UadVerb::kQueryEce,
                    UadVerb::kSetEce, UadVerb::kQueryQpDataInOrder}) {
    EXPECT_EQ(f.Feed(Dead(EventKind::kModifyQp, qp, Where::kObj, v)), kUad);
    EXPECT_NE(f.last[0].message.find(std::string("ibv_") + checkers::UadVerbName(static_cast<uint32_t>(v))),
              std::string::npos)
        << f.last[0].message;
  }
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSend, qp, Where::kObj, UadVerb::kWrComplete)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_wr_complete of QP"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Dead(EventKind::kBindMw, qp)), kUad);
}

TEST(CheckersUseAfterDestroyTable, CqChannelSrqMrAhMw) {
  Windows w;
  Fx& f = w.f;
  ObjId ch = f.CreateChannel();
  ObjId cq2 = f.CreateCq(16, ch);
  ObjId srq = f.CreateSrq(w.pd, 8);
  ObjId mr = f.RegMr(w.pd, 0x1000, 64, 7);
  ObjId ah = f.CreateAh(w.pd);
  ObjId mw = w.AllocMw(0x55);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyCq, cq2)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kAckCqEvents, cq2)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kResizeCq, cq2)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kPollCq, cq2, Where::kObj, UadVerb::kStartPoll, -1)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_start_poll of CQ"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, cq2, Where::kSendCq, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, cq2, Where::kRecvCq, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyCompChannel, ch)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateCq, ch, Where::kChannel, UadVerb::kByKind, -1)), kUad);
  EXPECT_NE(f.last[0].message.find("completion channel"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Dead(EventKind::kDestroyCompChannel, ch)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kGetCqEvent, ch, Where::kChannel, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroySrq, srq)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifySrq, srq)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifySrq, srq, Where::kObj, UadVerb::kQuerySrq)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, srq, Where::kSrq, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSrqOps, srq)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDeregMr, mr)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kReregMr, mr, Where::kObj, UadVerb::kByKind, -1)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kDeregMr, mr, Where::kObj, UadVerb::kUnimportMr)), kUad);
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDestroyAh, ah)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSend, ah, Where::kAh)), kUad);
  EXPECT_NE(f.last[0].message.find("through AH"), std::string::npos) << f.last[0].message;
  EXPECT_EQ(f.Feed(Destroyed(EventKind::kDeallocMw, mw)), kNone);
  EXPECT_EQ(f.Feed(Dead(EventKind::kDeallocMw, mw)), kUad);
  EXPECT_EQ(f.Feed(Dead(EventKind::kBindMw, mw, Where::kMw)), kUad);
}

TEST(CheckersUseAfterDestroyTable, EveryVerbOfAClosedContext) {
  Fx f;
  Event close;
  close.kind = EventKind::kCloseDevice;
  close.obj = 4242;
  EXPECT_EQ(f.Feed(close), kNone);
  for (uint32_t v = 1; v < static_cast<uint32_t>(UadVerb::kCount); ++v) {
    EXPECT_EQ(f.Feed(Dead(EventKind::kOpenDevice, 4242, Where::kParent, static_cast<UadVerb>(v))), kUad) << v;
    EXPECT_NE(f.last[0].message.find("on device context 0x"), std::string::npos) << f.last[0].message;
    EXPECT_NE(f.last[0].message.find("already closed"), std::string::npos) << f.last[0].message;
  }
  // A post through a live QP of the closed context names the context.
  EXPECT_EQ(f.Feed(Dead(EventKind::kPostSend, 4242, Where::kParent)), kUad);
  EXPECT_NE(f.last[0].message.find("ibv_post_send on device context"), std::string::npos)
      << f.last[0].message;
}

TEST(CheckersUseAfterDestroyTable, LiveHandlesAndOtherErrorsAreSilent) {
  Fx f;
  ObjId pd = f.AllocPd();
  ObjId cq = f.CreateCq(16);
  ObjId qp = f.CreateQp(pd, cq, cq, Caps(8));
  EXPECT_EQ(f.Feed(Dead(EventKind::kModifyQp, qp)), kNone);  // live: EINVAL for another reason
  EXPECT_EQ(f.Feed(Dead(EventKind::kCreateQp, pd, Where::kParent, UadVerb::kByKind, -1)), kNone);
  Event other = Dead(EventKind::kModifyQp, 999);
  other.err = ENOMEM;
  EXPECT_EQ(f.Feed(other), kNone);
  EXPECT_EQ(checkers::UadVerbName(0), nullptr);
  EXPECT_EQ(checkers::UadVerbName(static_cast<uint32_t>(UadVerb::kCount)), nullptr);
}

}  // namespace
}  // namespace rdmasan::checkers_testing
