// softnic's placement of one message in chunks, in a decided order, over
// several progress steps (chaos point kPlace, softnic/placement.h), driven
// by a decide function of the test's own installed with SetChaos: what a
// reader sees between the steps, completions only after the last chunk,
// outcome 0 as without chaos, and a QP destroyed, an MR deregistered or a
// QP flushed mid-placement.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <set>
#include <thread>
#include <vector>

#include "softnic/chaos.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

using softnic::ChaosPoint;

constexpr uint32_t kMsg = 16384;  // 64 chunks of 256 bytes
constexpr uint32_t kChunk = 256;
constexpr uint32_t kChunks = kMsg / kChunk;

std::atomic<uint64_t> g_outcome{0};
std::atomic<int> g_decisions{0};

uint64_t Decide(ChaosPoint p, uint64_t, uint64_t, uint64_t n, const char*, uint32_t) {
  if (p != ChaosPoint::kPlace) return 0;
  ++g_decisions;
  return g_outcome.load() % n;
}

class SoftnicPlace : public SoftnicPair {
 protected:
  void TearDown() override {
    softnic::SetChaos(nullptr, 0);
    SoftnicPair::TearDown();
  }

  void Chaos(uint64_t outcome) {
    g_outcome = outcome;
    g_decisions = 0;
    softnic::SetChaos(&Decide, 1u << static_cast<unsigned>(ChaosPoint::kPlace));
  }

  // A pattern with no zero byte in side `side`'s [off, off + kMsg).
  void Fill(int side, size_t off) {
    for (size_t i = 0; i < kMsg; ++i) buf_[side][off + i] = static_cast<uint8_t>(i % 251 + 1);
  }

  // Which chunks of the message at side `dst`'s `off` hold the pattern.
  std::vector<bool> Placed(int dst, size_t off) {
    std::vector<bool> out(kChunks);
    for (uint32_t c = 0; c < kChunks; ++c) {
      bool all = true;
      for (uint32_t i = 0; i < kChunk && all; ++i)
        all = buf_[dst][off + c * kChunk + i] == static_cast<uint8_t>((c * kChunk + i) % 251 + 1);
      out[c] = all;
    }
    return out;
  }
  static uint32_t Count(const std::vector<bool>& v) {
    uint32_t n = 0;
    for (bool b : v) n += b;
    return n;
  }

  // Drives the requester (polls on side 0's CQ, a step due every 2 ms)
  // until `done_side`'s CQ has a completion; every poll that finds none
  // must see the message at `dst`/`off` partly placed.  Returns the
  // completion and the distinct partial counts seen; the requester's
  // completion, when it is not the one waited for, counts in req_seen_.
  ibv_wc DriveUntilComplete(int done_side, int dst, size_t off, std::set<uint32_t>* partial) {
    ibv_wc wc{};
    req_seen_ = 0;
    for (int i = 0; i < 2000; ++i) {
      std::this_thread::sleep_for(std::chrono::microseconds(500));
      ibv_wc req;
      int n = ibv_poll_cq(cq_[0], 1, &req);
      EXPECT_GE(n, 0);
      if (done_side == 0 && n == 1) return req;
      if (n == 1) {
        EXPECT_EQ(req.status, IBV_WC_SUCCESS);
        ++req_seen_;
      }
      if (done_side == 1 && ibv_poll_cq(cq_[1], 1, &wc) == 1) return wc;
      const uint32_t c = Count(Placed(dst, off));
      EXPECT_LT(c, kChunks) << "every chunk placed, no completion yet";
      partial->insert(c);
    }
    ADD_FAILURE() << "no completion";
    return wc;
  }
  int req_seen_ = 0;
};

// (a) With outcomes 1, 2 and 3 a 16 KiB WRITE is placed over several
// steps; after the post (the first step) a reader sees the order's first
// chunks and not the others, and the completion comes after the last one.
TEST_F(SoftnicPlace, WriteIsPlacedInTheDecidedOrderOverSeveralSteps) {
  for (uint64_t outcome : {1, 2, 3}) {
    SCOPED_TRACE(outcome);
    std::fill(buf_[1].begin(), buf_[1].end(), 0);
    Fill(0, 0);
    Chaos(outcome);
    ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 0x70 + outcome, 0, kMsg), 0);
    std::vector<bool> first = Placed(1, 0);
    EXPECT_EQ(Count(first), kChunks / 4) << "a quarter of the chunks at the first step";
    if (outcome == 1) {
      EXPECT_TRUE(first[kChunks - 1]) << "the last chunk first";
      EXPECT_FALSE(first[kChunks - 2]) << "an earlier one not yet";
      EXPECT_TRUE(first[0]);
    } else if (outcome == 2) {
      EXPECT_TRUE(first[kChunks - 1]);
      EXPECT_FALSE(first[0]) << "reversed: the first chunk last";
    } else {
      bool prefix = true;
      for (uint32_t c = 0; c < kChunks / 4; ++c) prefix &= first[c];
      EXPECT_FALSE(prefix) << "shuffled: not in ascending order";
    }
    ibv_wc none;
    EXPECT_EQ(ibv_poll_cq(cq_[0], 1, &none), 0) << "no completion before the last chunk";
    std::set<uint32_t> partial = {Count(first), Count(Placed(1, 0))};
    ibv_wc wc = DriveUntilComplete(0, 1, 0, &partial);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.wr_id, 0x70 + outcome);
    EXPECT_EQ(Count(Placed(1, 0)), kChunks);
    EXPECT_GE(partial.size(), 2u) << "placed over several steps";
    EXPECT_EQ(g_decisions.load(), outcome == 3 ? 3 : 1);
  }
}

// (b) Outcome 0 is what softnic does without chaos: the whole message at
// the post, the completion at the first poll.
TEST_F(SoftnicPlace, OutcomeZeroPlacesAtOnceAsWithoutChaos) {
  for (bool chaos : {false, true}) {
    SCOPED_TRACE(chaos);
    g_decisions = 0;
    std::fill(buf_[1].begin(), buf_[1].end(), 0);
    Fill(0, 0);
    if (chaos) Chaos(0);
    ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, kMsg), 0);
    EXPECT_EQ(std::memcmp(buf_[0].data(), buf_[1].data(), kMsg), 0);
    ibv_wc wc;
    ASSERT_EQ(ibv_poll_cq(cq_[0], 1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(PostRecv(1, 2, 20000, kMsg), 0);
    ASSERT_EQ(Post(0, IBV_WR_SEND, 3, 0, kMsg), 0);
    EXPECT_EQ(std::memcmp(buf_[0].data(), buf_[1].data() + 20000, kMsg), 0);
    ASSERT_EQ(ibv_poll_cq(cq_[0], 1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    ASSERT_EQ(ibv_poll_cq(cq_[1], 1, &wc), 1);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
    EXPECT_EQ(wc.byte_len, kMsg);
    EXPECT_EQ(g_decisions.load(), chaos ? 2 : 0);
    softnic::SetChaos(nullptr, 0);
  }
}

// A SEND's and a WRITE_WITH_IMM's receive completion, and a READ's, come
// only after the last chunk.
TEST_F(SoftnicPlace, SendWriteImmAndReadCompleteAfterTheLastChunk) {
  Fill(0, 0);
  Chaos(2);
  ASSERT_EQ(PostRecv(1, 7, 0, kMsg), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, kMsg), 0);
  EXPECT_EQ(Count(Placed(1, 0)), kChunks / 4);
  std::set<uint32_t> partial = {kChunks / 4};
  ibv_wc wc = DriveUntilComplete(1, 1, 0, &partial);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 7u);
  EXPECT_EQ(wc.byte_len, kMsg);
  EXPECT_EQ(Count(Placed(1, 0)), kChunks);
  EXPECT_GE(partial.size(), 2u);
  EXPECT_EQ(req_seen_ + Poll(0, 1 - req_seen_, 100).size(), 1u);

  Chaos(3);
  ASSERT_EQ(PostRecv(1, 8, 0, 0), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE_WITH_IMM, 2, 0, kMsg, IBV_SEND_SIGNALED, 20000), 0);
  partial = {Count(Placed(1, 20000))};
  wc = DriveUntilComplete(1, 1, 20000, &partial);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(Count(Placed(1, 20000)), kChunks);
  EXPECT_GE(partial.size(), 2u);
  EXPECT_EQ(req_seen_ + Poll(0, 1 - req_seen_, 100).size(), 1u);

  // READ: side 0 reads side 1's copy into its own buffer at 40000.
  Chaos(1);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 3, 40000, kMsg, IBV_SEND_SIGNALED, 0), 0);
  std::vector<bool> first(kChunks);
  for (uint32_t c = 0; c < kChunks; ++c)
    first[c] = std::memcmp(buf_[0].data() + 40000 + c * kChunk, buf_[0].data() + c * kChunk, kChunk) == 0;
  EXPECT_TRUE(first[kChunks - 1]);
  EXPECT_FALSE(first[kChunks - 2]);
  wc = Poll(0, 1, 3000).at(0);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(std::memcmp(buf_[0].data() + 40000, buf_[0].data(), kMsg), 0);
}

// The WRs behind a message being placed wait for it; a flush reaches both,
// in post order.
TEST_F(SoftnicPlace, LaterWrsWaitAndAFlushMidPlacementCompletesAllInOrder) {
  Fill(0, 0);
  Chaos(2);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, kMsg), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 0, 64, IBV_SEND_SIGNALED, 40000), 0);
  EXPECT_EQ(buf_[1][40000], 0) << "the second WRITE waits behind the first";
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), 0);
  std::vector<ibv_wc> wc = Poll(0, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].wr_id, 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(wc[1].wr_id, 2u);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(buf_[1][40000], 0);
  EXPECT_LT(Count(Placed(1, 0)), kChunks);
}

// A requester QP destroyed mid-placement: nothing more lands, and the
// receive WQE its SEND was landing in is still the responder's (a flush
// completes it).
TEST_F(SoftnicPlace, QpDestroyedMidPlacementStopsPlacing) {
  Fill(0, 0);
  Chaos(1);
  ASSERT_EQ(PostRecv(1, 9, 0, kMsg), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, kMsg), 0);
  const uint32_t placed = Count(Placed(1, 0));
  EXPECT_EQ(placed, kChunks / 4);
  ASSERT_EQ(ibv_destroy_qp(qp_[0]), 0);
  qp_[0] = nullptr;
  for (int i = 0; i < 10; ++i) {
    std::this_thread::sleep_for(std::chrono::microseconds(300));
    ibv_wc wc;
    EXPECT_EQ(ibv_poll_cq(cq_[0], 1, &wc), 0);
  }
  EXPECT_EQ(Count(Placed(1, 0)), placed);
  // The responder may have found its peer gone and flushed already.
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);
  std::vector<ibv_wc> wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 9u);
  EXPECT_EQ(wc[0].status, IBV_WC_WR_FLUSH_ERR);
}

// An MR deregistered between two steps: the WRITE completes with
// REM_ACCESS_ERR, and nothing outside the MR was touched, nor what it had
// not placed yet.
TEST_F(SoftnicPlace, MrDeregisteredMidPlacementIsAnErrorCompletion) {
  Fill(0, 0);
  ibv_mr* target =
      ibv_reg_mr(pd_, buf_[1].data() + 4096, kMsg, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(target, nullptr);
  Chaos(1);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, kMsg, IBV_SEND_SIGNALED, 4096, 0, target->rkey), 0);
  std::vector<bool> first = Placed(1, 4096);
  EXPECT_TRUE(first[kChunks - 1]);
  ASSERT_EQ(ibv_dereg_mr(target), 0);
  std::vector<ibv_wc> wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Placed(1, 4096), first) << "nothing placed after the deregistration";
  for (size_t i = 0; i < buf_[1].size(); ++i) {
    if (i < 4096 || i >= 4096 + kMsg) {
      ASSERT_EQ(buf_[1][i], 0) << "byte " << i << " outside the MR";
    }
  }
  EXPECT_EQ(State(0), IBV_QPS_ERR);
}

}  // namespace
}  // namespace rdmasan::testing
