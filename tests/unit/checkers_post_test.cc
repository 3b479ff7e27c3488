// checkers_test: the checks of one post: post-bad-qp-state, post-after-error, the SGE
// rules (invalid-lkey, sge-out-of-bounds, mr-access, sge-count),
// inline-too-large, atomic-misaligned, wr-id-duplicate.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
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
  // A misaligned RDMA WRITE is no atomic (its source away from the
  // atomics' results: unfenced-read-use).
  SendWr wr = Wr(4, true, {b.sg(0x100, 3)}, IBV_WR_RDMA_WRITE);
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

}  // namespace
}  // namespace rdmasan::checkers_testing
