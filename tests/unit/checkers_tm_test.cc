// checkers_test: tag matching: tagged buffers in flight until their completions.
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
