// checkers_test: the injected faults findings name (their context line).
// Hand-built events in, the findings' CheckIds out (tests/unit/checkers_fixture.h).
#include <infiniband/verbs.h>

#include <cerrno>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "absl/strings/str_format.h"

#include "checkers/engine.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/decision.h"
#include "core/event.h"
#include "core/report.h"
#include "tests/unit/checkers_fixture.h"

namespace rdmasan::checkers_testing {
namespace {

// ===================================================== injected faults ==
// Findings name the fault the harness injected before them (kDecision
// events, core/decision.h); decisions themselves raise nothing.

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
