// softnic on its RoCE port: raw packet QPs (creation, capabilities, the
// state machine, CAP_NET_RAW), flow steering (specs, priority, a frame
// nothing matches), and RSS (WQs, indirection tables, the Toeplitz hash
// spreading frames over WQs), through the shim's verbs as an application
// calls them; and the InfiniBand port's refusal of them.  Each test sets
// softnic_port for itself and puts it back.
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "core/options.h"
#include "softnic/internal.h"
#include "tests/unit/port_option.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

constexpr uint8_t kMacA[6] = {0x01, 0x50, 0x56, 0x19, 0x20, 0xa7};
constexpr uint8_t kMacB[6] = {0x02, 0x11, 0x22, 0x33, 0x44, 0x55};
constexpr uint8_t kSrcMac[6] = {0x24, 0x8a, 0x07, 0xa5, 0x28, 0xc8};

// An Ethernet | IPv4 | UDP frame of `len` bytes.
std::vector<uint8_t> Frame(const uint8_t* dst_mac, uint32_t src_ip, uint32_t dst_ip, uint16_t sport = 1234,
                           uint16_t dport = 5678, uint32_t len = 128) {
  std::vector<uint8_t> f(len, 'a');
  memcpy(f.data(), dst_mac, 6);
  memcpy(f.data() + 6, kSrcMac, 6);
  f[12] = 0x08;
  f[13] = 0x00;
  uint8_t* ip = f.data() + 14;
  memset(ip, 0, 20);
  ip[0] = 0x45;
  ip[2] = static_cast<uint8_t>((len - 14) >> 8);
  ip[3] = static_cast<uint8_t>(len - 14);
  ip[8] = 64;
  ip[9] = 17;
  const uint32_t s = htobe32(src_ip), d = htobe32(dst_ip);
  memcpy(ip + 12, &s, 4);
  memcpy(ip + 16, &d, 4);
  uint8_t* udp = ip + 20;
  const uint16_t sp = htobe16(sport), dp = htobe16(dport);
  memcpy(udp, &sp, 2);
  memcpy(udp + 2, &dp, 2);
  return f;
}

struct EthFlow {
  ibv_flow_attr attr;
  ibv_flow_spec_eth eth;
  ibv_flow_spec_ipv4 ipv4;
};

EthFlow MakeFlow(const uint8_t* dst_mac, uint16_t priority, uint32_t dst_ip = 0) {
  EthFlow f{};
  f.attr.type = IBV_FLOW_ATTR_NORMAL;
  f.attr.size = sizeof(f.attr) + sizeof(f.eth);
  f.attr.priority = priority;
  f.attr.num_of_specs = 1;
  f.attr.port = 1;
  f.eth.type = IBV_FLOW_SPEC_ETH;
  f.eth.size = sizeof(f.eth);
  memcpy(f.eth.val.dst_mac, dst_mac, 6);
  memset(f.eth.mask.dst_mac, 0xff, 6);
  if (dst_ip) {
    f.attr.size += sizeof(f.ipv4);
    f.attr.num_of_specs = 2;
    f.ipv4.type = IBV_FLOW_SPEC_IPV4;
    f.ipv4.size = sizeof(f.ipv4);
    f.ipv4.val.dst_ip = htobe32(dst_ip);
    f.ipv4.mask.dst_ip = 0xffffffff;
  }
  return f;
}

class SoftnicRaw : public ::testing::Test {
 protected:
  static constexpr size_t kBuf = 1 << 16;

  void SetUp() override {
    ctx_ = OpenSoftnic();
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
    buf_.assign(kBuf, 0);
    mr_ = ibv_reg_mr(pd_, buf_.data(), kBuf, IBV_ACCESS_LOCAL_WRITE);
    ASSERT_NE(mr_, nullptr);
  }

  void TearDown() override {
    for (ibv_flow* f : flows_) {
      EXPECT_EQ(ibv_destroy_flow(f), 0);
    }
    for (ibv_qp* q : qps_) {
      EXPECT_EQ(ibv_destroy_qp(q), 0);
    }
    if (table_) {
      EXPECT_EQ(ibv_destroy_rwq_ind_table(table_), 0);
    }
    for (ibv_wq* w : wqs_) {
      EXPECT_EQ(ibv_destroy_wq(w), 0);
    }
    for (ibv_cq* c : cqs_) {
      EXPECT_EQ(ibv_destroy_cq(c), 0);
    }
    if (mr_) {
      EXPECT_EQ(ibv_dereg_mr(mr_), 0);
    }
    if (pd_) {
      EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    }
    if (ctx_) {
      EXPECT_EQ(ibv_close_device(ctx_), 0);
    }
  }

  ibv_cq* NewCq() {
    ibv_cq* c = ibv_create_cq(ctx_, 256, nullptr, nullptr, 0);
    if (c) cqs_.push_back(c);
    return c;
  }

  ibv_qp* NewRawQp(ibv_cq* cq) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.cap.max_send_wr = a.cap.max_recv_wr = 64;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* q = ibv_create_qp(pd_, &a);
    if (q) qps_.push_back(q);
    return q;
  }

  static int ToRts(ibv_qp* q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    if (int rc = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PORT)) return rc;
    a.qp_state = IBV_QPS_RTR;
    if (int rc = ibv_modify_qp(q, &a, IBV_QP_STATE)) return rc;
    a.qp_state = IBV_QPS_RTS;
    return ibv_modify_qp(q, &a, IBV_QP_STATE);
  }

  ibv_flow* AddFlow(ibv_qp* q, EthFlow f) {
    ibv_flow* fl = ibv_create_flow(q, &f.attr);
    if (fl) flows_.push_back(fl);
    return fl;
  }

  // Receive buffer `i` (2 KiB each, from 32 KiB on).
  uint8_t* RecvBuf(int i) { return buf_.data() + 32768 + 2048 * i; }

  int PostRecv(ibv_qp* q, int i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(RecvBuf(i)), 2048, mr_->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = static_cast<uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_recv(q, &wr, &bad);
  }

  int SendFrame(ibv_qp* q, const std::vector<uint8_t>& f, uint64_t wr_id = 7) {
    memcpy(buf_.data(), f.data(), f.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_.data()), static_cast<uint32_t>(f.size()), mr_->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(q, &wr, &bad);
  }

  static std::vector<ibv_wc> Poll(ibv_cq* cq, int n, int timeout_ms = 200) {
    std::vector<ibv_wc> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (static_cast<int>(out.size()) < n && std::chrono::steady_clock::now() < deadline) {
      ibv_wc wc[8];
      int got = ibv_poll_cq(cq, 8, wc);
      EXPECT_GE(got, 0);
      for (int i = 0; i < got; ++i) out.push_back(wc[i]);
      if (got == 0) std::this_thread::yield();
    }
    return out;
  }

  PortOption roce_{"roce"};
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
  ibv_mr* mr_ = nullptr;
  std::vector<uint8_t> buf_;
  std::vector<ibv_cq*> cqs_;
  std::vector<ibv_qp*> qps_;
  std::vector<ibv_flow*> flows_;
  std::vector<ibv_wq*> wqs_;
  ibv_rwq_ind_table* table_ = nullptr;
};

TEST_F(SoftnicRaw, DeviceReportsRawAndRssCaps) {
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_GT(a.max_raw_ethy_qp, 0);
  ibv_device_attr_ex x{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &x), 0);
  EXPECT_EQ(x.orig_attr.max_raw_ethy_qp, a.max_raw_ethy_qp);
  EXPECT_NE(x.rss_caps.supported_qpts & (1u << IBV_QPT_RAW_PACKET), 0u);
  EXPECT_GE(x.rss_caps.max_rwq_indirection_table_size, 8u);
  EXPECT_NE(x.rss_caps.rx_hash_fields_mask & IBV_RX_HASH_SRC_IPV4, 0u);
  EXPECT_EQ(x.rss_caps.rx_hash_function, IBV_RX_HASH_FUNC_TOEPLITZ);
  EXPECT_GT(x.max_wq_type_rq, 0u);
}

TEST_F(SoftnicRaw, StateMachineTakesOnlyThePort) {
  ibv_cq* cq = NewCq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* q = NewRawQp(cq);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->qp_type, IBV_QPT_RAW_PACKET);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PORT | IBV_QP_PKEY_INDEX), EINVAL);
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), EINVAL);  // the port is required
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PORT), 0);
  a.qp_state = IBV_QPS_RTR;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PATH_MTU), EINVAL);
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
  a.qp_state = IBV_QPS_RTS;
  EXPECT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN), EINVAL);
  ASSERT_EQ(ibv_modify_qp(q, &a, IBV_QP_STATE), 0);
  ibv_qp_attr got{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(q, &got, IBV_QP_STATE | IBV_QP_CAP, &init), 0);
  EXPECT_EQ(got.qp_state, IBV_QPS_RTS);
  EXPECT_EQ(init.qp_type, IBV_QPT_RAW_PACKET);
  EXPECT_GE(init.cap.max_send_wr, 64u);
  // A raw QP sends frames only.
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_.data()), 64, mr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(q, &wr, &bad), EINVAL);
}

TEST_F(SoftnicRaw, CreateQpExMakesARawQp) {
  ibv_cq* cq = NewCq();
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr_ex a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RAW_PACKET;
  a.cap.max_send_wr = a.cap.max_recv_wr = 4;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  a.comp_mask = IBV_QP_INIT_ATTR_PD;
  a.pd = pd_;
  ibv_qp* q = ibv_create_qp_ex(ctx_, &a);
  ASSERT_NE(q, nullptr);
  qps_.push_back(q);
  EXPECT_EQ(ToRts(q), 0);
}

TEST_F(SoftnicRaw, WithoutCapNetRawIsEperm) {
  ibv_cq* cq = NewCq();
  ASSERT_NE(cq, nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    __user_cap_header_struct hdr{_LINUX_CAPABILITY_VERSION_3, 0};
    __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
    if (syscall(SYS_capget, &hdr, data) != 0) _exit(10);
    data[CAP_NET_RAW / 32].effective &= ~(1u << (CAP_NET_RAW % 32));
    if (syscall(SYS_capset, &hdr, data) != 0) _exit(11);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.cap.max_send_wr = a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    errno = 0;
    ibv_qp* q = ibv_create_qp(pd_, &a);
    _exit(q ? 12 : errno == EPERM ? 0 : 13);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(SoftnicRaw, BadFlowsAreRefused) {
  ibv_cq* cq = NewCq();
  ASSERT_NE(cq, nullptr);
  ibv_qp* q = NewRawQp(cq);
  ASSERT_NE(q, nullptr);
  // An unknown spec type (a tunnel): EOPNOTSUPP.
  struct {
    ibv_flow_attr attr;
    ibv_flow_spec_tunnel tun;
  } t{};
  t.attr.num_of_specs = 1;
  t.attr.port = 1;
  t.attr.size = sizeof(t);
  t.tun.type = IBV_FLOW_SPEC_VXLAN_TUNNEL;
  t.tun.size = sizeof(t.tun);
  errno = 0;
  EXPECT_EQ(ibv_create_flow(q, &t.attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // A spec whose size is not its type's: EINVAL.
  EthFlow f = MakeFlow(kMacA, 0);
  f.eth.size = sizeof(f.eth) - 4;
  errno = 0;
  EXPECT_EQ(ibv_create_flow(q, &f.attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // Another port: EINVAL; a flag: EOPNOTSUPP.
  f = MakeFlow(kMacA, 0);
  f.attr.port = 2;
  errno = 0;
  EXPECT_EQ(ibv_create_flow(q, &f.attr), nullptr);
  EXPECT_EQ(errno, EINVAL);
  f = MakeFlow(kMacA, 0);
  f.attr.flags = IBV_FLOW_ATTR_FLAGS_EGRESS;
  errno = 0;
  EXPECT_EQ(ibv_create_flow(q, &f.attr), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
}

TEST_F(SoftnicRaw, HighestPriorityRuleWinsAndUnmatchedFramesAreDropped) {
  ibv_cq* scq = NewCq();
  ibv_cq* cq1 = NewCq();
  ibv_cq* cq2 = NewCq();
  ASSERT_TRUE(scq && cq1 && cq2);
  ibv_qp* s = NewRawQp(scq);
  ibv_qp* r1 = NewRawQp(cq1);
  ibv_qp* r2 = NewRawQp(cq2);
  ASSERT_TRUE(s && r1 && r2);
  for (ibv_qp* q : {s, r1, r2}) ASSERT_EQ(ToRts(q), 0);
  // r1: every frame to kMacA, priority 1; r2: those also to 2.2.2.2, priority 0.
  ASSERT_NE(AddFlow(r1, MakeFlow(kMacA, 1)), nullptr);
  ASSERT_NE(AddFlow(r2, MakeFlow(kMacA, 0, 0x02020202)), nullptr);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(PostRecv(r1, i), 0);
    ASSERT_EQ(PostRecv(r2, 4 + i), 0);
  }
  const auto f1 = Frame(kMacA, 0x01010101, 0x02020202, 1234, 5678, 200);
  ASSERT_EQ(SendFrame(s, f1), 0);
  auto sc = Poll(scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(sc[0].opcode, IBV_WC_SEND);
  auto c2 = Poll(cq2, 1);
  ASSERT_EQ(c2.size(), 1u);
  EXPECT_EQ(c2[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(c2[0].byte_len, 200u);
  EXPECT_EQ(c2[0].wc_flags & IBV_WC_GRH, 0u);
  EXPECT_EQ(c2[0].qp_num, r2->qp_num);
  EXPECT_EQ(memcmp(RecvBuf(4), f1.data(), f1.size()), 0);
  EXPECT_TRUE(Poll(cq1, 1, 20).empty());  // the lower priority rule lost
  // Another IPv4 destination: only r1's rule matches.
  const auto f2 = Frame(kMacA, 0x01010101, 0x03030303);
  ASSERT_EQ(SendFrame(s, f2), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  auto c1 = Poll(cq1, 1);
  ASSERT_EQ(c1.size(), 1u);
  EXPECT_EQ(c1[0].byte_len, f2.size());
  EXPECT_EQ(memcmp(RecvBuf(0), f2.data(), f2.size()), 0);
  EXPECT_TRUE(Poll(cq2, 1, 20).empty());
  // Nothing matches: dropped, and the send completes successfully.
  ASSERT_EQ(SendFrame(s, Frame(kMacB, 0x01010101, 0x02020202)), 0);
  sc = Poll(scq, 1);
  ASSERT_EQ(sc.size(), 1u);
  EXPECT_EQ(sc[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(Poll(cq1, 1, 20).empty());
  EXPECT_TRUE(Poll(cq2, 1, 20).empty());
  // Without its rule, r2 gets nothing more; r1 takes what it matched.
  ASSERT_EQ(ibv_destroy_flow(flows_[1]), 0);
  flows_.pop_back();
  ASSERT_EQ(SendFrame(s, f1), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  EXPECT_EQ(Poll(cq1, 1).size(), 1u);
  EXPECT_TRUE(Poll(cq2, 1, 20).empty());
}

TEST_F(SoftnicRaw, SnifferSeesEveryFrame) {
  ibv_cq* scq = NewCq();
  ibv_cq* cq = NewCq();
  ASSERT_TRUE(scq && cq);
  ibv_qp* s = NewRawQp(scq);
  ibv_qp* r = NewRawQp(cq);
  ASSERT_TRUE(s && r);
  ASSERT_EQ(ToRts(s), 0);
  ASSERT_EQ(ToRts(r), 0);
  ibv_flow_attr a{};
  a.type = IBV_FLOW_ATTR_SNIFFER;
  a.size = sizeof(a);
  a.port = 1;
  ibv_flow* fl = ibv_create_flow(r, &a);
  ASSERT_NE(fl, nullptr);
  flows_.push_back(fl);
  ASSERT_EQ(PostRecv(r, 0), 0);
  ASSERT_EQ(SendFrame(s, Frame(kMacB, 1, 2)), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  EXPECT_EQ(Poll(cq, 1).size(), 1u);
}

TEST(SoftnicToeplitz, MatchesTheRssVerificationSuite) {
  // The RSS specification's verification key and its IPv4 examples.
  const uint8_t key[40] = {0x6d, 0x5a, 0x56, 0xda, 0x25, 0x5b, 0x0e, 0xc2, 0x41, 0x67, 0x25, 0x3d, 0x43, 0xa3,
                           0x8f, 0xb0, 0xd0, 0xca, 0x2b, 0xcb, 0xae, 0x7b, 0x30, 0xb4, 0x77, 0xcb, 0x2d, 0xa3,
                           0x80, 0x30, 0xf2, 0x0c, 0x6a, 0x42, 0xb7, 0x3b, 0xbe, 0xac, 0x01, 0xfa};
  // 66.9.149.187:2794 -> 161.142.100.80:1766
  const uint8_t in[12] = {66, 9, 149, 187, 161, 142, 100, 80, 0x0a, 0xea, 0x06, 0xe6};
  EXPECT_EQ(softnic::Toeplitz(key, 40, in, 8), 0x323e8fc2u);
  EXPECT_EQ(softnic::Toeplitz(key, 40, in, 12), 0x51ccc178u);
}

TEST_F(SoftnicRaw, RssSpreadsFramesOverTheTablesWqs) {
  ibv_cq* scq = NewCq();
  ibv_cq* wcq[2] = {NewCq(), NewCq()};
  ASSERT_TRUE(scq && wcq[0] && wcq[1]);
  ibv_qp* s = NewRawQp(scq);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(ToRts(s), 0);
  for (int i = 0; i < 8; ++i) {
    ibv_wq_init_attr wa{};
    wa.wq_type = IBV_WQT_RQ;
    wa.max_wr = 64;
    wa.max_sge = 1;
    wa.pd = pd_;
    wa.cq = wcq[i % 2];
    ibv_wq* wq = ibv_create_wq(ctx_, &wa);
    ASSERT_NE(wq, nullptr);
    wqs_.push_back(wq);
    ibv_wq_attr m{};
    m.attr_mask = IBV_WQ_ATTR_STATE;
    m.wq_state = IBV_WQS_RDY;
    ASSERT_EQ(ibv_modify_wq(wq, &m), 0);
    EXPECT_EQ(wq->state, IBV_WQS_RDY);
    for (int k = 0; k < 32; ++k) {  // as many as frames sent
      ibv_sge sge{reinterpret_cast<uint64_t>(RecvBuf(i)), 2048, mr_->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = static_cast<uint64_t>(i);
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad = nullptr;
      ASSERT_EQ(ibv_post_wq_recv(wq, &wr, &bad), 0);
    }
  }
  ibv_rwq_ind_table_init_attr ta{};
  ta.log_ind_tbl_size = 3;
  ta.ind_tbl = wqs_.data();
  table_ = ibv_create_rwq_ind_table(ctx_, &ta);
  ASSERT_NE(table_, nullptr);
  uint8_t key[40];
  for (int i = 0; i < 40; ++i) key[i] = static_cast<uint8_t>(i * 37 + 11);
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  qa.pd = pd_;
  qa.rwq_ind_tbl = table_;
  qa.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  qa.rx_hash_conf.rx_hash_key_len = sizeof(key);
  qa.rx_hash_conf.rx_hash_key = key;
  qa.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4;
  ibv_qp* rss = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(rss, nullptr);
  qps_.push_back(rss);
  // In use: the table and its WQs stay.
  EXPECT_EQ(ibv_destroy_rwq_ind_table(table_), EBUSY);
  EXPECT_EQ(ibv_destroy_wq(wqs_[0]), EBUSY);
  ASSERT_NE(AddFlow(rss, MakeFlow(kMacA, 0)), nullptr);
  std::set<uint32_t> wq_nums;
  for (ibv_wq* w : wqs_) wq_nums.insert(w->wq_num);
  std::set<uint32_t> hit;
  std::vector<uint32_t> first_wq;
  for (int round = 0; round < 2; ++round) {
    for (uint32_t i = 0; i < 16; ++i) {
      ASSERT_EQ(SendFrame(s, Frame(kMacA, 0x0a000001 + i * 0x01010101, 0x02020202)), 0);
      ASSERT_EQ(Poll(scq, 1).size(), 1u);
      std::vector<ibv_wc> got;
      for (ibv_cq* c : wcq) {
        auto v = Poll(c, 1, 5);
        got.insert(got.end(), v.begin(), v.end());
      }
      ASSERT_EQ(got.size(), 1u) << "frame " << i;
      EXPECT_EQ(got[0].status, IBV_WC_SUCCESS);
      EXPECT_EQ(got[0].byte_len, 128u);
      EXPECT_EQ(wq_nums.count(got[0].qp_num), 1u);
      hit.insert(got[0].qp_num);
      if (round == 0) {
        first_wq.push_back(got[0].qp_num);
      } else {
        EXPECT_EQ(got[0].qp_num, first_wq[i]);  // one flow, one WQ
      }
    }
  }
  EXPECT_GT(hit.size(), 1u);
  // An RSS QP has no queues of its own.
  EXPECT_NE(PostRecv(rss, 0), 0);
}

// The fabric's rule and RSS tables are writable by every process of the
// user: forged entries steer nothing anywhere they should not, and crash
// nothing.
TEST_F(SoftnicRaw, ForgedRulesAndRssEntriesAreNotTrusted) {
  ibv_cq* scq = NewCq();
  ibv_cq* cq = NewCq();
  ASSERT_TRUE(scq && cq);
  ibv_qp* s = NewRawQp(scq);
  ASSERT_NE(s, nullptr);
  ASSERT_EQ(ToRts(s), 0);
  ibv_wq_init_attr wa{};
  wa.wq_type = IBV_WQT_RQ;
  wa.max_wr = 8;
  wa.max_sge = 1;
  wa.pd = pd_;
  wa.cq = cq;
  ibv_wq* wq = ibv_create_wq(ctx_, &wa);
  ASSERT_NE(wq, nullptr);
  wqs_.push_back(wq);
  ibv_wq_attr m{};
  m.attr_mask = IBV_WQ_ATTR_STATE;
  m.wq_state = IBV_WQS_RDY;
  ASSERT_EQ(ibv_modify_wq(wq, &m), 0);
  ibv_sge sge{reinterpret_cast<uint64_t>(RecvBuf(0)), 2048, mr_->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_wq_recv(wq, &wr, &bad), 0);
  ibv_wq* list[1] = {wq};
  ibv_rwq_ind_table_init_attr ta{};
  ta.log_ind_tbl_size = 0;
  ta.ind_tbl = list;
  table_ = ibv_create_rwq_ind_table(ctx_, &ta);
  ASSERT_NE(table_, nullptr);
  uint8_t key[40] = {1, 2, 3};
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RAW_PACKET;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  qa.pd = pd_;
  qa.rwq_ind_tbl = table_;
  qa.rx_hash_conf.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  qa.rx_hash_conf.rx_hash_key_len = sizeof(key);
  qa.rx_hash_conf.rx_hash_key = key;
  qa.rx_hash_conf.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4;
  ibv_qp* rss = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(rss, nullptr);
  qps_.push_back(rss);
  ASSERT_NE(AddFlow(rss, MakeFlow(kMacA, 0)), nullptr);
  softnic::ShmHeader* h = softnic::GetProcess()->fab->hdr();
  const uint32_t rss_slot = h->qps[softnic::Qp(rss)->slot].rss;
  ASSERT_LT(rss_slot, softnic::kMaxRss);
  softnic::ShmRss saved = h->rss[rss_slot];
  // A table size past the table, then a WQ number naming no WQ: dropped.
  h->rss[rss_slot].log_size = 200;
  ASSERT_EQ(SendFrame(s, Frame(kMacA, 1, 2)), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  EXPECT_TRUE(Poll(cq, 1, 20).empty());
  h->rss[rss_slot] = saved;
  h->rss[rss_slot].wqn[0] = s->qp_num;  // a raw QP, not a WQ
  ASSERT_EQ(SendFrame(s, Frame(kMacA, 1, 2)), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  EXPECT_TRUE(Poll(cq, 1, 20).empty());
  h->rss[rss_slot] = saved;
  // A rule naming a slot past the QP table, or a QP number that is not its
  // slot's: ignored.
  uint32_t rule = softnic::kMaxFlows;
  for (uint32_t i = 0; i < softnic::kMaxFlows; ++i)
    if (h->flows[i].in_use && h->flows[i].qpn == rss->qp_num) rule = i;
  ASSERT_LT(rule, softnic::kMaxFlows);
  const softnic::ShmFlow saved_rule = h->flows[rule];
  h->flows[rule].qp_slot = 0xfffffff0u;
  ASSERT_EQ(SendFrame(s, Frame(kMacA, 1, 2)), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  EXPECT_TRUE(Poll(cq, 1, 20).empty());
  h->flows[rule] = saved_rule;
  h->flows[rule].qpn ^= 0x1000;
  ASSERT_EQ(SendFrame(s, Frame(kMacA, 1, 2)), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  EXPECT_TRUE(Poll(cq, 1, 20).empty());
  h->flows[rule] = saved_rule;
  // Restored: the frame lands in the WQ.
  ASSERT_EQ(SendFrame(s, Frame(kMacA, 1, 2)), 0);
  ASSERT_EQ(Poll(scq, 1).size(), 1u);
  auto c = Poll(cq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].qp_num, wq->wq_num);
}

TEST_F(SoftnicRaw, WqInErrorFlushesItsReceives) {
  ibv_cq* cq = NewCq();
  ASSERT_NE(cq, nullptr);
  ibv_wq_init_attr wa{};
  wa.wq_type = IBV_WQT_RQ;
  wa.max_wr = 4;
  wa.max_sge = 1;
  wa.pd = pd_;
  wa.cq = cq;
  ibv_wq* wq = ibv_create_wq(ctx_, &wa);
  ASSERT_NE(wq, nullptr);
  wqs_.push_back(wq);
  ibv_wq_attr m{};
  m.attr_mask = IBV_WQ_ATTR_STATE;
  m.wq_state = IBV_WQS_ERR;
  EXPECT_EQ(ibv_modify_wq(wq, &m), EINVAL);  // RESET -> ERR is not a transition
  m.wq_state = IBV_WQS_RDY;
  ASSERT_EQ(ibv_modify_wq(wq, &m), 0);
  ibv_sge sge{reinterpret_cast<uint64_t>(RecvBuf(0)), 2048, mr_->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = 99;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_wq_recv(wq, &wr, &bad), 0);
  m.wq_state = IBV_WQS_ERR;
  ASSERT_EQ(ibv_modify_wq(wq, &m), 0);
  auto c = Poll(cq, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_WR_FLUSH_ERR);
  EXPECT_EQ(c[0].wr_id, 99u);
  EXPECT_EQ(c[0].qp_num, wq->wq_num);
}

TEST(SoftnicRawOnIb, RawPacketQpIsNotSupported) {
  PortOption o("ib");
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx, 1, &port), 0);
  ASSERT_EQ(port.link_layer, IBV_LINK_LAYER_INFINIBAND);
  ibv_device_attr_ex x{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &x), 0);
  EXPECT_EQ(x.orig_attr.max_raw_ethy_qp, 0);
  EXPECT_EQ(x.rss_caps.supported_qpts, 0u);
  EXPECT_EQ(x.max_wq_type_rq, 0u);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RAW_PACKET;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd, &a), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace
}  // namespace rdmasan::testing
