// softnic on its InfiniBand port (the default): no raw packet QPs, no raw
// capabilities reported, and no RSS capabilities.
#include <errno.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>

#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

TEST(SoftnicRawOnIb, RawPacketQpIsNotSupported) {
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
