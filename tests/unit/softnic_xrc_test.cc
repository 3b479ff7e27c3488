// softnic XRC: domains (fd/oflags semantics, EBUSY), XRC SRQs and their
// numbers, initiator and target QPs, traffic landing in the SRQ a send
// names, ibv_open_qp, and the errors a NIC gives (an SRQ number of no SRQ
// or of another domain, verbs on the wrong QP type).  Calls go through
// the shim's verbs as an application's would.
#include <endian.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

// A temporary file for an inode-backed domain.
class TempFile {
 public:
  TempFile() {
    char path[] = "/tmp/softnic-xrc-XXXXXX";
    fd_ = mkstemp(path);
    path_ = path;
  }
  ~TempFile() {
    if (fd_ >= 0) close(fd_);
    unlink(path_.c_str());
  }
  int fd() const { return fd_; }
  const std::string& path() const { return path_; }

 private:
  int fd_ = -1;
  std::string path_;
};

ibv_xrcd* OpenXrcd(ibv_context* ctx, int fd, int oflags) {
  ibv_xrcd_init_attr a{};
  a.comp_mask = IBV_XRCD_INIT_ATTR_FD | IBV_XRCD_INIT_ATTR_OFLAGS;
  a.fd = fd;
  a.oflags = oflags;
  return ibv_open_xrcd(ctx, &a);
}

TEST(SoftnicXrc, DeviceAdvertisesXrc) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_XRC);
  ibv_device_attr_ex ax{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &ax), 0);
  EXPECT_TRUE(ax.xrc_odp_caps & IBV_ODP_SUPPORT_SRQ_RECV);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicXrc, OpenXrcdFollowsFdAndOflags) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  TempFile f;
  ASSERT_GE(f.fd(), 0);
  // No domain on the inode yet and no O_CREAT: EAGAIN, as the kernel.
  errno = 0;
  EXPECT_EQ(OpenXrcd(ctx, f.fd(), 0), nullptr);
  EXPECT_EQ(errno, EAGAIN);
  ibv_xrcd* a = OpenXrcd(ctx, f.fd(), O_CREAT);
  ASSERT_NE(a, nullptr);
  // It exists now: O_EXCL refuses (EINVAL), a plain open joins it.
  errno = 0;
  EXPECT_EQ(OpenXrcd(ctx, f.fd(), O_CREAT | O_EXCL), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Another descriptor of the same file is the same inode.
  int fd2 = open(f.path().c_str(), O_RDONLY);
  ASSERT_GE(fd2, 0);
  ibv_xrcd* b = OpenXrcd(ctx, fd2, 0);
  ASSERT_NE(b, nullptr);
  close(fd2);
  // A bad descriptor is EBADF; a missing FD/OFLAGS bit EINVAL; an unknown
  // bit EOPNOTSUPP.
  errno = 0;
  EXPECT_EQ(OpenXrcd(ctx, 987654, O_CREAT), nullptr);
  EXPECT_EQ(errno, EBADF);
  ibv_xrcd_init_attr bad{};
  bad.comp_mask = IBV_XRCD_INIT_ATTR_FD;
  bad.fd = -1;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
  bad.comp_mask = IBV_XRCD_INIT_ATTR_RESERVED;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx, &bad), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_close_xrcd(a), 0);
  EXPECT_EQ(ibv_close_xrcd(b), 0);
  // Closed by everyone: the inode has no domain any more.
  errno = 0;
  EXPECT_EQ(OpenXrcd(ctx, f.fd(), 0), nullptr);
  EXPECT_EQ(errno, EAGAIN);
  // Without a file: a private domain each time.
  ibv_xrcd* c = OpenXrcd(ctx, -1, O_CREAT);
  ASSERT_NE(c, nullptr);
  EXPECT_EQ(ibv_close_xrcd(c), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// Two sides in one process, each with its domain, XRC SRQ, target QP and
// initiator QP; side i's initiator is connected to side 1-i's target, as
// rdma-core's tests set them up.
class SoftnicXrcPair : public ::testing::Test {
 protected:
  static constexpr size_t kBuf = 4096;
  static constexpr uint32_t kSrqWr = 8;

  void SetUp() override {
    ctx_ = OpenSoftnic();
    ASSERT_NE(ctx_, nullptr);
    for (int i = 0; i < 2; ++i) {
      pd_[i] = ibv_alloc_pd(ctx_);
      ASSERT_NE(pd_[i], nullptr);
      cq_[i] = ibv_create_cq(ctx_, 32, nullptr, nullptr, 0);
      ASSERT_NE(cq_[i], nullptr);
      buf_[i].assign(kBuf, 0);
      mr_[i] = ibv_reg_mr(pd_[i], buf_[i].data(), kBuf,
                          IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                              IBV_ACCESS_REMOTE_ATOMIC);
      ASSERT_NE(mr_[i], nullptr);
      xrcd_[i] = OpenXrcd(ctx_, -1, O_CREAT);
      ASSERT_NE(xrcd_[i], nullptr);
      srq_[i] = CreateXrcSrq(pd_[i], xrcd_[i], cq_[i]);
      ASSERT_NE(srq_[i], nullptr);
      ASSERT_EQ(ibv_get_srq_num(srq_[i], &srqn_[i]), 0);
      ibv_qp_init_attr_ex t{};
      t.qp_type = IBV_QPT_XRC_RECV;
      t.comp_mask = IBV_QP_INIT_ATTR_XRCD;
      t.xrcd = xrcd_[i];
      tgt_[i] = ibv_create_qp_ex(ctx_, &t);
      ASSERT_NE(tgt_[i], nullptr);
      ibv_qp_init_attr_ex s{};
      s.qp_type = IBV_QPT_XRC_SEND;
      s.comp_mask = IBV_QP_INIT_ATTR_PD;
      s.pd = pd_[i];
      s.send_cq = cq_[i];
      s.cap.max_send_wr = 8;
      s.cap.max_send_sge = 1;
      s.cap.max_recv_wr = 4;  // ignored: an initiator has no receive queue
      ini_[i] = ibv_create_qp_ex(ctx_, &s);
      ASSERT_NE(ini_[i], nullptr);
      EXPECT_EQ(s.cap.max_recv_wr, 0u);
    }
    EXPECT_NE(srqn_[0], srqn_[1]);
    for (int i = 0; i < 2; ++i) {
      ASSERT_EQ(ToRts(tgt_[i], ini_[1 - i]->qp_num, IBV_QPT_XRC_RECV), 0);
      ASSERT_EQ(ToRts(ini_[i], tgt_[1 - i]->qp_num, IBV_QPT_XRC_SEND), 0);
    }
  }

  void TearDown() override {
    for (int i = 0; i < 2; ++i) {
      if (ini_[i]) {
        EXPECT_EQ(ibv_destroy_qp(ini_[i]), 0);
      }
      if (tgt_[i]) {
        EXPECT_EQ(ibv_destroy_qp(tgt_[i]), 0);
      }
      if (srq_[i]) {
        EXPECT_EQ(ibv_destroy_srq(srq_[i]), 0);
      }
      if (xrcd_[i]) {
        EXPECT_EQ(ibv_close_xrcd(xrcd_[i]), 0);
      }
      if (mr_[i]) {
        EXPECT_EQ(ibv_dereg_mr(mr_[i]), 0);
      }
      if (cq_[i]) {
        EXPECT_EQ(ibv_destroy_cq(cq_[i]), 0);
      }
      if (pd_[i]) {
        EXPECT_EQ(ibv_dealloc_pd(pd_[i]), 0);
      }
    }
    if (ctx_) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
  }

  static ibv_srq* CreateXrcSrq(ibv_pd* pd, ibv_xrcd* xrcd, ibv_cq* cq) {
    ibv_srq_init_attr_ex a{};
    a.attr.max_wr = kSrqWr;
    a.attr.max_sge = 1;
    a.comp_mask =
        IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
    a.srq_type = IBV_SRQT_XRC;
    a.pd = pd;
    a.xrcd = xrcd;
    a.cq = cq;
    return ibv_create_srq_ex(pd->context, &a);
  }

  // The masks rdma-core's tests use for XRC (the kernel's table).
  static int ToRts(ibv_qp* qp, uint32_t remote, ibv_qp_type type) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = type == IBV_QPT_XRC_RECV ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                                       IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC
                                                 : 0;
    if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return rc;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = remote;
    a.ah_attr.dlid = 1;
    a.ah_attr.port_num = 1;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 1;
    int mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (type == IBV_QPT_XRC_RECV) mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    if (int rc = ibv_modify_qp(qp, &a, mask)) return rc;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 0;
    a.max_rd_atomic = 1;
    mask = IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
    if (type == IBV_QPT_XRC_SEND) mask |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    return ibv_modify_qp(qp, &a, mask);
  }

  int PostSrqRecv(int side, uint64_t wr_id, uint32_t len = 64) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[side].data() + 1024), len, mr_[side]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq_[side], &wr, &bad);
  }

  // A SEND from side's initiator naming `srqn` at the other side.
  int Send(int side, uint64_t wr_id, uint32_t srqn, const char* text) {
    std::memcpy(buf_[side].data(), text, std::strlen(text) + 1);
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[side].data()), static_cast<uint32_t>(std::strlen(text) + 1),
                mr_[side]->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.qp_type.xrc.remote_srqn = srqn;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(ini_[side], &wr, &bad);
  }

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

  ibv_qp_state State(ibv_qp* qp) {
    ibv_qp_attr a{};
    ibv_qp_init_attr init{};
    EXPECT_EQ(ibv_query_qp(qp, &a, IBV_QP_STATE, &init), 0);
    return a.qp_state;
  }

  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_[2] = {};
  ibv_cq* cq_[2] = {};
  ibv_mr* mr_[2] = {};
  ibv_xrcd* xrcd_[2] = {};
  ibv_srq* srq_[2] = {};
  uint32_t srqn_[2] = {};
  ibv_qp* tgt_[2] = {};
  ibv_qp* ini_[2] = {};
  std::vector<char> buf_[2];
};

TEST_F(SoftnicXrcPair, SendLandsInTheNamedSrq) {
  for (int round = 0; round < 3; ++round) {
    ASSERT_EQ(PostSrqRecv(1, 100 + round), 0);
    ASSERT_EQ(Send(0, 200 + round, srqn_[1], "xrc hello"), 0);
    auto s = Poll(0, 1);
    ASSERT_EQ(s.size(), 1u);
    EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(s[0].wr_id, 200u + round);
    EXPECT_EQ(s[0].qp_num, ini_[0]->qp_num);
    // The receive completes on the SRQ's CQ, named by the target QP.
    auto r = Poll(1, 1);
    ASSERT_EQ(r.size(), 1u);
    EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
    EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
    EXPECT_EQ(r[0].wr_id, 100u + round);
    EXPECT_EQ(r[0].qp_num, tgt_[1]->qp_num);
    EXPECT_EQ(r[0].byte_len, 10u);
    EXPECT_STREQ(buf_[1].data() + 1024, "xrc hello");
  }
  // Slots come back as completions are polled: the SRQ takes kSrqWr again.
  for (uint32_t i = 0; i < kSrqWr; ++i) ASSERT_EQ(PostSrqRecv(1, i), 0);
  EXPECT_EQ(PostSrqRecv(1, 99), ENOMEM);
}

TEST_F(SoftnicXrcPair, RdmaAndAtomicsUseTheSrqsPd) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 8, mr_[0]->lkey};
  uint64_t v = 5;
  std::memcpy(buf_[1].data() + 64, &v, 8);
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(buf_[1].data() + 64);
  wr.wr.atomic.rkey = mr_[1]->rkey;
  wr.wr.atomic.compare_add = 3;
  wr.qp_type.xrc.remote_srqn = srqn_[1];
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(ini_[0], &wr, &bad), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t old = 0, now = 0;
  std::memcpy(&old, buf_[0].data(), 8);
  std::memcpy(&now, buf_[1].data() + 64, 8);
  EXPECT_EQ(old, 5u);
  EXPECT_EQ(now, 8u);
  // An RDMA WRITE with side 0's own rkey: of another PD than the SRQ's.
  wr = {};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(buf_[0].data() + 128);
  wr.wr.rdma.rkey = mr_[0]->rkey;
  wr.qp_type.xrc.remote_srqn = srqn_[1];
  ASSERT_EQ(ibv_post_send(ini_[0], &wr, &bad), 0);
  s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SoftnicXrcPair, WrongSrqNumberIsRemoteInvalidRequest) {
  ASSERT_EQ(PostSrqRecv(1, 1), 0);
  // srqn_[0] is an XRC SRQ, but of side 0's domain, not of the target's.
  ASSERT_EQ(Send(0, 7, srqn_[0], "x"), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(s[0].wr_id, 7u);
  EXPECT_EQ(State(ini_[0]), IBV_QPS_ERR);
  EXPECT_EQ(State(tgt_[1]), IBV_QPS_ERR);
  // The receive was not taken.
  EXPECT_EQ(Poll(1, 1, 50).size(), 0u);
}

TEST_F(SoftnicXrcPair, UnknownSrqNumberIsRemoteInvalidRequest) {
  ASSERT_EQ(Send(1, 8, srqn_[0] ^ 0x3ff000u, "x"), 0);
  auto s = Poll(1, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_INV_REQ_ERR);
}

TEST_F(SoftnicXrcPair, QpExSetsTheSrqNumber) {
  ibv_qp_init_attr_ex s{};
  s.qp_type = IBV_QPT_XRC_SEND;
  s.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  s.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
  s.pd = pd_[0];
  s.send_cq = s.recv_cq = cq_[0];
  s.cap.max_send_wr = 4;
  s.cap.max_send_sge = 1;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &s);
  ASSERT_NE(qp, nullptr);
  // Re-point side 1's target at the new initiator.
  ASSERT_EQ(ibv_destroy_qp(tgt_[1]), 0);
  ibv_qp_init_attr_ex t{};
  t.qp_type = IBV_QPT_XRC_RECV;
  t.comp_mask = IBV_QP_INIT_ATTR_XRCD;
  t.xrcd = xrcd_[1];
  tgt_[1] = ibv_create_qp_ex(ctx_, &t);
  ASSERT_NE(tgt_[1], nullptr);
  ASSERT_EQ(ToRts(tgt_[1], qp->qp_num, IBV_QPT_XRC_RECV), 0);
  ASSERT_EQ(ToRts(qp, tgt_[1]->qp_num, IBV_QPT_XRC_SEND), 0);
  ASSERT_EQ(PostSrqRecv(1, 11), 0);
  std::memcpy(buf_[0].data(), "qpex", 5);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  ibv_wr_start(x);
  x->wr_id = 12;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_imm(x, htobe32(0x1234));
  ibv_wr_set_sge(x, mr_[0]->lkey, reinterpret_cast<uint64_t>(buf_[0].data()), 5);
  ibv_wr_set_xrc_srqn(x, srqn_[1]);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 11u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(r[0].imm_data), 0x1234u);
  EXPECT_STREQ(buf_[1].data() + 1024, "qpex");
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(SoftnicXrcPair, WrongQpTypeForTheVerb) {
  // An initiator has no receive queue, a target no send queue.
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 8, mr_[0]->lkey};
  ibv_recv_wr rwr{};
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(ini_[0], &rwr, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rwr);
  EXPECT_EQ(ibv_post_recv(tgt_[0], &rwr, &rbad), EINVAL);
  ibv_send_wr swr{};
  swr.opcode = IBV_WR_SEND;
  swr.sg_list = &sge;
  swr.num_sge = 1;
  ibv_send_wr* sbad = nullptr;
  EXPECT_EQ(ibv_post_send(tgt_[0], &swr, &sbad), EINVAL);
  EXPECT_EQ(sbad, &swr);
  // A target needs its domain; ibv_create_qp cannot give one.
  ibv_qp_init_attr_ex t{};
  t.qp_type = IBV_QPT_XRC_RECV;
  t.comp_mask = IBV_QP_INIT_ATTR_PD;
  t.pd = pd_[0];
  t.send_cq = t.recv_cq = cq_[0];
  errno = 0;
  EXPECT_EQ(ibv_create_qp_ex(ctx_, &t), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // An XRC SRQ needs its domain and CQ.
  ibv_srq_init_attr_ex a{};
  a.attr.max_wr = 1;
  a.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD;
  a.srq_type = IBV_SRQT_XRC;
  a.pd = pd_[0];
  a.xrcd = xrcd_[0];
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  a.comp_mask |= IBV_SRQ_INIT_ATTR_CQ;
  a.cq = cq_[0];
  a.srq_type = IBV_SRQT_TM;  // without IBV_SRQ_INIT_ATTR_TM and its tm_cap
  errno = 0;
  EXPECT_EQ(ibv_create_srq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Opening a QP: only a target of the same domain.
  ibv_qp_open_attr o{};
  o.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  o.qp_num = tgt_[1]->qp_num;
  o.xrcd = xrcd_[0];
  o.qp_type = IBV_QPT_XRC_RECV;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(ctx_, &o), nullptr);
  EXPECT_EQ(errno, EINVAL);
  o.qp_num = ini_[0]->qp_num;
  errno = 0;
  EXPECT_EQ(ibv_open_qp(ctx_, &o), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(SoftnicXrcPair, CloseXrcdInUseIsBusy) {
  EXPECT_EQ(ibv_close_xrcd(xrcd_[0]), EBUSY);
  ibv_qp_open_attr o{};
  o.comp_mask = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  o.qp_num = tgt_[0]->qp_num;
  o.xrcd = xrcd_[0];
  o.qp_type = IBV_QPT_XRC_RECV;
  ibv_qp* opened = ibv_open_qp(ctx_, &o);
  ASSERT_NE(opened, nullptr);
  EXPECT_EQ(opened->qp_num, tgt_[0]->qp_num);
  EXPECT_EQ(State(opened), IBV_QPS_RTS);
  // Closing the opened handle leaves the QP to its creator.
  EXPECT_EQ(ibv_destroy_qp(opened), 0);
  EXPECT_EQ(State(tgt_[0]), IBV_QPS_RTS);
  ASSERT_EQ(ibv_destroy_qp(ini_[0]), 0);
  ini_[0] = nullptr;
  ASSERT_EQ(ibv_destroy_qp(tgt_[0]), 0);
  tgt_[0] = nullptr;
  EXPECT_EQ(ibv_close_xrcd(xrcd_[0]), EBUSY);  // the SRQ still uses it
  ASSERT_EQ(ibv_destroy_srq(srq_[0]), 0);
  srq_[0] = nullptr;
  EXPECT_EQ(ibv_close_xrcd(xrcd_[0]), 0);
  xrcd_[0] = nullptr;
}

}  // namespace
}  // namespace rdmasan::testing
