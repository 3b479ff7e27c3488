// softnic: RDMA atomic write (ibv_wr_atomic_write) and tag matching (TM
// SRQs, ibv_post_srq_ops, the TMH/RVH wire protocol), through the shim's
// exported verbs as an application calls them.
#include <endian.h>
#include <gtest/gtest.h>
#include <infiniband/tm_types.h>
#include <infiniband/verbs.h>

#include <cstring>

#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

// ------------------------------------------------------- atomic write --

class SoftnicAtomicWrite : public SoftnicPair {
 protected:
  // Posts one atomic write from side 0 through the ibv_wr_* API.
  int AtomicWrite(uint64_t wr_id, uint64_t remote_offset, uint64_t value, uint32_t rkey = 0) {
    ibv_qp_ex* x = ibv_qp_to_qp_ex(qp_[0]);
    ibv_wr_start(x);
    x->wr_id = wr_id;
    x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_write(x, rkey ? rkey : mr_[1]->rkey,
                        reinterpret_cast<uint64_t>(buf_[1].data() + remote_offset), &value);
    value = ~value;  // the value is copied at the call
    return ibv_wr_complete(x);
  }
  uint64_t Remote(uint64_t offset) {
    uint64_t v;
    std::memcpy(&v, buf_[1].data() + offset, 8);
    return v;
  }
};

TEST_F(SoftnicAtomicWrite, WritesEightBytesAndCompletesAsAtomicWrite) {
  ASSERT_EQ(AtomicWrite(5, 64, 0x1122334455667788ull), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(c[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(c[0].wr_id, 5u);
  EXPECT_EQ(Remote(64), 0x1122334455667788ull);
  EXPECT_EQ(Remote(72), 0u);  // exactly 8 bytes
}

TEST_F(SoftnicAtomicWrite, MisalignedRemoteAddressIsInvalidRequest) {
  ASSERT_EQ(AtomicWrite(6, 4, 42), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_EQ(Remote(0), 0u);
  EXPECT_EQ(State(0), IBV_QPS_ERR);
}

TEST_F(SoftnicAtomicWrite, NeedsRemoteWriteNotRemoteAtomic) {
  ibv_mr* ro = ibv_reg_mr(pd_, buf_[1].data(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
  ASSERT_NE(ro, nullptr);
  ASSERT_EQ(AtomicWrite(7, 0, 42, ro->rkey), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(Remote(0), 0u);
  EXPECT_EQ(ibv_dereg_mr(ro), 0);
}

TEST_F(SoftnicAtomicWrite, PostSendTakesTheValueFromOneEightByteSge) {
  const uint64_t v = 0xfeedfacecafebeefull;
  std::memcpy(buf_[0].data(), &v, 8);
  ASSERT_EQ(Post(0, IBV_WR_ATOMIC_WRITE, 8, 0, 8, IBV_SEND_SIGNALED, 16), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(c[0].opcode, IBV_WC_ATOMIC_WRITE);
  EXPECT_EQ(Remote(16), v);
  // Any other length is refused at post, as an invalid WR.
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(Post(0, IBV_WR_ATOMIC_WRITE, 9, 0, 4, IBV_SEND_SIGNALED, 16, 0, 0, &bad), EINVAL);
  EXPECT_NE(bad, nullptr);
}

TEST_F(SoftnicAtomicWrite, RcOnlyAndAdvertised) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_NE(a.device_cap_flags_ex & (1ull << 40), 0u);  // IB_UVERBS_DEVICE_ATOMIC_WRITE
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = qa.recv_cq = cq_[0];
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.pd = pd_;
  qa.send_ops_flags = IBV_QP_EX_WITH_ATOMIC_WRITE;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

class SoftnicAtomicWriteUc : public SoftnicAtomicWrite {
 protected:
  void SetUp() override {
    QpOptions o;
    o.type = IBV_QPT_UC;
    SetUpWith(o);
  }
};

TEST_F(SoftnicAtomicWriteUc, IsNotAnUcOperation) {
  EXPECT_EQ(AtomicWrite(1, 0, 1), EINVAL);
  EXPECT_EQ(Remote(0), 0u);
}

}  // namespace
}  // namespace rdmasan::testing
