// softnic memory windows, invalidation, ibv_rereg_mr and the reasons of
// error completions (issue 13): every window and key error a NIC gives,
// refused accesses that leave the target byte-for-byte unchanged, the
// receive completion of SEND_WITH_INV, and a window invalidated in one
// process refusing the other's writes.  Side 1 owns the windows (its QP is
// the responder), side 0 is the requester.  Two processes:
// softnic_mw_peers_test.cc.
#include <endian.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "softnic/fabric.h"
#include "softnic/softnic.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

constexpr int kWindowAccess = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_LOCAL_WRITE;
constexpr int kMwMrAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND;

class SoftnicMw : public SoftnicPair {
 protected:
  void SetUp() override {
    SoftnicPair::SetUp();
    mwmr_ = ibv_reg_mr(pd_, buf_[1].data(), kBuf, kMwMrAccess);
    ASSERT_NE(mwmr_, nullptr);
    for (size_t i = 0; i < kBuf; ++i) buf_[1][i] = static_cast<uint8_t>(i * 13 + 1);
  }

  void TearDown() override {
    for (ibv_mw* mw : mws_) EXPECT_EQ(ibv_dealloc_mw(mw), 0);
    for (ibv_mr* mr : extra_mrs_) EXPECT_EQ(ibv_dereg_mr(mr), 0);
    if (mwmr_) {
      EXPECT_EQ(ibv_dereg_mr(mwmr_), 0);
    }
    for (ibv_pd* pd : extra_pds_) EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    SoftnicPair::TearDown();
  }

  ibv_mw* Alloc(ibv_mw_type type, ibv_pd* pd = nullptr) {
    ibv_mw* mw = ibv_alloc_mw(pd ? pd : pd_, type);
    EXPECT_NE(mw, nullptr);
    if (mw) mws_.push_back(mw);
    return mw;
  }

  // A BIND_MW work request on side `side`'s QP; returns post_send's result.
  int PostBind(int side, ibv_mw* mw, uint32_t rkey, ibv_mr* mr, uint64_t offset, uint64_t len,
               int access = kWindowAccess, uint64_t wr_id = 0xb1) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = rkey;
    wr.bind_mw.bind_info.mr = mr;
    wr.bind_mw.bind_info.addr = reinterpret_cast<uint64_t>(buf_[side].data() + offset);
    wr.bind_mw.bind_info.length = len;
    wr.bind_mw.bind_info.mw_access_flags = access;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_[side], &wr, &bad);
  }

  // Binds and polls: the completion's status.
  ibv_wc_status Bind(ibv_mw* mw, uint32_t rkey, ibv_mr* mr, uint64_t offset, uint64_t len,
                     int access = kWindowAccess, int side = 1) {
    EXPECT_EQ(PostBind(side, mw, rkey, mr, offset, len, access), 0);
    auto wc = Poll(side, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (wc.empty()) return IBV_WC_GENERAL_ERR;
    if (wc[0].status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc[0].opcode, IBV_WC_BIND_MW);
    }
    return wc[0].status;
  }

  ibv_wc_status LocalInv(int side, uint32_t rkey, uint64_t wr_id = 0x1a) {
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = rkey;
    ibv_send_wr* bad = nullptr;
    EXPECT_EQ(ibv_post_send(qp_[side], &wr, &bad), 0);
    auto wc = Poll(side, 1);
    EXPECT_EQ(wc.size(), 1u);
    if (wc.empty()) return IBV_WC_GENERAL_ERR;
    if (wc[0].status == IBV_WC_SUCCESS) {
      EXPECT_EQ(wc[0].opcode, IBV_WC_LOCAL_INV);
    }
    return wc[0].status;
  }

  // An RDMA op from side 0 into side 1's buffer through `rkey`; the
  // completion.
  ibv_wc Rdma(ibv_wr_opcode op, uint32_t rkey, uint64_t remote_offset, uint32_t len, uint64_t wr_id = 0x77) {
    EXPECT_EQ(Post(0, op, wr_id, 0, len, IBV_SEND_SIGNALED, remote_offset, 0, rkey), 0);
    auto wc = Poll(0, 1);
    EXPECT_EQ(wc.size(), 1u);
    return wc.empty() ? ibv_wc{} : wc[0];
  }

  std::string Explain(int side, const ibv_wc& wc) {
    std::string why;
    EXPECT_TRUE(softnic::ExplainCompletion(cq_[side], wc.qp_num, wc.wr_id, wc.status, &why));
    return why;
  }

  // A refused write must leave the target untouched.
  void ExpectRefusedWrite(uint32_t rkey, uint64_t offset, uint32_t len, const char* why_part) {
    std::vector<uint8_t> before = buf_[1];
    std::memset(buf_[0].data(), 0xee, len);
    ibv_wc wc = Rdma(IBV_WR_RDMA_WRITE, rkey, offset, len);
    EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR) << ibv_wc_status_str(wc.status);
    EXPECT_TRUE(before == buf_[1]) << "a refused write touched the target";
    EXPECT_EQ(State(1), IBV_QPS_ERR);
    if (why_part) {
      EXPECT_NE(Explain(0, wc).find(why_part), std::string::npos) << Explain(0, wc);
    }
  }

  ibv_mr* mwmr_ = nullptr;
  std::vector<ibv_mw*> mws_;
  std::vector<ibv_mr*> extra_mrs_;
  std::vector<ibv_pd*> extra_pds_;
};

uint64_t Addr(const std::vector<uint8_t>& b, uint64_t off) {
  return reinterpret_cast<uint64_t>(b.data() + off);
}

TEST_F(SoftnicMw, DeviceReportsWindows) {
  ibv_device_attr a;
  ASSERT_EQ(ibv_query_device(ctx_, &a), 0);
  EXPECT_GT(a.max_mw, 0);
  EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW);
  EXPECT_TRUE(a.device_cap_flags & IBV_DEVICE_MEM_WINDOW_TYPE_2B);
}

TEST_F(SoftnicMw, WindowKeysAreNotMrKeys) {
  ibv_mw* w1 = Alloc(IBV_MW_TYPE_1);
  ibv_mw* w2 = Alloc(IBV_MW_TYPE_2);
  ASSERT_TRUE(w1 && w2);
  EXPECT_EQ(w1->type, IBV_MW_TYPE_1);
  EXPECT_EQ(w2->pd, pd_);
  EXPECT_TRUE(softnic::IsMwKey(w1->rkey));
  EXPECT_TRUE(softnic::IsMwKey(w2->rkey));
  EXPECT_FALSE(softnic::IsMwKey(mwmr_->rkey));
  EXPECT_NE(w1->rkey >> 8, w2->rkey >> 8);
  errno = 0;
  EXPECT_EQ(ibv_alloc_mw(pd_, static_cast<ibv_mw_type>(3)), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

TEST_F(SoftnicMw, Type1BindWriteThenZeroLengthUnbind) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_1);
  const uint32_t first = mw->rkey;
  ibv_mw_bind b{};
  b.wr_id = 0x51;
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = {mwmr_, Addr(buf_[1], 4096), 4096, IBV_ACCESS_REMOTE_WRITE};
  ASSERT_EQ(ibv_bind_mw(qp_[1], mw, &b), 0);
  EXPECT_EQ(mw->rkey, ibv_inc_rkey(first));  // the provider bumps the tag
  auto wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(wc[0].wr_id, 0x51u);

  std::memcpy(buf_[0].data(), "through a window", 16);
  ibv_wc w = Rdma(IBV_WR_RDMA_WRITE, mw->rkey, 4096 + 100, 16);
  EXPECT_EQ(w.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 4196, "through a window", 16), 0);

  // Beyond the window (but inside the MR): refused.
  const uint32_t key = mw->rkey;
  b.bind_info = {mwmr_, 0, 0, 0};
  ASSERT_EQ(ibv_bind_mw(qp_[1], mw, &b), 0);
  wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  ExpectRefusedWrite(key, 4096, 16, "unbound by a zero-length bind");
}

TEST_F(SoftnicMw, Type1BindOfAnotherPdIsEperm) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  extra_pds_.push_back(other);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_1, other);
  ibv_mw_bind b{};
  b.send_flags = IBV_SEND_SIGNALED;
  b.bind_info = {mwmr_, Addr(buf_[1], 0), 64, IBV_ACCESS_REMOTE_WRITE};
  EXPECT_EQ(ibv_bind_mw(qp_[1], mw, &b), EPERM);
}

TEST_F(SoftnicMw, AccessBeyondTheWindowIsRefused) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, key, mwmr_, 1024, 1024), IBV_WC_SUCCESS);
  ExpectRefusedWrite(key, 2048 - 8, 16, "ends 8 bytes past the window");
}

TEST_F(SoftnicMw, WindowWithoutReadRefusesRead) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, key, mwmr_, 0, 4096, IBV_ACCESS_REMOTE_WRITE), IBV_WC_SUCCESS);
  ibv_wc wc = Rdma(IBV_WR_RDMA_READ, key, 0, 64);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_NE(Explain(0, wc).find("does not grant REMOTE_READ"), std::string::npos) << Explain(0, wc);
}

TEST_F(SoftnicMw, Type2LocalInvalidateRefusesTheKey) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t allocated = mw->rkey;
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, key, mwmr_, 0, kBuf), IBV_WC_SUCCESS);
  EXPECT_EQ(mw->rkey, allocated);  // a type-2 bind WR leaves mw->rkey alone, as hardware does
  ibv_wc wc = Rdma(IBV_WR_RDMA_READ, key, 512, 64);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_[0].data(), buf_[1].data() + 512, 64), 0);
  ASSERT_EQ(LocalInv(1, key, 0x1a), IBV_WC_SUCCESS);
  char expect[96];
  snprintf(expect, sizeof(expect), "rkey 0x%x was invalidated by LOCAL_INV (pid %d, wr_id 0x1a)", key,
           getpid());
  ExpectRefusedWrite(key, 0, 64, expect);
}

TEST_F(SoftnicMw, StaleTagIsRefusedAfterRebind) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k1 = ibv_inc_rkey(mw->rkey);
  const uint32_t k2 = ibv_inc_rkey(k1);
  ASSERT_EQ(Bind(mw, k1, mwmr_, 0, 4096), IBV_WC_SUCCESS);
  ASSERT_EQ(LocalInv(1, k1), IBV_WC_SUCCESS);
  ASSERT_EQ(Bind(mw, k2, mwmr_, 0, 4096), IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(IBV_WR_RDMA_WRITE, k2, 0, 8).status, IBV_WC_SUCCESS);
  ExpectRefusedWrite(k1, 0, 8, "REM_ACCESS_ERR: rkey");
}

TEST_F(SoftnicMw, SameKeyAfterInvalidationIsValidAgain) {
  // Hardware allows it (only the checker calls it a bug): the stale key of
  // the last binding works for the new one.
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 4096), IBV_WC_SUCCESS);
  ASSERT_EQ(LocalInv(1, k), IBV_WC_SUCCESS);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 4096), IBV_WC_SUCCESS);
  EXPECT_EQ(Rdma(IBV_WR_RDMA_WRITE, k, 0, 8).status, IBV_WC_SUCCESS);
}

TEST_F(SoftnicMw, SendWithInvalidateCompletesWithTheKey) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t key = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, key, mwmr_, 0, 8192), IBV_WC_SUCCESS);
  ASSERT_EQ(PostRecv(1, 0x99, 16384, 64), 0);
  std::memcpy(buf_[0].data(), "done", 4);
  ibv_sge sge{Addr(buf_[0], 0), 4, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 0x5e;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = key;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_SEND);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].wr_id, 0x99u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_INV);
  EXPECT_FALSE(r[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(r[0].invalidated_rkey, key);
  EXPECT_EQ(r[0].byte_len, 4u);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 16384, "done", 4), 0);
  char expect[96];
  snprintf(expect, sizeof(expect), "invalidated by a SEND_WITH_INV from pid %d (wr_id 0x5e)", getpid());
  ExpectRefusedWrite(key, 0, 8, expect);
}

TEST_F(SoftnicMw, SendWithInvalidateOfAnUnboundKeyFailsBothSides) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(PostRecv(1, 0x98, 16384, 64), 0);
  std::vector<uint8_t> before = buf_[1];
  ibv_sge sge{Addr(buf_[0], 0), 4, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 0x5f;
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = ibv_inc_rkey(mw->rkey);
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_NE(Explain(0, s[0]).find("the window is not bound"), std::string::npos) << Explain(0, s[0]);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_REM_INV_REQ_ERR);
  EXPECT_NE(Explain(1, r[0]).find("not bound"), std::string::npos);
  EXPECT_TRUE(before == buf_[1]);
  EXPECT_EQ(State(1), IBV_QPS_ERR);
}

// Bind errors: MW_BIND_ERR, and the QP goes to ERR.
class SoftnicMwBindError : public SoftnicMw {
 protected:
  void ExpectBindError(ibv_mw* mw, uint32_t rkey, ibv_mr* mr, uint64_t offset, uint64_t len, int access,
                       const char* why_part, int side = 1) {
    ASSERT_EQ(PostBind(side, mw, rkey, mr, offset, len, access, 0xbe), 0);
    auto wc = Poll(side, 1);
    ASSERT_EQ(wc.size(), 1u);
    EXPECT_EQ(wc[0].status, IBV_WC_MW_BIND_ERR) << ibv_wc_status_str(wc[0].status);
    EXPECT_EQ(State(side), IBV_QPS_ERR);
    EXPECT_NE(Explain(side, wc[0]).find(why_part), std::string::npos) << Explain(side, wc[0]);
  }
};

TEST_F(SoftnicMwBindError, MrWithoutMwBindAccess) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ExpectBindError(mw, ibv_inc_rkey(mw->rkey), mr_[1], 0, 64, kWindowAccess, "without IBV_ACCESS_MW_BIND");
}

TEST_F(SoftnicMwBindError, RangeBeyondTheMr) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ExpectBindError(mw, ibv_inc_rkey(mw->rkey), mwmr_, kBuf - 64, 80, kWindowAccess, "ends 16 bytes past MR");
}

TEST_F(SoftnicMwBindError, RightsTheMrLacks) {
  ibv_mr* ro = ibv_reg_mr(pd_, buf_[1].data(), kBuf, IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND);
  ASSERT_NE(ro, nullptr);
  extra_mrs_.push_back(ro);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ExpectBindError(mw, ibv_inc_rkey(mw->rkey), ro, 0, 64, IBV_ACCESS_REMOTE_WRITE, "lacks LOCAL_WRITE");
}

TEST_F(SoftnicMwBindError, WindowOfAnotherPd) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  extra_pds_.push_back(other);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2, other);
  ExpectBindError(mw, ibv_inc_rkey(mw->rkey), mwmr_, 0, 64, kWindowAccess, "of another PD");
}

TEST_F(SoftnicMwBindError, Type2ZeroLength) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ExpectBindError(mw, ibv_inc_rkey(mw->rkey), mwmr_, 0, 0, kWindowAccess, "zero length");
}

TEST_F(SoftnicMwBindError, Type2StillValid) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 64), IBV_WC_SUCCESS);
  ExpectBindError(mw, ibv_inc_rkey(k), mwmr_, 0, 64, kWindowAccess, "still valid");
}

TEST_F(SoftnicMwBindError, KeyIndexChanged) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ExpectBindError(mw, mw->rkey + 0x100, mwmr_, 0, 64, kWindowAccess, "changes more than the tag");
}

// LOCAL_INV of a key that is not a bound type-2 window: LOC_QP_OP_ERR.
TEST_F(SoftnicMw, LocalInvalidateOfAnUnboundWindow) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  EXPECT_EQ(LocalInv(1, ibv_inc_rkey(mw->rkey)), IBV_WC_LOC_QP_OP_ERR);
  EXPECT_EQ(State(1), IBV_QPS_ERR);
}

TEST_F(SoftnicMw, LocalInvalidateOfAnMrKey) { EXPECT_EQ(LocalInv(1, mwmr_->rkey), IBV_WC_LOC_QP_OP_ERR); }

TEST_F(SoftnicMw, LocalInvalidateOfAType1Window) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_1);
  EXPECT_EQ(LocalInv(1, mw->rkey), IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(SoftnicMw, LocalInvalidateOfAStaleTag) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 64), IBV_WC_SUCCESS);
  EXPECT_EQ(LocalInv(1, ibv_inc_rkey(k)), IBV_WC_LOC_QP_OP_ERR);
}

TEST_F(SoftnicMw, DeregWithABoundWindowIsBusy) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 64), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mwmr_), EBUSY);
  ASSERT_EQ(LocalInv(1, k), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_dereg_mr(mwmr_), 0);
  mwmr_ = nullptr;
}

TEST_F(SoftnicMw, DeallocPdWithWindowsIsBusy) {
  ibv_pd* pd = ibv_alloc_pd(ctx_);
  ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
  ASSERT_NE(mw, nullptr);
  EXPECT_EQ(ibv_dealloc_pd(pd), EBUSY);
  EXPECT_EQ(ibv_dealloc_mw(mw), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
}

TEST_F(SoftnicMw, DeallocatedWindowRefusesItsKey) {
  ibv_mw* mw = ibv_alloc_mw(pd_, IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 64), IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_dealloc_mw(mw), 0);
  ExpectRefusedWrite(k, 0, 8, "ibv_dealloc_mw");
}

TEST_F(SoftnicMw, Type2WindowServesOnlyItsQp) {
  // Bound through side 0's QP, the window belongs to that QP: a write
  // arriving at side 1's QP may not use it.
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = k;
  wr.bind_mw.bind_info = {mwmr_, Addr(buf_[1], 0), 64, IBV_ACCESS_REMOTE_WRITE};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  ASSERT_EQ(wc[0].status, IBV_WC_SUCCESS);
  ExpectRefusedWrite(k, 0, 8, "type-2 window bound to QP");
}

TEST_F(SoftnicMw, QpExBuildsBindAndInvalidate) {
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp_[1]);
  ASSERT_NE(x, nullptr);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ibv_mw_bind_info info{mwmr_, Addr(buf_[1], 0), 256, IBV_ACCESS_REMOTE_WRITE};
  ibv_wr_start(x);
  x->wr_id = 0x61;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, k, &info);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[0].opcode, IBV_WC_BIND_MW);
  EXPECT_EQ(Rdma(IBV_WR_RDMA_WRITE, k, 0, 8).status, IBV_WC_SUCCESS);
  ibv_wr_start(x);
  x->wr_id = 0x62;
  ibv_wr_local_inv(x, k);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].opcode, IBV_WC_LOCAL_INV);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  ExpectRefusedWrite(k, 0, 8, "LOCAL_INV");
}

TEST_F(SoftnicMw, QpExSendWithInvalidate) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 256), IBV_WC_SUCCESS);
  ASSERT_EQ(PostRecv(1, 0x71, 16384, 64), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp_[0]);
  ibv_wr_start(x);
  x->wr_id = 0x63;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send_inv(x, k);
  ibv_wr_set_sge(x, mr_[0]->lkey, Addr(buf_[0], 0), 8);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_INV);
  EXPECT_EQ(r[0].invalidated_rkey, k);
}

TEST_F(SoftnicMw, CqExReadsTheInvalidatedRkey) {
  // Side 1's QP replaced by one whose receive CQ is an ibv_cq_ex.
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx_, &ca);
  ASSERT_NE(cqx, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = cq_[1];
  a.recv_cq = ibv_cq_ex_to_cq(cqx);
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd_, &a);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(qp_[0], qp->qp_num), 0);
  ASSERT_EQ(Connect(qp, qp_[0]->qp_num), 0);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ibv_send_wr bw{};
  bw.opcode = IBV_WR_BIND_MW;
  bw.send_flags = IBV_SEND_SIGNALED;
  bw.bind_mw = {mw, k, {mwmr_, Addr(buf_[1], 0), 64, IBV_ACCESS_REMOTE_WRITE}};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp, &bw, &bad), 0);
  auto b = Poll(1, 1);
  ASSERT_EQ(b.size(), 1u);
  ASSERT_EQ(b[0].status, IBV_WC_SUCCESS);
  ibv_sge rs{Addr(buf_[1], 1024), 64, mr_[1]->lkey};
  ibv_recv_wr rw{};
  rw.wr_id = 0x81;
  rw.sg_list = &rs;
  rw.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  ASSERT_EQ(ibv_post_recv(qp, &rw, &rbad), 0);
  ibv_sge sge{Addr(buf_[0], 0), 8, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND_WITH_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.invalidate_rkey = k;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  ASSERT_EQ(Poll(0, 1).size(), 1u);
  ibv_poll_cq_attr pa{};
  int rc = ENOENT;
  for (int i = 0; i < 100000 && rc == ENOENT; ++i) rc = ibv_start_poll(cqx, &pa);
  ASSERT_EQ(rc, 0);
  EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(cqx->wr_id, 0x81u);
  EXPECT_TRUE(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_INV);
  EXPECT_EQ(ibv_wc_read_invalidated_rkey(cqx), k);
  ibv_end_poll(cqx);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

TEST_F(SoftnicMw, FenceIsAccepted) {
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  const uint32_t k = ibv_inc_rkey(mw->rkey);
  ASSERT_EQ(Bind(mw, k, mwmr_, 0, 4096), IBV_WC_SUCCESS);
  // A READ, then a fenced WRITE of what it read: the WRITE sees the data.
  std::memset(buf_[0].data(), 0, 64);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 64, 0, 128, 0, k), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 2, 0, 64, IBV_SEND_SIGNALED | IBV_SEND_FENCE, 1024, 0, k), 0);
  auto wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 1024, buf_[1].data() + 128, 64), 0);
}

// ibv_rereg_mr.
TEST_F(SoftnicMw, ReregAccessKeepsKeysAndRefusesWhatItDropped) {
  const uint32_t lkey = mr_[1]->lkey, rkey = mr_[1]->rkey;
  EXPECT_EQ(Rdma(IBV_WR_RDMA_WRITE, rkey, 0, 8).status, IBV_WC_SUCCESS);
  ASSERT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE), 0);
  EXPECT_EQ(mr_[1]->lkey, lkey);
  EXPECT_EQ(mr_[1]->rkey, rkey);
  ExpectRefusedWrite(rkey, 0, 8, "registered without REMOTE_WRITE");
}

TEST_F(SoftnicMw, ReregTranslationOldKeyRefused) {
  std::vector<uint8_t> other(8192, 0);
  const uint32_t old_rkey = mr_[1]->rkey;
  ASSERT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, other.data(), other.size(), 0), 0);
  ibv_sge sge{Addr(buf_[0], 0), 8, mr_[0]->lkey};
  std::memcpy(buf_[0].data(), "new home", 8);
  ibv_send_wr wr{};
  wr.wr_id = 6;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma = {reinterpret_cast<uint64_t>(other.data() + 64), mr_[1]->rkey};
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(other.data() + 64, "new home", 8), 0);
  wr.wr.rdma.rkey = old_rkey;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_NE(Explain(0, wc[0]).find("stale key"), std::string::npos) << Explain(0, wc[0]);
  EXPECT_NE(Explain(0, wc[0]).find("re-registered"), std::string::npos) << Explain(0, wc[0]);
}

TEST_F(SoftnicMw, ReregPdMakesReceiveBufferForeign) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  ASSERT_EQ(PostRecv(1, 0x31, 0, 64), 0);
  ASSERT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_PD, other, nullptr, 0, 0), 0);
  EXPECT_EQ(mr_[1]->pd, other);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 0x32, 0, 8), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_OP_ERR);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_NE(Explain(1, r[0]).find("of another PD"), std::string::npos) << Explain(1, r[0]);
  EXPECT_EQ(ibv_dealloc_pd(other), EBUSY);
  ASSERT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_PD, pd_, nullptr, 0, 0), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

TEST_F(SoftnicMw, ReregBadInputAndBusy) {
  EXPECT_EQ(ibv_rereg_mr(mr_[1], 0x80, nullptr, nullptr, 0, 0), IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_PD, pd_, nullptr, 0, IBV_ACCESS_LOCAL_WRITE),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_TRANSLATION, nullptr, nullptr, 0, 0),
            IBV_REREG_MR_ERR_INPUT);
  EXPECT_EQ(ibv_rereg_mr(mr_[1], IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_REMOTE_WRITE),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EINVAL);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ASSERT_EQ(Bind(mw, ibv_inc_rkey(mw->rkey), mwmr_, 0, 64), IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_rereg_mr(mwmr_, IBV_REREG_MR_CHANGE_ACCESS, nullptr, nullptr, 0, IBV_ACCESS_LOCAL_WRITE),
            IBV_REREG_MR_ERR_CMD);
  EXPECT_EQ(errno, EBUSY);
  ASSERT_EQ(LocalInv(1, ibv_inc_rkey(mw->rkey)), IBV_WC_SUCCESS);
}

TEST_F(SoftnicMw, ExplainsADeregisteredRkey) {
  ibv_mr* mr = ibv_reg_mr(pd_, buf_[1].data(), 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  ASSERT_NE(mr, nullptr);
  const uint32_t rkey = mr->rkey;
  ASSERT_EQ(ibv_dereg_mr(mr), 0);
  char expect[96];
  snprintf(expect, sizeof(expect), "rkey 0x%x: its MR was deregistered by ibv_dereg_mr (pid %d)", rkey,
           getpid());
  ExpectRefusedWrite(rkey, 0, 8, expect);
}

// A QP moved to RESET takes its completions not yet polled with it (as
// mlx5_cq_clean does), so a QP restated after an error starts clean.
TEST_F(SoftnicMw, ResetCleansTheQpsCompletions) {
  ASSERT_EQ(PostRecv(1, 0x21, 0, 64), 0);
  ASSERT_EQ(PostRecv(1, 0x22, 64, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 0x23, 0, 8), 0);  // completes recv 0x21
  ASSERT_EQ(Poll(0, 1).size(), 1u);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);  // flushes recv 0x22
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);
  EXPECT_TRUE(Poll(1, 1, 50).empty());
  // Restated, it works again, and its CQ reports only new completions.
  ASSERT_EQ(Connect(qp_[1], qp_[0]->qp_num), 0);
  ASSERT_EQ(PostRecv(1, 0x24, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 0x25, 0, 8), 0);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 0x24u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
}

// Reasons of other error completions.
TEST_F(SoftnicMw, ExplainsSgePastTheMr) {
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 0x41, kBuf - 16, 32, IBV_SEND_SIGNALED), 0);
  auto wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  char expect[64];
  snprintf(expect, sizeof(expect), "SGE 0 ends 16 bytes past MR lkey 0x%x", mr_[0]->lkey);
  EXPECT_NE(Explain(0, wc[0]).find(expect), std::string::npos) << Explain(0, wc[0]);
  std::string none;
  EXPECT_FALSE(softnic::ExplainCompletion(cq_[0], wc[0].qp_num, 0x12345, wc[0].status, &none));
}

TEST_F(SoftnicMw, ExplainsAFlushByItsCause) {
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 0x42, 0, 8, 0, 0, 0, 0xdead00), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 0x43, 0, 8, 0), 0);
  auto wc = Poll(0, 2);
  ASSERT_EQ(wc.size(), 2u);
  EXPECT_EQ(wc[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(wc[1].status, IBV_WC_WR_FLUSH_ERR);
  const std::string why = Explain(0, wc[1]);
  EXPECT_NE(why.find("after wr_id 0x42 failed"), std::string::npos) << why;
  EXPECT_NE(why.find("0xdead00"), std::string::npos) << why;
}

TEST_F(SoftnicMw, ExplainsTheRespondersFlush) {
  ASSERT_EQ(PostRecv(1, 0x45, 0, 64), 0);
  ibv_mw* mw = Alloc(IBV_MW_TYPE_2);
  ExpectRefusedWrite(ibv_inc_rkey(mw->rkey), 0, 8, "window not bound");
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_WR_FLUSH_ERR);
  const std::string why = Explain(1, r[0]);
  EXPECT_NE(why.find("went to ERR as a responder: REM_ACCESS_ERR"), std::string::npos) << why;
  char requester[48];
  snprintf(requester, sizeof(requester), "requester QP 0x%x, pid %d, wr_id 0x77", qp_[0]->qp_num, getpid());
  EXPECT_NE(why.find(requester), std::string::npos) << why;
}

class SoftnicMwNoRnrRetry : public SoftnicMw {
  void SetUp() override {
    QpOptions o;
    o.rnr_retry = 0;
    SetUpWith(o);
    mwmr_ = ibv_reg_mr(pd_, buf_[1].data(), kBuf, kMwMrAccess);
  }
};

TEST_F(SoftnicMwNoRnrRetry, ExplainsRnr) {
  ASSERT_EQ(Post(0, IBV_WR_SEND, 0x44, 0, 8), 0);
  auto wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_NE(Explain(0, wc[0]).find("no receive posted"), std::string::npos) << Explain(0, wc[0]);
}

}  // namespace
}  // namespace rdmasan::testing
