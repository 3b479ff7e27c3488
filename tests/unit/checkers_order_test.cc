// checkers_test: the checks of the order of the data: unfenced-read-use,
// overlapping-destinations, and buffer-modified-in-flight's silence about
// the bytes a READ writes.  Hand-built events in, the findings' CheckIds
// out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

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

constexpr uint32_t kRead = IBV_WR_RDMA_READ;
constexpr uint32_t kFence = IBV_SEND_FENCE;

core::CheckSet WithOverlap() {
  core::CheckSet c = core::CheckSet::All();
  c.Set(CheckId::kOverlappingDestinations, true);
  return c;
}

// Basic (checkers_fixture.h) with a second QP on the same PD and MR, and
// the check set of the test's choice.
struct Two {
  Fx f;
  ObjId pd, mr, cq, qp, qp2, srq = 0;
  uint32_t qpn, qpn2;
  StackId mr_stack;
  explicit Two(const core::CheckSet& checks = Fx::AllButOverlap()) : f(checks) {
    pd = f.AllocPd();
    mr = f.RegMr(pd, 0x10000, 0x10000, 0x11);
    mr_stack = f.last_stack();
    cq = f.CreateCq(256);
    qp = f.CreateQp(pd, cq, cq, Caps(16));
    qp2 = f.CreateQp(pd, cq, cq, Caps(16));
    qpn = Fx::Qpn(qp);
    qpn2 = Fx::Qpn(qp2);
    f.ToRts(qp);
    f.ToRts(qp2);
  }
  static Sge sg(uint64_t off = 0, uint32_t len = 64) { return Sg(0x10000 + off, len, 0x11); }
};

const Ids kUnfenced = {"unfenced-read-use"};
const Ids kOverlap = {"overlapping-destinations"};

// ============================================================ unfenced-read-use ==

TEST(CheckersUnfencedReadUse, SendAfterReadOnTheSameQp) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg()}, kRead)}), kNone);
  const StackId read_at = t.f.last_stack();
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(2, true, {t.sg(16, 8)})}), kUnfenced);
  const Finding& f = t.f.last[0];
  EXPECT_NE(f.message.find("SEND wr_id=0x2 gathers SGE 0"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("RDMA_READ wr_id=0x1 on the same QP"), std::string::npos) << f.message;
  ASSERT_EQ(f.related.size(), 2u);
  EXPECT_EQ(f.related[0].kind, core::StackKind::kPosted);
  EXPECT_EQ(f.related[0].stack, read_at);
  EXPECT_EQ(f.related[1].kind, core::StackKind::kRegistered);
  EXPECT_EQ(f.related[1].stack, t.mr_stack);
}

TEST(CheckersUnfencedReadUse, FencedOrPolledIsSilent) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg()}, kRead)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(2, true, {t.sg()}, IBV_WR_SEND, kFence)}), kNone);
  // Behind a fenced WR, an unfenced one waits too (the SQ starts WRs in order).
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(3, true, {t.sg()}, IBV_WR_RDMA_WRITE)}), kNone);
  EXPECT_EQ(t.f.Poll(t.cq, {Wc(t.qpn, 1, IBV_WC_SUCCESS, IBV_WC_RDMA_READ)}), kNone);
  // A READ whose completion was polled has landed.
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(4, true, {t.sg()})}), kNone);
}

TEST(CheckersUnfencedReadUse, UnsignaledReadRetiredByALaterCompletion) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, false, {t.sg()}, kRead), Wr(2, true, {t.sg(0x100)}, kRead)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(3, true, {t.sg()})}), kUnfenced);
  EXPECT_EQ(t.f.Poll(t.cq, {Wc(t.qpn, 2, IBV_WC_SUCCESS, IBV_WC_RDMA_READ)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(4, true, {t.sg()}), Wr(5, true, {t.sg(0x100)})}), kNone);
}

TEST(CheckersUnfencedReadUse, AnotherQpIsNotOrderedByAFence) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg()}, kRead)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(2, true, {t.sg()}, IBV_WR_RDMA_WRITE, kFence)}), kUnfenced);
  EXPECT_NE(t.f.last[0].message.find("IBV_SEND_FENCE orders only the WRs of one QP"), std::string::npos);
}

TEST(CheckersUnfencedReadUse, OtherMemoryIsSilent) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg(0, 64)}, kRead)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(2, true, {t.sg(64, 64)})}), kNone);  // adjacent, not overlapping
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(3, true, {t.sg(0x1000, 0)})}), kNone);
}

TEST(CheckersUnfencedReadUse, WithinOneChain) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, false, {t.sg()}, kRead), Wr(2, true, {t.sg()})}), kUnfenced);
  Two u;
  EXPECT_EQ(u.f.PostSend(u.qp, {Wr(1, false, {u.sg()}, kRead), Wr(2, true, {u.sg()}, IBV_WR_SEND, kFence)}),
            kNone);
}

TEST(CheckersUnfencedReadUse, AtomicResultAndInline) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg(0, 8)}, IBV_WR_ATOMIC_FETCH_AND_ADD)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(2, true, {t.sg(0, 8)}, IBV_WR_RDMA_WRITE)}), kUnfenced);
  // An inline WR copies at the post: a fence cannot help it.
  Two u;
  EXPECT_EQ(u.f.PostSend(u.qp, {Wr(1, true, {u.sg()}, kRead)}), kNone);
  EXPECT_EQ(u.f.PostSend(u.qp, {Wr(2, true, {Sg(0x10000, 16, 0)}, IBV_WR_SEND, kFence | IBV_SEND_INLINE)}),
            kUnfenced);
}

TEST(CheckersUnfencedReadUse, LocalInvOfTheReadsMr) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg()}, kRead)}), kNone);
  SendWr inv = Wr(2, true, {}, IBV_WR_LOCAL_INV);
  inv.imm_data = 0x10011;  // the MR's rkey
  EXPECT_EQ(t.f.PostSend(t.qp, {inv}), kUnfenced);
  EXPECT_NE(t.f.last[0].message.find("LOCAL_INV wr_id=0x2 invalidates key 0x10011"), std::string::npos);
  Two u;
  EXPECT_EQ(u.f.PostSend(u.qp, {Wr(1, true, {u.sg()}, kRead)}), kNone);
  inv.send_flags |= kFence;
  EXPECT_EQ(u.f.PostSend(u.qp, {inv}), kNone);
  inv.send_flags &= ~kFence;
  inv.wr_id = 3;
  inv.imm_data = 0x777;  // another key
  EXPECT_EQ(u.f.PostSend(u.qp, {inv}), kNone);
}

TEST(CheckersUnfencedReadUse, ResetAndDestroyDropTheRead) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg()}, kRead)}), kNone);
  EXPECT_EQ(t.f.ModifyQp(t.qp, IBV_QPS_RESET), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(2, true, {t.sg()})}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(3, true, {t.sg(0x100)}, kRead)}), kNone);
  EXPECT_EQ(t.f.DestroyQp(t.qp2), kNone);
  t.f.ToRts(t.qp);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(4, true, {t.sg(0x100)})}), kNone);
}

TEST(CheckersUnfencedReadUse, OffWhenDisabled) {
  EXPECT_TRUE(core::CheckDefaultOn(CheckId::kUnfencedReadUse));
  EXPECT_EQ(core::CheckSeverity(CheckId::kUnfencedReadUse), core::Severity::kError);
  core::CheckSet without;
  ASSERT_TRUE(core::CheckSet::Parse("-unfenced-read-use", &without).ok());
  Two t(without);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, true, {t.sg()}, kRead)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(2, true, {t.sg()})}), kNone);
}

// ============================ buffer-modified-in-flight and a READ's result ==

// A WR gathering bytes a READ still writes is not hashed again at its
// retirement: the READ changes them, legally when the WR is fenced.
TEST(CheckersUnfencedReadUse, GatheredReadResultIsNotHashed) {
  Two t;
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(1, false, {t.sg()}, kRead)}), kNone);
  SendWr send = Wr(2, true, {t.sg(), t.sg(0x200, 16)}, IBV_WR_SEND, kFence);
  send.sges[0].hash = 0x1234;  // the READ's result
  send.sges[1].hash = 0x5678;  // other bytes: still watched
  EXPECT_EQ(t.f.PostSend(t.qp, {send}), kNone);
  const auto& sq = t.f.Qp(t.qp).sq;
  ASSERT_EQ(sq.size(), 2u);
  EXPECT_EQ(sq[1].sges[0].hash, 0u);
  EXPECT_EQ(sq[1].sges[1].hash, 0x5678u);
  EXPECT_TRUE(sq[1].hashed);
  SendWr only = Wr(3, true, {t.sg()}, IBV_WR_SEND, kFence);
  only.sges[0].hash = 0x1234;
  EXPECT_EQ(t.f.PostSend(t.qp, {only}), kNone);
  EXPECT_FALSE(t.f.Qp(t.qp).sq[2].hashed);
  // Retired, the WR with nothing hashed is not handed back to be hashed again.
  EXPECT_EQ(t.f.Poll(t.cq, {Wc(t.qpn, 3)}), kNone);
  auto retired = t.f.eng.TakeRetired();
  ASSERT_EQ(retired.size(), 1u);
  EXPECT_EQ(retired[0].wr.wr_id, 2u);
}

// ===================================================== overlapping-destinations ==

TEST(CheckersOverlappingDestinations, TwoReceivesIntoOneBuffer) {
  EXPECT_FALSE(core::CheckDefaultOn(CheckId::kOverlappingDestinations));
  EXPECT_EQ(core::CheckSeverity(CheckId::kOverlappingDestinations), core::Severity::kWarning);
  Two t(WithOverlap());
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(1, {t.sg(0, 64)})}), kNone);
  const StackId first = t.f.last_stack();
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(2, {t.sg(32, 64)})}), kOverlap);
  const Finding& f = t.f.last[0];
  EXPECT_NE(f.message.find("receive wr_id=0x2"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("receive wr_id=0x1 on the same QP"), std::string::npos) << f.message;
  ASSERT_EQ(f.related.size(), 1u);
  EXPECT_EQ(f.related[0].kind, core::StackKind::kPosted);
  EXPECT_EQ(f.related[0].stack, first);
  // Off by default.
  Two u;
  EXPECT_EQ(u.f.PostRecv(u.qp, {Rwr(1, {u.sg()})}), kNone);
  EXPECT_EQ(u.f.PostRecv(u.qp, {Rwr(2, {u.sg()})}), kNone);
}

TEST(CheckersOverlappingDestinations, NearMisses) {
  Two t(WithOverlap());
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(1, {t.sg(0, 64)}), Rwr(2, {t.sg(64, 64)})}), kNone);  // adjacent
  EXPECT_EQ(t.f.Poll(t.cq, {Wc(t.qpn, 1, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(3, {t.sg(0, 64)})}), kNone);  // reposted after its completion
  EXPECT_EQ(t.f.PostRecv(t.qp2, {Rwr(4, {t.sg(0x400, 64)})}), kNone);
  EXPECT_EQ(t.f.DestroyQp(t.qp2), kNone);  // its receives go with it
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(5, {t.sg(0x400, 64)})}), kNone);
  EXPECT_EQ(t.f.ModifyQp(t.qp, IBV_QPS_RESET), kNone);
  EXPECT_EQ(t.f.ModifyQp(t.qp, IBV_QPS_INIT), kNone);
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(6, {t.sg(0, 128)})}), kNone);
}

TEST(CheckersOverlappingDestinations, WithinOnePost) {
  Two t(WithOverlap());
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(1, {t.sg()}), Rwr(2, {t.sg()})}), kOverlap);
  EXPECT_NE(t.f.last[0].message.find("receive wr_id=0x1 of the same post"), std::string::npos);
}

TEST(CheckersOverlappingDestinations, ReadResultsAndReceives) {
  Two t(WithOverlap());
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(1, {t.sg(0, 64)})}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(2, true, {t.sg(8, 8)}, kRead)}), kOverlap);
  EXPECT_NE(t.f.last[0].message.find("receive wr_id=0x1 of QP"), std::string::npos);
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(3, true, {t.sg(0x100, 8)}, IBV_WR_ATOMIC_CMP_AND_SWP)}), kNone);
  EXPECT_EQ(t.f.PostSend(t.qp, {Wr(4, true, {t.sg(0x100, 8)}, kRead)}), kOverlap);
}

TEST(CheckersOverlappingDestinations, SrqReceives) {
  Fx f(WithOverlap());
  ObjId pd = f.AllocPd();
  f.RegMr(pd, 0x10000, 0x10000, 0x11);
  ObjId cq = f.CreateCq(64);
  ObjId srq = f.CreateSrq(pd, 16);
  ObjId a = f.CreateQp(pd, cq, cq, Caps(8, 0), false, srq);
  f.ToRts(a);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(1, {Sg(0x10000, 64, 0x11)}), Rwr(2, {Sg(0x10040, 64, 0x11)})}), kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(3, {Sg(0x10040, 64, 0x11)})}), kOverlap);
  EXPECT_NE(f.last[0].message.find("receive wr_id=0x2 of the same SRQ"), std::string::npos);
  // Taken out of order, by wr_id: their buffer is free again, wr_id 1's not.
  EXPECT_EQ(f.Poll(cq, {Wc(Fx::Qpn(a), 3, IBV_WC_SUCCESS, IBV_WC_RECV),
                        Wc(Fx::Qpn(a), 2, IBV_WC_SUCCESS, IBV_WC_RECV)}),
            kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(4, {Sg(0x10040, 64, 0x11)})}), kNone);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(5, {Sg(0x10000, 8, 0x11)})}, 77), kOverlap);
  EXPECT_EQ(f.PostSrqRecv(srq, {Rwr(6, {Sg(0x10008, 8, 0x11)})}, 77), kNone);  // once per stack
  EXPECT_EQ(f.DestroyQp(a), kNone);
  EXPECT_EQ(f.DestroySrq(srq), kNone);
  ObjId srq2 = f.CreateSrq(pd, 16);
  EXPECT_EQ(f.PostSrqRecv(srq2, {Rwr(7, {Sg(0x10000, 128, 0x11)})}), kNone);
}

// ============================================================ recv-buffer-modified ==

core::Event DestModified(ObjId cq, uint32_t qpn, uint64_t wr_id, bool recv) {
  core::Event e;
  e.kind = EventKind::kDestModified;
  e.obj = cq;
  e.count = recv ? 1 : 0;
  e.wcs.push_back(Wc(qpn, wr_id, IBV_WC_SUCCESS, recv ? IBV_WC_RECV : IBV_WC_RDMA_READ));
  return e;
}

const Ids kRecvModified = {"recv-buffer-modified"};

// softnic's word (a kDestModified event before the poll) is reported at the
// poll, with the receive's post.
TEST(CheckersRecvBufferModified, ReceiveAndReadDestinations) {
  EXPECT_FALSE(core::CheckDefaultOn(CheckId::kRecvBufferModified));
  EXPECT_EQ(core::CheckSeverity(CheckId::kRecvBufferModified), core::Severity::kError);
  Two t;
  EXPECT_EQ(t.f.PostRecv(t.qp, {Rwr(7, {t.sg(0, 64)})}), kNone);
  const StackId posted = t.f.last_stack();
  EXPECT_EQ(t.f.Feed(DestModified(t.cq, t.qpn, 7, true)), kRecvModified);
  const Finding& f = t.f.last[0];
  EXPECT_NE(f.message.find("receive wr_id=0x7"), std::string::npos) << f.message;
  EXPECT_NE(f.message.find("[0x10000, +64)"), std::string::npos) << f.message;
  ASSERT_EQ(f.related.size(), 1u);
  EXPECT_EQ(f.related[0].kind, core::StackKind::kPosted);
  EXPECT_EQ(f.related[0].stack, posted);
  EXPECT_EQ(t.f.Poll(t.cq, {Wc(t.qpn, 7, IBV_WC_SUCCESS, IBV_WC_RECV)}), kNone);
  // A READ's destination.
  EXPECT_EQ(t.f.PostSend(t.qp2, {Wr(9, true, {t.sg(128, 64)}, kRead)}), kNone);
  EXPECT_EQ(t.f.Feed(DestModified(t.cq, t.qpn2, 9, false)), kRecvModified);
  EXPECT_NE(t.f.last[0].message.find("RDMA_READ wr_id=0x9"), std::string::npos) << t.f.last[0].message;
  EXPECT_NE(t.f.last[0].message.find("whose destination"), std::string::npos) << t.f.last[0].message;
  // Disabled: nothing.
  core::CheckSet off = Fx::AllButOverlap();
  off.Set(CheckId::kRecvBufferModified, false);
  Two u(off);
  EXPECT_EQ(u.f.PostRecv(u.qp, {Rwr(7, {u.sg()})}), kNone);
  EXPECT_EQ(u.f.Feed(DestModified(u.cq, u.qpn, 7, true)), kNone);
}

}  // namespace
}  // namespace rdmasan::checkers_testing
