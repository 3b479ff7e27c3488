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

// ------------------------------------------------------- tag matching --

struct TmWc {
  uint64_t wr_id = 0;
  int status = -1;
  int opcode = -1;
  unsigned flags = 0;
  uint32_t byte_len = 0;
  uint64_t tag = 0;
  uint32_t priv = 0;
};

// Side 1 receives through a TM SRQ (its completions and its list
// operations on one extended CQ); side 0 sends from qp_[0].
class SoftnicTm : public SoftnicPair {
 protected:
  void SetUp() override {
    SoftnicPair::SetUp();
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 64;
    ca.wc_flags = static_cast<uint64_t>(IBV_WC_STANDARD_FLAGS) | IBV_WC_EX_WITH_TM_INFO;
    cqx_ = ibv_create_cq_ex(ctx_, &ca);
    ASSERT_NE(cqx_, nullptr);
    srq_ = MakeTmSrq(kTags, 4);
    ASSERT_NE(srq_, nullptr);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(cqx_);
    a.srq = srq_;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 4;
    a.cap.max_send_sge = 1;
    tqp_ = ibv_create_qp(pd_, &a);
    ASSERT_NE(tqp_, nullptr);
    ibv_qp_attr r{};
    r.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp_[0], &r, IBV_QP_STATE), 0);
    ASSERT_EQ(Connect(qp_[0], tqp_->qp_num), 0);
    ASSERT_EQ(Connect(tqp_, qp_[0]->qp_num), 0);
  }
  void TearDown() override {
    if (tqp_) {
      EXPECT_EQ(ibv_destroy_qp(tqp_), 0);
    }
    if (srq_) {
      EXPECT_EQ(ibv_destroy_srq(srq_), 0);
    }
    if (cqx_) {
      EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx_)), 0);
    }
    SoftnicPair::TearDown();
  }

  ibv_srq* MakeTmSrq(uint32_t tags, uint32_t ops) {
    ibv_srq_init_attr_ex sa{};
    sa.comp_mask =
        IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
    sa.srq_type = IBV_SRQT_TM;
    sa.pd = pd_;
    sa.cq = ibv_cq_ex_to_cq(cqx_);
    sa.attr.max_wr = 8;
    sa.attr.max_sge = 1;
    sa.tm_cap.max_num_tags = tags;
    sa.tm_cap.max_ops = ops;
    return ibv_create_srq_ex(ctx_, &sa);
  }

  // Posts one list operation; returns its errno, the handle in *handle.
  int TagOp(ibv_ops_wr_opcode op, uint64_t wr_id, uint64_t tag, uint32_t unexpected, uint32_t* handle,
            uint64_t offset = 1024, uint32_t len = 256) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[1].data() + offset), len, mr_[1]->lkey};
    ibv_ops_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.flags = IBV_OPS_SIGNALED | (op == IBV_WR_TAG_SYNC ? IBV_OPS_TM_SYNC : 0);
    wr.tm.unexpected_cnt = unexpected;
    wr.tm.handle = handle ? *handle : 0;
    wr.tm.add.recv_wr_id = wr_id + 1000;
    wr.tm.add.sg_list = &sge;
    wr.tm.add.num_sge = 1;
    wr.tm.add.tag = tag;
    wr.tm.add.mask = ~0ull;
    ibv_ops_wr* bad = nullptr;
    int rc = ibv_post_srq_ops(srq_, &wr, &bad);
    if (handle) *handle = wr.tm.handle;
    return rc;
  }

  // Sends from side 0: a TMH (op, tag, app_ctx), then `body`.
  void SendTm(uint8_t op, uint64_t tag, const char* body, uint32_t app_ctx = 0x77,
              const ibv_rvh* rvh = nullptr) {
    ibv_tmh h{};
    h.opcode = op;
    h.app_ctx = htobe32(app_ctx);
    h.tag = htobe64(tag);
    std::memcpy(buf_[0].data(), &h, sizeof(h));
    uint32_t len = sizeof(h);
    if (rvh) {
      std::memcpy(buf_[0].data() + len, rvh, sizeof(*rvh));
      len += sizeof(*rvh);
    }
    std::memcpy(buf_[0].data() + len, body, std::strlen(body));
    len += std::strlen(body);
    ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, len), 0);
  }

  std::vector<TmWc> PollTm(int n) {
    std::vector<TmWc> out;
    auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
    ibv_poll_cq_attr pa{};
    while (static_cast<int>(out.size()) < n && std::chrono::steady_clock::now() < deadline) {
      if (ibv_start_poll(cqx_, &pa) != 0) continue;
      do {
        TmWc w;
        w.wr_id = cqx_->wr_id;
        w.status = cqx_->status;
        w.opcode = ibv_wc_read_opcode(cqx_);
        w.flags = ibv_wc_read_wc_flags(cqx_);
        w.byte_len = ibv_wc_read_byte_len(cqx_);
        ibv_wc_tm_info info{};
        ibv_wc_read_tm_info(cqx_, &info);
        w.tag = info.tag;
        w.priv = info.priv;
        out.push_back(w);
      } while (static_cast<int>(out.size()) < n && ibv_next_poll(cqx_) == 0);
      ibv_end_poll(cqx_);
    }
    return out;
  }

  int PostSrqRecv(uint64_t wr_id, uint64_t offset) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[1].data() + offset), 256, mr_[1]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    return ibv_post_srq_recv(srq_, &wr, &bad);
  }

  static constexpr uint32_t kTags = 4;
  ibv_cq_ex* cqx_ = nullptr;
  ibv_srq* srq_ = nullptr;
  ibv_qp* tqp_ = nullptr;
};

TEST_F(SoftnicTm, CapsAdvertiseRcTagMatching) {
  ibv_device_attr_ex a{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &a), 0);
  EXPECT_TRUE(a.tm_caps.flags & IBV_TM_CAP_RC);
  EXPECT_GE(a.tm_caps.max_num_tags, kTags);
  EXPECT_GE(a.tm_caps.max_rndv_hdr_size, sizeof(ibv_tmh) + sizeof(ibv_rvh));
}

TEST_F(SoftnicTm, EagerMatchLandsThePayloadWithoutTheHeader) {
  uint32_t h = 0;
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 5, 0x55, 0, &h), 0);
  auto add = PollTm(1);
  ASSERT_EQ(add.size(), 1u);
  EXPECT_EQ(add[0].opcode, IBV_WC_TM_ADD);
  EXPECT_EQ(add[0].wr_id, 5u);
  EXPECT_EQ(add[0].flags, 0u);
  SendTm(IBV_TMH_EAGER, 0x55, "hello");
  EXPECT_EQ(Poll(0, 1).size(), 1u);
  auto r = PollTm(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(r[0].wr_id, 1005u);
  EXPECT_EQ(r[0].flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID);
  EXPECT_EQ(r[0].tag, 0x55u);
  EXPECT_EQ(r[0].priv, 0x77u);
  EXPECT_EQ(r[0].byte_len, 5u);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 1024, "hello", 5), 0);
  // Consumed: its removal now fails, and the slot is free again.
  ASSERT_EQ(TagOp(IBV_WR_TAG_DEL, 6, 0, 0, &h), EINVAL);
}

TEST_F(SoftnicTm, UnexpectedLandsWholeInAnSrqReceiveAndStaleAddsNeverMatch) {
  ASSERT_EQ(PostSrqRecv(40, 0), 0);
  ASSERT_EQ(PostSrqRecv(41, 512), 0);
  SendTm(IBV_TMH_EAGER, 0x99, "unexp");
  EXPECT_EQ(Poll(0, 1).size(), 1u);
  auto r = PollTm(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(r[0].wr_id, 40u);
  EXPECT_EQ(r[0].flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), 0u);
  EXPECT_EQ(r[0].byte_len, sizeof(ibv_tmh) + 5);
  EXPECT_EQ(std::memcmp(buf_[1].data() + sizeof(ibv_tmh), "unexp", 5), 0);
  // An ADD that has not counted that message asks for a sync and is not
  // matched: the next message with its tag is unexpected too.
  uint32_t h = 0;
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 7, 0x99, 0, &h), 0);
  auto add = PollTm(1);
  ASSERT_EQ(add.size(), 1u);
  EXPECT_TRUE(add[0].flags & IBV_WC_TM_SYNC_REQ);
  SendTm(IBV_TMH_EAGER, 0x99, "again");
  EXPECT_EQ(Poll(0, 1).size(), 1u);
  r = PollTm(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 41u);
  EXPECT_EQ(r[0].flags & IBV_WC_TM_MATCH, 0u);
  // Synced (two unexpected): a new ADD matches.
  ASSERT_EQ(TagOp(IBV_WR_TAG_SYNC, 8, 0, 2, nullptr), 0);
  auto sync = PollTm(1);
  ASSERT_EQ(sync.size(), 1u);
  EXPECT_EQ(sync[0].opcode, IBV_WC_TM_SYNC);
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 9, 0x99, 2, &h), 0);
  add = PollTm(1);
  ASSERT_EQ(add.size(), 1u);
  EXPECT_EQ(add[0].flags & IBV_WC_TM_SYNC_REQ, 0u);
  SendTm(IBV_TMH_EAGER, 0x99, "match");
  EXPECT_EQ(Poll(0, 1).size(), 1u);
  r = PollTm(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].wr_id, 1009u);
  EXPECT_TRUE(r[0].flags & IBV_WC_TM_MATCH);
}

TEST_F(SoftnicTm, NoTagIsAnOrdinaryReceive) {
  uint32_t h = 0;
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 5, 0x55, 0, &h), 0);
  ASSERT_EQ(PollTm(1).size(), 1u);
  ASSERT_EQ(PostSrqRecv(40, 0), 0);
  SendTm(IBV_TMH_NO_TAG, 0x55, "plain");
  EXPECT_EQ(Poll(0, 1).size(), 1u);
  auto r = PollTm(1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].opcode, IBV_WC_TM_NO_TAG);
  EXPECT_EQ(r[0].wr_id, 40u);
  EXPECT_EQ(r[0].flags & IBV_WC_TM_MATCH, 0u);
  // The tag is still posted: removing it succeeds.
  ASSERT_EQ(TagOp(IBV_WR_TAG_DEL, 6, 0, 0, &h), 0);
  auto del = PollTm(1);
  ASSERT_EQ(del.size(), 1u);
  EXPECT_EQ(del[0].opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(del[0].status, IBV_WC_SUCCESS);
}

TEST_F(SoftnicTm, DeletingATagAMessageTookIsTmErr) {
  uint32_t h = 0;
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 5, 0x55, 0, &h), 0);
  ASSERT_EQ(PollTm(1).size(), 1u);
  SendTm(IBV_TMH_EAGER, 0x55, "x");
  EXPECT_EQ(Poll(0, 1).size(), 1u);
  // The message's completion is not polled yet: the buffer is consumed.
  ASSERT_EQ(TagOp(IBV_WR_TAG_DEL, 6, 0, 0, &h), 0);
  auto r = PollTm(2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(r[1].opcode, IBV_WC_TM_DEL);
  EXPECT_EQ(r[1].status, IBV_WC_TM_ERR);
}

TEST_F(SoftnicTm, ListAndOperationLimits) {
  uint32_t h = 0;
  for (uint32_t i = 0; i < kTags; ++i) ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, i, i, 0, &h), 0);
  ASSERT_EQ(PollTm(kTags).size(), kTags);
  EXPECT_EQ(TagOp(IBV_WR_TAG_ADD, 9, 9, 0, &h), ENOMEM);  // the list is full
  EXPECT_EQ(TagOp(IBV_WR_TAG_DEL, 9, 0, 0, nullptr), 0);  // handle 0
  // max_ops 4: four signaled operations unpolled, the fifth is refused.
  for (int i = 0; i < 3; ++i) ASSERT_EQ(TagOp(IBV_WR_TAG_SYNC, 20 + i, 0, 0, nullptr), 0);
  EXPECT_EQ(TagOp(IBV_WR_TAG_SYNC, 30, 0, 0, nullptr), ENOMEM);
  ASSERT_EQ(PollTm(4).size(), 4u);
  EXPECT_EQ(TagOp(IBV_WR_TAG_SYNC, 31, 0, 0, nullptr), 0);
  ASSERT_EQ(PollTm(1).size(), 1u);
  h = kTags + 3;
  EXPECT_EQ(TagOp(IBV_WR_TAG_DEL, 32, 0, 0, &h), EINVAL);  // no such handle
}

TEST_F(SoftnicTm, RendezvousReadsFromTheSenderAndSendsFin) {
  uint32_t h = 0;
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 5, 0x55, 0, &h, 2048, 512), 0);
  ASSERT_EQ(PollTm(1).size(), 1u);
  std::memset(buf_[0].data() + 8192, 'r', 300);
  ASSERT_EQ(PostRecv(0, 70, 4096, 64), 0);  // for the FIN
  ibv_rvh rvh{htobe64(reinterpret_cast<uint64_t>(buf_[0].data() + 8192)), htobe32(mr_[0]->rkey),
              htobe32(300)};
  SendTm(IBV_TMH_RNDV, 0x55, "", 0x77, &rvh);
  auto c = Poll(0, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].opcode, IBV_WC_SEND);  // the SEND's completion first, then the FIN
  EXPECT_EQ(c[1].opcode, IBV_WC_RECV);
  EXPECT_EQ(c[1].wr_id, 70u);
  ibv_tmh fin;
  std::memcpy(&fin, buf_[0].data() + 4096, sizeof(fin));
  EXPECT_EQ(fin.opcode, IBV_TMH_FIN);
  EXPECT_EQ(be64toh(fin.tag), 0x55u);
  auto r = PollTm(2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0].opcode, IBV_WC_TM_RECV);
  EXPECT_EQ(r[0].flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), IBV_WC_TM_MATCH);
  EXPECT_EQ(r[0].tag, 0x55u);
  EXPECT_EQ(r[1].flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID), IBV_WC_TM_DATA_VALID);
  EXPECT_EQ(r[1].wr_id, 1005u);
  EXPECT_EQ(r[1].byte_len, 300u);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 2048, buf_[0].data() + 8192, 300), 0);
}

TEST_F(SoftnicTm, RendezvousWithABadRkeyIsIncomplete) {
  uint32_t h = 0;
  ASSERT_EQ(TagOp(IBV_WR_TAG_ADD, 5, 0x55, 0, &h, 2048, 512), 0);
  ASSERT_EQ(PollTm(1).size(), 1u);
  ibv_rvh rvh{htobe64(reinterpret_cast<uint64_t>(buf_[0].data())), htobe32(mr_[0]->rkey ^ 0x100),
              htobe32(64)};
  SendTm(IBV_TMH_RNDV, 0x55, "", 0x77, &rvh);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  auto r = PollTm(2);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[1].status, IBV_WC_TM_RNDV_INCOMPLETE);
}

TEST_F(SoftnicTm, CreationAndOperationErrors) {
  EXPECT_EQ(MakeTmSrq(0, 4), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(MakeTmSrq(1u << 20, 4), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(MakeTmSrq(4, 0), nullptr);
  // List operations on a basic SRQ are refused.
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  ibv_srq* basic = ibv_create_srq(pd_, &sa);
  ASSERT_NE(basic, nullptr);
  ibv_ops_wr wr{};
  wr.opcode = IBV_WR_TAG_SYNC;
  ibv_ops_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_srq_ops(basic, &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  EXPECT_EQ(ibv_destroy_srq(basic), 0);
  // An unknown flag is refused.
  wr.flags = 1 << 5;
  EXPECT_EQ(ibv_post_srq_ops(srq_, &wr, &bad), EINVAL);
}

}  // namespace
}  // namespace rdmasan::testing
