// Test fixture: a softnic context with two QPs of one type connected to each
// other in this process, buffers and MRs.  Calls go through the shim's
// exported verbs exactly as an application's would.
#ifndef RDMASAN_TESTS_UNIT_SOFTNIC_FIXTURE_H_
#define RDMASAN_TESTS_UNIT_SOFTNIC_FIXTURE_H_

#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

namespace rdmasan::testing {

inline ibv_context* OpenSoftnic() {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list) return nullptr;
  ibv_context* ctx = nullptr;
  for (int i = 0; i < n; ++i)
    if (std::strcmp(ibv_get_device_name(list[i]), "softnic0") == 0) ctx = ibv_open_device(list[i]);
  ibv_free_device_list(list);
  return ctx;
}

struct QpOptions {
  ibv_qp_type type = IBV_QPT_RC;
  uint32_t max_send_wr = 16;
  uint32_t max_recv_wr = 16;
  uint32_t max_sge = 4;
  uint32_t max_inline = 64;
  int cqe = 64;
  uint8_t rnr_retry = 7;
  uint8_t min_rnr_timer = 1;  // 10 us
  int sq_sig_all = 0;
  int access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
};

class SoftnicPair : public ::testing::Test {
 protected:
  static constexpr size_t kBuf = 1 << 16;
  static constexpr uint32_t kQkey = 0x11111111;

  void SetUp() override { SetUpWith(QpOptions{}); }

  void SetUpWith(const QpOptions& o) {
    opts_ = o;
    ctx_ = OpenSoftnic();
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    channel_ = ibv_create_comp_channel(ctx_);
    ASSERT_NE(channel_, nullptr);
    for (int i = 0; i < 2; ++i) {
      cq_[i] = ibv_create_cq(ctx_, o.cqe, this, channel_, 0);
      ASSERT_NE(cq_[i], nullptr);
      buf_[i].assign(kBuf, 0);
      mr_[i] = ibv_reg_mr(pd_, buf_[i].data(), kBuf, o.access);
      ASSERT_NE(mr_[i], nullptr) << strerror(errno);
      ibv_qp_init_attr a{};
      a.send_cq = a.recv_cq = cq_[i];
      a.qp_type = o.type;
      a.sq_sig_all = o.sq_sig_all;
      a.cap.max_send_wr = o.max_send_wr;
      a.cap.max_recv_wr = o.max_recv_wr;
      a.cap.max_send_sge = a.cap.max_recv_sge = o.max_sge;
      a.cap.max_inline_data = o.max_inline;
      qp_[i] = ibv_create_qp(pd_, &a);
      ASSERT_NE(qp_[i], nullptr);
    }
    for (int i = 0; i < 2; ++i) ASSERT_EQ(Connect(qp_[i], qp_[1 - i]->qp_num), 0);
  }

  int Connect(ibv_qp* qp, uint32_t remote_qpn) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    int mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
    if (opts_.type == IBV_QPT_UD) {
      a.qkey = kQkey;
      mask |= IBV_QP_QKEY;
    } else {
      a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
      mask |= IBV_QP_ACCESS_FLAGS;
    }
    if (int rc = ibv_modify_qp(qp, &a, mask)) return rc;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    mask = IBV_QP_STATE;
    if (opts_.type != IBV_QPT_UD) {
      a.path_mtu = IBV_MTU_1024;
      a.dest_qp_num = remote_qpn;
      a.rq_psn = 0;
      a.ah_attr.dlid = 1;
      a.ah_attr.port_num = 1;
      mask |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      if (opts_.type == IBV_QPT_RC) {
        a.max_dest_rd_atomic = 1;
        a.min_rnr_timer = opts_.min_rnr_timer;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
      }
    }
    if (int rc = ibv_modify_qp(qp, &a, mask)) return rc;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = 0;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (opts_.type == IBV_QPT_RC) {
      a.timeout = 14;
      a.retry_cnt = 7;
      a.rnr_retry = opts_.rnr_retry;
      a.max_rd_atomic = 1;
      mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    return ibv_modify_qp(qp, &a, mask);
  }

  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (qp_[i]) {
        EXPECT_EQ(ibv_destroy_qp(qp_[i]), 0);
      }
      if (mr_[i]) {
        EXPECT_EQ(ibv_dereg_mr(mr_[i]), 0);
      }
      if (cq_[i]) {
        EXPECT_EQ(ibv_destroy_cq(cq_[i]), 0);
      }
    }
    if (channel_) {
      EXPECT_EQ(ibv_destroy_comp_channel(channel_), 0);
    }
    if (pd_) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
  }

  int PostRecv(int side, uint64_t wr_id, uint64_t offset, uint32_t len, uint32_t lkey = 0) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[side].data() + offset), len, lkey ? lkey : mr_[side]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(qp_[side], &wr, &bad);
  }

  // Posts one WR from `side` with one SGE over its buffer.
  int Post(int side, ibv_wr_opcode op, uint64_t wr_id, uint64_t offset, uint32_t len,
           int flags = IBV_SEND_SIGNALED, uint64_t remote_offset = 0, uint32_t lkey = 0, uint32_t rkey = 0,
           ibv_send_wr** bad_out = nullptr) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[side].data() + offset), len, lkey ? lkey : mr_[side]->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = flags;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.imm_data = htobe32(0xabcd0000u | static_cast<uint32_t>(wr_id));
    const uint64_t raddr = reinterpret_cast<uint64_t>(buf_[1 - side].data() + remote_offset);
    if (op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      wr.wr.atomic.remote_addr = raddr;
      wr.wr.atomic.rkey = rkey ? rkey : mr_[1 - side]->rkey;
    } else {
      wr.wr.rdma.remote_addr = raddr;
      wr.wr.rdma.rkey = rkey ? rkey : mr_[1 - side]->rkey;
    }
    ibv_send_wr* bad = nullptr;
    int rc = ibv_post_send(qp_[side], &wr, &bad);
    if (bad_out) *bad_out = bad;
    return rc;
  }

  // Polls `side`'s CQ until `n` completions or the deadline.
  std::vector<ibv_wc> Poll(int side, int n, int timeout_ms = 2000) {
    std::vector<ibv_wc> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (static_cast<int>(out.size()) < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[8];
      int got = ibv_poll_cq(cq_[side], 8, wc);
      EXPECT_GE(got, 0);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::yield();
    }
    return out;
  }

  ibv_qp_state State(int side) {
    ibv_qp_attr a;
    ibv_qp_init_attr init;
    EXPECT_EQ(ibv_query_qp(qp_[side], &a, IBV_QP_STATE, &init), 0);
    return a.qp_state;
  }

  QpOptions opts_;
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_comp_channel* channel_ = nullptr;
  ibv_cq* cq_[2] = {};
  ibv_qp* qp_[2] = {};
  ibv_mr* mr_[2] = {};
  std::vector<uint8_t> buf_[2];
};

}  // namespace rdmasan::testing

#endif  // RDMASAN_TESTS_UNIT_SOFTNIC_FIXTURE_H_
