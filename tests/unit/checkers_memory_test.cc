// checkers_test: the memory of outstanding WRs: dereg-in-flight, buffer-modified-in-flight,
// free-in-flight, free-registered, and MRs of device memory.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ===================================================== dereg-in-flight ==

TEST(CheckersDeregInFlight, SendOutstanding) {
  Basic b(8);
  EXPECT_EQ(b.f.PostSend(b.qp, {Wr(1, true, {b.sg()})}), kNone);
  EXPECT_EQ(b.f.DeregMr(b.mr), Ids{"dereg-in-flight"});
}

TEST(CheckersDeregInFlight, RightAfterTheRetiringCompletionIsSilent) {
  // The near-miss: u u S referencing the MR, the S completion
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

}  // namespace
}  // namespace rdmasan::checkers_testing
