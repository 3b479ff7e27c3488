// softnic's chaos points that change when data moves (softnic/placement.h:
// gather; softnic/exec_order.h: fence, relaxed, lag), through the verbs an
// application calls, with a decide function that gives each point a fixed
// outcome.  What each test asserts is the order the spec allows and the
// friendly NIC never shows, seen in memory, plus what must not change:
// completions in post order, a fenced WR waiting, nothing without chaos.
#include <endian.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>

#include "interpose/faults.h"
#include "softnic/chaos.h"
#include "softnic/exec_order.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

using softnic::ChaosPoint;

std::array<uint64_t, static_cast<size_t>(ChaosPoint::kCount)> g_outcome;
std::array<int, static_cast<size_t>(ChaosPoint::kCount)> g_asked;

uint64_t Fixed(ChaosPoint p, uint64_t, uint64_t, uint64_t, const char*, uint32_t) {
  ++g_asked[static_cast<size_t>(p)];
  return g_outcome[static_cast<size_t>(p)];
}

class ChaosOrder : public SoftnicPair {
 protected:
  // What memory holds between two calls of the test is asserted: softnic's
  // driver thread, which runs a held WR when a program stalls for 100 ms,
  // would make that depend on the test thread's scheduling.
  void SetUp() override {
    softnic::exec::SetDriverForTest(false);
    SoftnicPair::SetUp();
  }
  void TearDown() override {
    softnic::SetChaos(nullptr, 0);
    interpose::ResetDecisionsForTest("chaos=");
    SoftnicPair::TearDown();
    softnic::exec::SetDriverForTest(true);
  }
  // Point `p` on with outcome `outcome` at every decision.
  void Chaos(ChaosPoint p, uint64_t outcome) {
    g_outcome.fill(0);
    g_asked.fill(0);
    g_outcome[static_cast<size_t>(p)] = outcome;
    softnic::SetChaos(Fixed, softnic::ChaosBit(p));
  }
  int Asked(ChaosPoint p) { return g_asked[static_cast<size_t>(p)]; }
  void Put(int side, uint64_t offset, uint64_t v) { memcpy(buf_[side].data() + offset, &v, 8); }
  uint64_t Get(int side, uint64_t offset) {
    uint64_t v;
    memcpy(&v, buf_[side].data() + offset, 8);
    return v;
  }
  // The wr_ids of `n` send completions of side 0, all successful.
  std::vector<uint64_t> Completed(int n) {
    std::vector<uint64_t> ids;
    for (const ibv_wc& wc : Poll(0, n)) {
      EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << ibv_wc_status_str(wc.status);
      ids.push_back(wc.wr_id);
    }
    return ids;
  }
};

// Without chaos a QP executes in post order: a WRITE after a READ of the
// same remote word leaves the READ the old value.
TEST_F(ChaosOrder, WithoutChaosAReadSeesTheValueBeforeTheLaterWrite) {
  Put(1, 0, 0xaaaa);
  Put(0, 64, 0xbbbb);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 64, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Completed(2), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Get(0, 0), 0xaaaau);
  EXPECT_EQ(Get(1, 0), 0xbbbbu);
}

// chaos.fence: the unfenced WRITE posted behind the READ executes first
// (openucx/ucx#7215's get returning the later put's value); the
// completions stay in post order.
TEST_F(ChaosOrder, FenceLetsAnUnfencedWriteOvertakeTheRead) {
  Chaos(ChaosPoint::kFence, 1);
  Put(1, 0, 0xaaaa);
  Put(0, 64, 0xbbbb);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Get(0, 0), 0u) << "the READ waits for a WR to overtake it";
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 64, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Get(1, 0), 0xbbbbu) << "the WRITE landed at its post";
  EXPECT_EQ(Get(0, 0), 0u) << "the READ's data lands a step later, not in the same call";
  EXPECT_EQ(Completed(2), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Get(0, 0), 0xbbbbu) << "the READ read after the WRITE landed";
  EXPECT_EQ(Asked(ChaosPoint::kFence), 1);
}

// IBV_SEND_FENCE: the WRITE waits for the READ, whatever chaos decides.
TEST_F(ChaosOrder, AFencedWriteWaitsForTheRead) {
  Chaos(ChaosPoint::kFence, 1);
  Put(1, 0, 0xaaaa);
  Put(0, 64, 0xbbbb);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 64, 8, IBV_SEND_SIGNALED | IBV_SEND_FENCE, 0), 0);
  EXPECT_EQ(Completed(2), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Get(0, 0), 0xaaaau);
  EXPECT_EQ(Get(1, 0), 0xbbbbu);
}

// A READ with nothing behind it waits one step, then completes.
TEST_F(ChaosOrder, AReadWithNothingBehindItCompletesAfterAStep) {
  Chaos(ChaosPoint::kFence, 1);
  Put(1, 0, 0xaaaa);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 8), 0);
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2));
  EXPECT_EQ(Get(0, 0), 0xaaaau);
}

// A READ behind an atomic does not overtake it (a SEND behind that READ may).
TEST_F(ChaosOrder, AReadBehindAnAtomicWaitsItsTurn) {
  Chaos(ChaosPoint::kFence, 1);
  Put(1, 0, 5);
  ASSERT_EQ(PostRecv(1, 9, 128, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 2, 8, 8, IBV_SEND_SIGNALED, 0), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 3, 16, 8), 0);
  EXPECT_EQ(Completed(3), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(Poll(1, 1).size(), 1u);
  EXPECT_EQ(Get(0, 0), 5u);
}

// chaos.relaxed: of two WRITEs into relaxed-ordering MRs the later lands
// first (the earlier one's bytes are the ones left).
TEST_F(ChaosOrder, RelaxedWritesLandOutOfOrder) {
  ibv_mr* relaxed = ibv_reg_mr(pd_, buf_[1].data(), kBuf, opts_.access | IBV_ACCESS_RELAXED_ORDERING);
  ASSERT_NE(relaxed, nullptr);
  Chaos(ChaosPoint::kRelaxed, 1);
  Put(0, 0, 0x1111);
  Put(0, 64, 0x2222);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 8, IBV_SEND_SIGNALED, 0, 0, relaxed->rkey), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 64, 8, IBV_SEND_SIGNALED, 0, 0, relaxed->rkey), 0);
  EXPECT_EQ(Get(1, 0), 0x2222u)
      << "the later WRITE landed; the earlier lands a step later, not in the same call";
  EXPECT_EQ(Completed(2), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(Get(1, 0), 0x1111u) << "the second WRITE landed first";
  // Into an MR without relaxed ordering: no decision, post order.
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 3, 0, 8, IBV_SEND_SIGNALED, 8), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 4, 64, 8, IBV_SEND_SIGNALED, 8), 0);
  EXPECT_EQ(Completed(2), (std::vector<uint64_t>{3, 4}));
  EXPECT_EQ(Get(1, 8), 0x2222u);
  EXPECT_EQ(Asked(ChaosPoint::kRelaxed), 1);
  EXPECT_EQ(ibv_dereg_mr(relaxed), 0);
}

// chaos.lag: the head WR waits a step; the poller's progress runs it.
TEST_F(ChaosOrder, LagHoldsTheQpForAStep) {
  Chaos(ChaosPoint::kLag, 1);
  Put(0, 0, 0x3333);
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Get(1, 0), 0u) << "not executed at the post";
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(2));
  EXPECT_EQ(Get(1, 0), 0x3333u);
}

// A NIC progresses by itself: a lagging SEND runs while the program polls
// only the receiver's CQ (a request sent, its arrival awaited), not its own.
TEST_F(ChaosOrder, ALaggingSendRunsWhileOnlyThePeersCqIsPolled) {
  Chaos(ChaosPoint::kLag, 1);
  ASSERT_EQ(PostRecv(1, 9, 256, 64), 0);
  Put(0, 0, 0x3434);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);
  auto wcs = Poll(1, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(Get(1, 256), 0x3434u);
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
}

// A chaos rule's qp= names the QP it applies to (the run's Decider).
TEST_F(ChaosOrder, QpSettingLimitsARuleToOneQp) {
  Put(0, 0, 0x5151);
  interpose::ResetDecisionsForTest("chaos=lag:p=1:qp=" + std::to_string(qp_[1]->qp_num));
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Get(1, 0), 0x5151u) << "another QP's rule: executed at the post";
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
  interpose::ResetDecisionsForTest("chaos=lag:p=1:qp=" + std::to_string(qp_[0]->qp_num));
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 0, 8, IBV_SEND_SIGNALED, 8), 0);
  EXPECT_EQ(Get(1, 8), 0u) << "its own rule: it lags";
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{2}));
  EXPECT_EQ(Get(1, 8), 0x5151u);
  EXPECT_EQ(interpose::Decider()->Count(core::Point::kChaosLag), 1u);
}

// chaos.gather, late: the SEND's source is read after the post, so a
// rewrite before the completion is what arrives.
TEST_F(ChaosOrder, LateGatherSendsTheBufferAsItIsLater) {
  Chaos(ChaosPoint::kGather, 1);
  ASSERT_EQ(PostRecv(1, 9, 256, 64), 0);
  Put(0, 0, 0x4444);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);
  Put(0, 0, 0x5555);  // the bug: the buffer is rewritten before the completion
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  EXPECT_EQ(Get(1, 256), 0x5555u);
}

// chaos.gather, twice: placed at the post, then again from the source as
// it is later (a retransmission).
TEST_F(ChaosOrder, TwiceGatheredWriteLandsTwice) {
  Chaos(ChaosPoint::kGather, 2);
  Put(0, 0, 0x6666);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 8, IBV_SEND_SIGNALED, 512), 0);
  EXPECT_EQ(Get(1, 512), 0x6666u) << "the first transmission";
  Put(0, 0, 0x7777);
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
  EXPECT_EQ(Get(1, 512), 0x7777u) << "the retransmission";
}

// An inline SEND was copied at its post: no gather decision.
TEST_F(ChaosOrder, InlineSendsAreNotGatheredLate) {
  Chaos(ChaosPoint::kGather, 1);
  ASSERT_EQ(PostRecv(1, 9, 256, 64), 0);
  Put(0, 0, 0x8888);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8, IBV_SEND_SIGNALED | IBV_SEND_INLINE), 0);
  Put(0, 0, 0x9999);
  EXPECT_EQ(Completed(1), (std::vector<uint64_t>{1}));
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  EXPECT_EQ(Get(1, 256), 0x8888u);
  EXPECT_EQ(Asked(ChaosPoint::kGather), 0);
}

// Outcome 0 everywhere: every point on, nothing changes.
TEST_F(ChaosOrder, NaturalOutcomesChangeNothing) {
  g_outcome.fill(0);
  softnic::SetChaos(Fixed, ~0u);
  Put(1, 0, 0xaaaa);
  Put(0, 64, 0xbbbb);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Get(0, 0), 0xaaaau) << "executed at its post";
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 64, 8, IBV_SEND_SIGNALED, 0), 0);
  EXPECT_EQ(Get(1, 0), 0xbbbbu);
  EXPECT_EQ(Completed(2), (std::vector<uint64_t>{1, 2}));
}

}  // namespace
}  // namespace rdmasan::testing
