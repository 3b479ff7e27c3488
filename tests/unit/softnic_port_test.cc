// softnic's port as InfiniBand (the default) and as RoCE (softnic_port=roce):
// what ibv_query_port and the GID queries report, that a RoCE address
// vector must carry a GRH (ibv_create_ah, the RTR transition), that
// ibv_query_qp returns the address vector it was given, and that a UD
// message over RoCE v2 between IPv4 GIDs carries an IPv4 header that
// ibv_create_ah_from_wc answers.
#include <arpa/inet.h>
#include <infiniband/verbs.h>

#include <cstring>
#include <string>

#include "core/options.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"
#include "tests/unit/port_option.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

int FindGid(ibv_context* ctx, const ibv_gid& want, uint32_t type) {
  ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) return -1;
  for (int i = 0; i < pa.gid_tbl_len; ++i) {
    ibv_gid_entry e;
    if (ibv_query_gid_ex(ctx, 1, i, &e, 0) != 0) continue;
    if (e.gid_type == type && memcmp(e.gid.raw, want.raw, 16) == 0) return i;
  }
  return -1;
}

ibv_gid Loopback4() {
  in_addr a{htonl(INADDR_LOOPBACK)};
  return softnic::GidOfIpv4(a);
}

TEST(SoftnicPort, InfinibandByDefault) {
  PortOption o("ib");
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_EQ(pa.lid, 1);
  ibv_gid_entry e;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e, 0), 0);
  EXPECT_EQ(e.gid_type, IBV_GID_TYPE_IB);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &e, 0), ENODATA);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_ah_attr ah{};
  ah.dlid = 1;
  ah.port_num = 1;
  ibv_ah* local = ibv_create_ah(pd, &ah);
  EXPECT_NE(local, nullptr) << "an InfiniBand address vector needs no GRH";
  if (local) {
    EXPECT_EQ(ibv_destroy_ah(local), 0);
  }
  ah.is_global = 1;
  ah.grh.sgid_index = 2;  // in the table, but empty
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &ah), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicPort, RoceReportsEthernetAndGidsOfTheHostsAddresses) {
  PortOption o("roce");
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  EXPECT_TRUE(softnic::PortIsEthernet());
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_ETHERNET);
  EXPECT_EQ(pa.lid, 0);
  EXPECT_TRUE(pa.port_cap_flags & IBV_PORT_IP_BASED_GIDS);
  // Index 0 and 1: the default GID, RoCE v1 then v2.
  ibv_gid_entry e0, e1;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 0, &e0, 0), 0);
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, 1, &e1, 0), 0);
  EXPECT_EQ(e0.gid_type, IBV_GID_TYPE_ROCE_V1);
  EXPECT_EQ(e1.gid_type, IBV_GID_TYPE_ROCE_V2);
  EXPECT_EQ(memcmp(e0.gid.raw, e1.gid.raw, 16), 0);
  EXPECT_EQ(be64toh(e0.gid.global.subnet_prefix), 0xfe80000000000000ull);
  // 127.0.0.1, IPv4-mapped, of both types, on the loopback interface.
  const int v1 = FindGid(ctx, Loopback4(), IBV_GID_TYPE_ROCE_V1);
  const int v2 = FindGid(ctx, Loopback4(), IBV_GID_TYPE_ROCE_V2);
  ASSERT_GE(v1, 2);
  EXPECT_EQ(v2, v1 + 1);
  ibv_gid_entry e;
  ASSERT_EQ(ibv_query_gid_ex(ctx, 1, v2, &e, 0), 0);
  EXPECT_NE(e.ndev_ifindex, 0u);
  // The table as one call gives it: the same entries.
  ibv_gid_entry table[softnic::kRoceGidTableLen];
  const ssize_t n = ibv_query_gid_table(ctx, table, softnic::kRoceGidTableLen, 0);
  ASSERT_GT(n, v2);
  EXPECT_EQ(memcmp(table[v2].gid.raw, e.gid.raw, 16), 0);
  EXPECT_EQ(table[v2].gid_type, IBV_GID_TYPE_ROCE_V2);
  // An index past the populated entries is empty.
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, static_cast<uint32_t>(n), &e, 0), ENODATA);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicPort, RoceAddressVectorsNeedAGrh) {
  PortOption o("roce");
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  ASSERT_NE(pd, nullptr);
  ibv_ah_attr ah{};
  ah.port_num = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_ah(pd, &ah), nullptr) << "RoCE: no address vector without a GRH";
  EXPECT_EQ(errno, EINVAL);
  ah.is_global = 1;
  ah.grh.sgid_index = 1;
  ah.grh.hop_limit = 64;
  ah.grh.dgid = Loopback4();
  ibv_ah* a = ibv_create_ah(pd, &ah);
  EXPECT_NE(a, nullptr);
  if (a) {
    EXPECT_EQ(ibv_destroy_ah(a), 0);
  }
  // An RC QP's RTR without a GRH is refused; with one it goes, and
  // ibv_query_qp gives the address vector back.
  ibv_cq* cq = ibv_create_cq(ctx, 4, nullptr, nullptr, 0);
  ASSERT_NE(cq, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 1;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &qa);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  at = {};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = IBV_MTU_1024;
  at.dest_qp_num = qp->qp_num;
  at.ah_attr.port_num = 1;
  at.max_dest_rd_atomic = 1;
  const int rtr = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
  EXPECT_EQ(ibv_modify_qp(qp, &at, rtr), EINVAL);
  at.ah_attr = ah;
  ASSERT_EQ(ibv_modify_qp(qp, &at, rtr), 0);
  ibv_qp_attr got{};
  ibv_qp_init_attr init{};
  ASSERT_EQ(ibv_query_qp(qp, &got, IBV_QP_AV, &init), 0);
  EXPECT_EQ(got.ah_attr.is_global, 1);
  EXPECT_EQ(got.ah_attr.grh.sgid_index, 1);
  EXPECT_EQ(memcmp(got.ah_attr.grh.dgid.raw, ah.grh.dgid.raw, 16), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// UD over RoCE v2 between 127.0.0.1's GIDs: the receiver's 40 bytes hold
// an IPv4 header in their last 20, and the answer's address vector (from
// the completion) leaves from 127.0.0.1's v2 GID towards the sender's.
class SoftnicRoceUd : public SoftnicPair {
 protected:
  void SetUp() override {
    QpOptions o;
    o.type = IBV_QPT_UD;
    SetUpWith(o);
  }
  PortOption port_{"roce"};
};

TEST_F(SoftnicRoceUd, Ipv4HeaderAndAnAnswer) {
  const int v2 = FindGid(ctx_, Loopback4(), IBV_GID_TYPE_ROCE_V2);
  ASSERT_GE(v2, 0);
  ibv_ah_attr ah{};
  ah.port_num = 1;
  ah.is_global = 1;
  ah.grh.sgid_index = static_cast<uint8_t>(v2);
  ah.grh.hop_limit = 64;
  ah.grh.dgid = Loopback4();
  ibv_ah* a = ibv_create_ah(pd_, &ah);
  ASSERT_NE(a, nullptr);
  ASSERT_EQ(PostRecv(1, 7, 0, 128), 0);
  memcpy(buf_[0].data() + 256, "roce", 4);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data() + 256), 4, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 9;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.ud.ah = a;
  wr.wr.ud.remote_qpn = qp_[1]->qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  ASSERT_EQ(Poll(0, 1).size(), 1u);
  auto wcs = Poll(1, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].status, IBV_WC_SUCCESS);
  EXPECT_TRUE(wcs[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(wcs[0].byte_len, 44u);
  const uint8_t* ip = buf_[1].data() + 20;
  EXPECT_EQ(ip[0], 0x45) << "IPv4, a 20-byte header";
  EXPECT_EQ(ip[9], 17) << "UDP";
  EXPECT_EQ(memcmp(ip + 12, ah.grh.dgid.raw + 12, 4), 0);
  EXPECT_EQ(memcmp(buf_[1].data() + 40, "roce", 4), 0);
  ibv_ah_attr back{};
  ASSERT_EQ(ibv_init_ah_from_wc(ctx_, 1, &wcs[0], reinterpret_cast<ibv_grh*>(buf_[1].data()), &back), 0);
  EXPECT_EQ(back.is_global, 1);
  EXPECT_EQ(back.grh.sgid_index, v2);
  EXPECT_EQ(memcmp(back.grh.dgid.raw, Loopback4().raw, 16), 0);
  EXPECT_EQ(ibv_destroy_ah(a), 0);
}

}  // namespace
}  // namespace rdmasan::testing
