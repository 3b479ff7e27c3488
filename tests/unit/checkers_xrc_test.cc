// checkers_test: XRC: SRQ receives on their own CQ, the queues each side lacks.
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

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

}  // namespace
}  // namespace rdmasan::checkers_testing
