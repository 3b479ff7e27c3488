// Fault points of the shim (interpose/faults.h) on softnic, through the
// verbs an application calls: each fails only the way its man page allows,
// with the consequences a NIC gives, and the same seed or decision log
// decides the same.
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "interpose/faults.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

class Faults : public SoftnicPair {
 protected:
  void TearDown() override {
    interpose::ResetDecisionsForTest("faults=");
    SoftnicPair::TearDown();
  }
  // A chain of `n` signaled SENDs from side 0, 16 bytes each.
  struct Chain {
    std::vector<ibv_sge> sge;
    std::vector<ibv_send_wr> wr;
  };
  Chain MakeChain(int n) {
    Chain c;
    c.sge.resize(n);
    c.wr.resize(n);
    for (int i = 0; i < n; ++i) {
      c.sge[i] = {reinterpret_cast<uint64_t>(buf_[0].data() + 16 * i), 16, mr_[0]->lkey};
      c.wr[i] = {};
      c.wr[i].wr_id = 100 + i;
      c.wr[i].opcode = IBV_WR_SEND;
      c.wr[i].send_flags = IBV_SEND_SIGNALED;
      c.wr[i].sg_list = &c.sge[i];
      c.wr[i].num_sge = 1;
      c.wr[i].next = i + 1 < n ? &c.wr[i + 1] : nullptr;
    }
    return c;
  }
  friend std::vector<int> FailingRecvs(Faults* t, const std::string& options);
  void ResetSide1() {
    interpose::ResetDecisionsForTest("faults=");
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);
    ASSERT_EQ(Connect(qp_[1], qp_[0]->qp_num), 0);
  }
  bool AsyncEvent(ibv_async_event* ev, int timeout_ms = 2000) {
    pollfd p{ctx_->async_fd, POLLIN, 0};
    if (poll(&p, 1, timeout_ms) != 1) return false;
    return ibv_get_async_event(ctx_, ev) == 0;
  }
};

TEST_F(Faults, ChainPostFailsAtTheChosenWrAfterPostingTheOnesBefore) {
  for (int i = 0; i < 3; ++i) ASSERT_EQ(PostRecv(1, i, 0, 64), 0);
  interpose::ResetDecisionsForTest("faults=post_send:once:wr=2:errno=ENOMEM");
  Chain c = MakeChain(3);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp_[0], &c.wr[0], &bad), ENOMEM);
  EXPECT_EQ(bad, &c.wr[2]);
  // The chain itself is as the program built it.
  EXPECT_EQ(c.wr[1].next, &c.wr[2]);
  auto wcs = Poll(0, 3, 300);
  ASSERT_EQ(wcs.size(), 2u);
  EXPECT_EQ(wcs[0].wr_id, 100u);
  EXPECT_EQ(wcs[1].wr_id, 101u);
  EXPECT_EQ(Poll(1, 2).size(), 2u);
  // once: the next post goes through.
  EXPECT_EQ(Post(0, IBV_WR_SEND, 7, 0, 16), 0);
  EXPECT_EQ(Poll(0, 1).size(), 1u);
}

TEST_F(Faults, FailureAtTheFirstWrPostsNothing) {
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  interpose::ResetDecisionsForTest("faults=post_send:nth=1:wr=0:errno=EINVAL");
  Chain c = MakeChain(2);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp_[0], &c.wr[0], &bad), EINVAL);
  EXPECT_EQ(bad, &c.wr[0]);
  EXPECT_TRUE(Poll(0, 1, 200).empty());
}

TEST_F(Faults, ReceivePostsFailAtTheNthHit) {
  interpose::ResetDecisionsForTest("faults=post_recv:nth=2:errno=ENOMEM");
  EXPECT_EQ(PostRecv(1, 1, 0, 64), 0);
  EXPECT_EQ(PostRecv(1, 2, 64, 64), ENOMEM);
  EXPECT_EQ(PostRecv(1, 3, 128, 64), 0);
}

TEST_F(Faults, QpFilterFailsOnlyThatQp) {
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(0, i, 0, 64), 0);
  interpose::ResetDecisionsForTest("faults=post_send:p=1:qp=" + std::to_string(qp_[1]->qp_num));
  EXPECT_NE(Post(1, IBV_WR_SEND, 1, 0, 16), 0);
  for (int i = 0; i < 4; ++i) ASSERT_EQ(PostRecv(1, i, 0, 64), 0);
  EXPECT_EQ(Post(0, IBV_WR_SEND, 2, 0, 16), 0);
  EXPECT_EQ(Poll(0, 1).size(), 1u);
}

TEST_F(Faults, RegistrationAndCreationFailWithNullAndErrno) {
  interpose::ResetDecisionsForTest(
      "faults=reg_mr:once:errno=EFAULT,create_qp:once,alloc_pd:once,create_cq:once");
  static char buf[256];
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* mr = ibv_reg_mr(pd_, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  errno = 0;
  EXPECT_EQ(ibv_alloc_pd(ctx_), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  errno = 0;
  EXPECT_EQ(ibv_create_cq(ctx_, 4, nullptr, nullptr, 0), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq_[0];
  a.qp_type = IBV_QPT_RC;
  a.cap = {4, 4, 1, 1, 0};
  errno = 0;
  EXPECT_EQ(ibv_create_qp(pd_, &a), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  ibv_qp* qp = ibv_create_qp(pd_, &a);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
}

TEST_F(Faults, ExtendedCqCreationFailsToo) {
  interpose::ResetDecisionsForTest("faults=create_cq:once:errno=EINVAL");
  ibv_cq_init_attr_ex a{};
  a.cqe = 8;
  a.wc_flags = IBV_WC_STANDARD_FLAGS;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &a), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_cq_ex* cq = ibv_create_cq_ex(ctx_, &a);
  ASSERT_NE(cq, nullptr);
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cq)), 0);
}

TEST_F(Faults, QpFatalMovesTheQpToErrorFlushesAndRaisesTheEvent) {
  interpose::ResetDecisionsForTest("faults=async.qp_fatal:once");
  EXPECT_EQ(Post(0, IBV_WR_SEND, 9, 0, 16), 0);  // reaches the point first: posted to a QP in ERR
  ibv_async_event ev{};
  ASSERT_TRUE(AsyncEvent(&ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_QP_FATAL);
  EXPECT_EQ(ev.element.qp, qp_[0]);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(State(0), IBV_QPS_ERR);
  auto wcs = Poll(0, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 9u);
  EXPECT_EQ(wcs[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(Faults, CqErrStopsTheCqAndRaisesTheEvent) {
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  interpose::ResetDecisionsForTest("faults=async.cq_err:once");
  EXPECT_EQ(Post(0, IBV_WR_SEND, 1, 0, 16), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(AsyncEvent(&ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, cq_[0]);
  ibv_ack_async_event(&ev);
  EXPECT_TRUE(Poll(0, 1, 200).empty());  // the CQ takes no more completions
}

TEST_F(Faults, PortErrIsALinkFlap) {
  interpose::ResetDecisionsForTest("faults=async.port_err:once");
  EXPECT_EQ(PostRecv(1, 1, 0, 64), 0);
  EXPECT_EQ(Post(0, IBV_WR_SEND, 1, 0, 16), 0);
  ibv_async_event ev{};
  ASSERT_TRUE(AsyncEvent(&ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ERR);
  EXPECT_EQ(ev.element.port_num, 1);
  ibv_ack_async_event(&ev);
  ASSERT_TRUE(AsyncEvent(&ev));
  EXPECT_EQ(ev.event_type, IBV_EVENT_PORT_ACTIVE);
  ibv_ack_async_event(&ev);
}

// The receive posts of side 1 (16, its RQ depth) that fail under
// `options`, from a fresh decider and the QP back from RESET.
std::vector<int> FailingRecvs(Faults* t, const std::string& options);

TEST_F(Faults, SameSeedSameDecisionsOtherSeedsOthers) {
  const auto a = FailingRecvs(this, "faults=post_recv:p=0.4:seed=7");
  EXPECT_EQ(FailingRecvs(this, "faults=post_recv:p=0.4:seed=7"), a);
  bool differs = false;
  for (int seed : {8, 9, 10})
    differs |= FailingRecvs(this, "faults=post_recv:p=0.4:seed=" + std::to_string(seed)) != a;
  EXPECT_TRUE(differs);
}

std::vector<int> FailingRecvs(Faults* t, const std::string& options) {
  t->ResetSide1();
  interpose::ResetDecisionsForTest(options);
  std::vector<int> failed;
  for (int i = 0; i < 16; ++i)
    if (t->PostRecv(1, i, 0, 16)) failed.push_back(i);
  return failed;
}

TEST_F(Faults, ARecordedLogDecidesAgain) {
  char path[] = "/tmp/rdmasan-faults-test-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  unlink(path);
  interpose::ResetDecisionsForTest(std::string("faults=post_recv:p=0.4:seed=11:decision_log=") + path);
  std::vector<int> live;
  for (int i = 0; i < 16; ++i)
    if (PostRecv(1, i, 0, 16)) live.push_back(i);
  ASSERT_FALSE(live.empty());
  ASSERT_LT(live.size(), 16u);
  // The same QP again from RESET, the decisions from the log only.
  EXPECT_EQ(FailingRecvs(this, std::string("schedule=") + path), live);
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("# faults=post_recv:p=0.4"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("post_recv obj="), std::string::npos) << text.str();
  unlink(path);
}

}  // namespace
}  // namespace rdmasan::testing
