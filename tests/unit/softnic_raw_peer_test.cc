// softnic raw packet QPs across processes (RoCE port): a flow steering rule
// made in a forked process steers the frames this one sends to its raw QP,
// small (staged in the completion) and large (copied); after the rule is
// destroyed, a frame reaches nobody and its send still succeeds.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "core/options.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

constexpr uint8_t kDst[6] = {0x02, 0x52, 0x44, 0x4d, 0x00, 0x07};
constexpr uint32_t kSlot = 4096;

// One end: a context, a PD, a buffer (send area, then receive slots), and
// one raw packet QP in RTS.
struct RawEnd {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  ibv_cq* cq = nullptr;
  ibv_qp* qp = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(kSlot * 4, 0);

  bool Make() {
    ctx = OpenSoftnic();
    if (!ctx) return false;
    pd = ibv_alloc_pd(ctx);
    if (!pd) return false;
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    if (!mr || !cq) return false;
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RAW_PACKET;
    a.cap.max_send_wr = a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    qp = ibv_create_qp(pd, &a);
    if (!qp) return false;
    ibv_qp_attr m{};
    m.qp_state = IBV_QPS_INIT;
    m.port_num = 1;
    if (ibv_modify_qp(qp, &m, IBV_QP_STATE | IBV_QP_PORT)) return false;
    m.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &m, IBV_QP_STATE)) return false;
    m.qp_state = IBV_QPS_RTS;
    return ibv_modify_qp(qp, &m, IBV_QP_STATE) == 0;
  }

  uint8_t* Slot(int i) { return buf.data() + kSlot * (i + 1); }

  int PostRecv(int i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(Slot(i)), kSlot, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = static_cast<uint64_t>(i);
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    return ibv_post_recv(qp, &wr, &bad);
  }

  // A frame to kDst of `len` bytes, its payload `fill`.
  static std::vector<uint8_t> Frame(uint32_t len, uint8_t fill) {
    std::vector<uint8_t> f(len, fill);
    memcpy(f.data(), kDst, 6);
    memset(f.data() + 6, 0x24, 6);
    f[12] = 0x88;  // a local experimental EtherType
    f[13] = 0xb5;
    return f;
  }

  bool Poll(ibv_wc* wc, int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline)
      if (int n = ibv_poll_cq(cq, 1, wc)) return n == 1;
    return false;
  }

  // Sends `f`; 0 when its send completes successfully.
  int Send(const std::vector<uint8_t>& f) {
    memcpy(buf.data(), f.data(), f.size());
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), static_cast<uint32_t>(f.size()), mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 7;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad;
    if (int rc = ibv_post_send(qp, &wr, &bad)) return rc;
    ibv_wc wc;
    if (!Poll(&wc, 3000)) return -1;
    return wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND ? 0 : -2;
  }

  // Whether receive slot `i` took exactly `f`.
  bool Received(int i, const std::vector<uint8_t>& f) {
    ibv_wc wc;
    if (!Poll(&wc, 3000)) return false;
    return wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.byte_len == f.size() &&
           !(wc.wc_flags & IBV_WC_GRH) && wc.wr_id == static_cast<uint64_t>(i) && wc.qp_num == qp->qp_num &&
           memcmp(Slot(i), f.data(), f.size()) == 0;
  }
};

TEST(SoftnicRawPeer, FlowOfAnotherProcessSteersFramesToIt) {
  const std::string old = core::GlobalOptions().softnic_port;
  const_cast<core::Options&>(core::GlobalOptions()).softnic_port = "roce";
  const auto small = RawEnd::Frame(64, 0xa1), large = RawEnd::Frame(3000, 0xb2);
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    RawEnd c;
    if (!c.Make()) _exit(10);
    struct {
      ibv_flow_attr attr;
      ibv_flow_spec_eth eth;
    } rule{};
    rule.attr.type = IBV_FLOW_ATTR_NORMAL;
    rule.attr.size = sizeof(rule);
    rule.attr.num_of_specs = 1;
    rule.attr.port = 1;
    rule.eth.type = IBV_FLOW_SPEC_ETH;
    rule.eth.size = sizeof(rule.eth);
    memcpy(rule.eth.val.dst_mac, kDst, 6);
    memset(rule.eth.mask.dst_mac, 0xff, 6);
    ibv_flow* flow = ibv_create_flow(c.qp, &rule.attr);
    if (!flow || c.PostRecv(0) || c.PostRecv(1)) _exit(11);
    char x = 'r';
    if (write(to_parent[1], &x, 1) != 1) _exit(12);
    if (!c.Received(0, small)) _exit(13);
    if (!c.Received(1, large)) _exit(14);
    if (ibv_destroy_flow(flow) || c.PostRecv(2)) _exit(15);
    if (write(to_parent[1], &x, 1) != 1) _exit(16);
    if (read(to_child[0], &x, 1) != 1) _exit(17);  // the parent sent again
    ibv_wc wc;
    if (c.Poll(&wc, 300)) _exit(18);
    _exit(0);
  }
  RawEnd p;
  ASSERT_TRUE(p.Make());
  char x;
  ASSERT_EQ(read(to_parent[0], &x, 1), 1);
  EXPECT_EQ(p.Send(small), 0);
  EXPECT_EQ(p.Send(large), 0);
  ASSERT_EQ(read(to_parent[0], &x, 1), 1);
  EXPECT_EQ(p.Send(small), 0);  // no rule: lost, and the send succeeds
  ASSERT_EQ(write(to_child[1], &x, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(ibv_destroy_qp(p.qp), 0);
  EXPECT_EQ(ibv_destroy_cq(p.cq), 0);
  EXPECT_EQ(ibv_dereg_mr(p.mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(p.pd), 0);
  EXPECT_EQ(ibv_close_device(p.ctx), 0);
  const_cast<core::Options&>(core::GlobalOptions()).softnic_port = old;
}

}  // namespace
}  // namespace rdmasan::testing
