// softnic's chaos points through the verbs an application calls
// (--chaos, softnic/chaos.h): spurious completion events (kCqEvent) and
// ibv_query_qp_data_in_order's answer with and without chaos.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "interpose/faults.h"
#include "softnic/chaos.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

class Chaos : public SoftnicPair {
 protected:
  void TearDown() override {
    interpose::ResetDecisionsForTest("chaos=:schedule=:decision_log=");
    SoftnicPair::TearDown();
  }
  // ibv_get_cq_event on the channel made non-blocking: the CQ, or null
  // when no event is there (EAGAIN).
  ibv_cq* TryEvent() {
    const int flags = fcntl(channel_->fd, F_GETFL);
    EXPECT_EQ(fcntl(channel_->fd, F_SETFL, flags | O_NONBLOCK), 0);
    ibv_cq* cq = nullptr;
    void* cq_context = nullptr;
    errno = 0;
    const int rc = ibv_get_cq_event(channel_, &cq, &cq_context);
    EXPECT_EQ(fcntl(channel_->fd, F_SETFL, flags), 0);
    if (rc != 0) {
      EXPECT_EQ(errno, EAGAIN);
      return nullptr;
    }
    EXPECT_EQ(cq_context, this);
    return cq;
  }
  uint64_t Spurious() { return interpose::Decider()->Count(core::Point::kChaosCqEvent); }
};

// An armed CQ with nothing behind it may wake its waiter: the arm is
// consumed as a real event consumes it, the event is acked like any
// other, and the next wait waits for a real completion.
TEST_F(Chaos, SpuriousEventConsumesTheArmAndTheNextWaitIsReal) {
  interpose::ResetDecisionsForTest("chaos=cq_event:p=1");
  EXPECT_EQ(TryEvent(), nullptr) << "not armed: no event";
  ASSERT_EQ(ibv_req_notify_cq(cq_[0], 0), 0);
  ASSERT_EQ(TryEvent(), cq_[0]);
  EXPECT_EQ(Spurious(), 1u);
  EXPECT_TRUE(Poll(0, 1, 50).empty()) << "nothing behind the event";
  ibv_ack_cq_events(cq_[0], 1);
  // The arm was consumed: a completion now raises no event.
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 7, 0, 16), 0);
  EXPECT_EQ(TryEvent(), nullptr);
  ASSERT_EQ(Poll(0, 1).size(), 1u);
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  // Re-armed after that completion: one more spurious event, then none
  // until another completion came (the waiter would be woken forever).
  ASSERT_EQ(ibv_req_notify_cq(cq_[0], 0), 0);
  ASSERT_EQ(TryEvent(), cq_[0]);
  ibv_ack_cq_events(cq_[0], 1);
  ASSERT_EQ(ibv_req_notify_cq(cq_[0], 0), 0);
  EXPECT_EQ(TryEvent(), nullptr);
  EXPECT_EQ(Spurious(), 2u);
  // The real event still comes, for the real completion.
  ASSERT_EQ(PostRecv(1, 2, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 8, 0, 16), 0);
  ASSERT_EQ(TryEvent(), cq_[0]);
  ibv_ack_cq_events(cq_[0], 1);
  auto wcs = Poll(0, 1);
  ASSERT_EQ(wcs.size(), 1u);
  EXPECT_EQ(wcs[0].wr_id, 8u);
  EXPECT_EQ(Poll(1, 1).size(), 1u);
}

TEST_F(Chaos, NoSpuriousEventWithoutChaos) {
  interpose::ResetDecisionsForTest("chaos=");
  ASSERT_EQ(ibv_req_notify_cq(cq_[0], 0), 0);
  EXPECT_EQ(TryEvent(), nullptr);
  // p=0 asks but never fires.
  interpose::ResetDecisionsForTest("chaos=cq_event:p=0");
  EXPECT_EQ(TryEvent(), nullptr);
  EXPECT_EQ(Spurious(), 0u);
}

// The decision log says chaos= in its header and the spurious event as a
// decision; the log alone (schedule=) decides it again.
TEST_F(Chaos, DecisionLogReplaysTheSpuriousEvent) {
  char path[] = "/tmp/rdmasan-chaos-log-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  interpose::ResetDecisionsForTest(std::string("chaos=cq_event:nth=2:decision_log=") + path);
  ASSERT_EQ(ibv_req_notify_cq(cq_[1], 0), 0);
  EXPECT_EQ(TryEvent(), nullptr);  // hit 1
  ASSERT_EQ(TryEvent(), cq_[1]);   // hit 2
  ibv_ack_cq_events(cq_[1], 1);
  interpose::ResetDecisionsForTest("chaos=:decision_log=");  // closes nothing: the log is complete per line
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  EXPECT_NE(text.str().find("\n# chaos=cq_event:nth=2\n"), std::string::npos) << text.str();
  EXPECT_NE(text.str().find("chaos.cq_event obj="), std::string::npos) << text.str();
  EXPECT_NE(text.str().find(" hit=2 outcome=1"), std::string::npos) << text.str();
  // A completion on that CQ since its spurious event makes it eligible again.
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 7, 0, 16), 0);
  ASSERT_EQ(Poll(0, 1).size(), 1u);
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  interpose::ResetDecisionsForTest(std::string("schedule=") + path);
  ASSERT_TRUE(interpose::Decider()->replaying());
  ASSERT_EQ(ibv_req_notify_cq(cq_[1], 0), 0);
  EXPECT_EQ(TryEvent(), nullptr);
  ASSERT_EQ(TryEvent(), cq_[1]);
  ibv_ack_cq_events(cq_[1], 1);
  EXPECT_EQ(Spurious(), 1u);
  unlink(path);
}

// ibv_query_qp_data_in_order(3) answers 1 only where the data is
// guaranteed to be written in order: softnic's copies (memmove, whose
// stores are not ascending, process_vm_writev, the receiver's scatter)
// and its chaos points promise no order, so it answers 0 for every
// opcode and flag, with chaos or without (the truth, not a guess).
TEST_F(Chaos, QueryQpDataInOrderPromisesNothing) {
  constexpr uint32_t kReturnCaps = 1;
  auto natural = [](softnic::ChaosPoint, uint64_t, uint64_t, uint64_t, const char*, uint32_t) -> uint64_t {
    return 0;
  };
  for (uint32_t mask : {0u, softnic::ChaosBit(softnic::ChaosPoint::kPlace), ~0u}) {
    softnic::SetChaos(mask ? +natural : nullptr, mask);
    for (ibv_wr_opcode op : {IBV_WR_RDMA_WRITE, IBV_WR_RDMA_WRITE_WITH_IMM, IBV_WR_SEND, IBV_WR_SEND_WITH_IMM,
                             IBV_WR_RDMA_READ, IBV_WR_ATOMIC_FETCH_AND_ADD}) {
      EXPECT_EQ(ibv_query_qp_data_in_order(qp_[0], op, 0), 0) << op << " mask " << mask;
      EXPECT_EQ(ibv_query_qp_data_in_order(qp_[1], op, kReturnCaps), 0) << op << " mask " << mask;
    }
  }
  interpose::ResetDecisionsForTest("chaos=");
}

}  // namespace
}  // namespace rdmasan::testing
