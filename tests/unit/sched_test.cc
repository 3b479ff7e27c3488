// The completion scheduler (interpose/sched.h): legal orders only, bounded
// delay, release after arming, PCT picks, replay of a decision log, and the
// NIC chain after an injected error completion — over a stub real provider
// (scripted completions) and over softnic.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/decision.h"
#include "core/options.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/sched.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::interpose {
namespace {

// Tests change the process's options in place (nothing else reads them
// concurrently), then rebuild the decider and the scheduler's view of it.
void Configure(const std::string& reorder, int seed, const std::string& faults = "",
               const std::string& schedule = "", const std::string& log = "", int delay = 4, int depth = 3,
               int steps = 1000) {
  auto& o = const_cast<core::Options&>(core::GlobalOptions());
  o.reorder = reorder;
  o.seed = seed;
  o.faults = faults;
  o.schedule = schedule;
  o.decision_log = log;
  o.reorder_delay = delay;
  o.pct_depth = depth;
  o.pct_steps = steps;
  ResetDecisionsForTest();
  sched::ResetForTest();
}

// ------------------------------------------------------------- stub NIC --
// A provider whose CQ hands out scripted completions: `ready` are those the
// "NIC" produced so far.
struct Stub {
  std::deque<ibv_wc> ready;
  int polls = 0;
  int notifies = 0;
} g_stub;

int StubPoll(ibv_cq*, int n, ibv_wc* wc) {
  ++g_stub.polls;
  int got = 0;
  while (got < n && !g_stub.ready.empty()) {
    wc[got++] = g_stub.ready.front();
    g_stub.ready.pop_front();
  }
  return got;
}
int StubNotify(ibv_cq*, int) { return ++g_stub.notifies, 0; }
int StubPostSend(ibv_qp*, ibv_send_wr*, ibv_send_wr**) { return 0; }
int StubPostRecv(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) { return 0; }

class StubNic : public ::testing::Test {
 public:
  void SetUp() override {
    g_stub = Stub();
    v_.sz = sizeof(v_);
    ctx_ = &v_.context;
    ctx_->abi_compat = __VERBS_ABI_IS_EXTENDED;
    ctx_->ops.post_send = StubPostSend;
    ctx_->ops.post_recv = StubPostRecv;
    ctx_->ops.poll_cq = StubPoll;
    ctx_->ops.req_notify_cq = StubNotify;
    cq_.context = ctx_;
    WrapContext(ctx_);
  }
  void TearDown() override {
    sched::ForgetCq(&cq_);
    for (auto& q : qp_) ForgetQpNum(&q);
    UnwrapContext(ctx_);
  }
  // Call after Configure: the QPs are noted for the decider in force.
  void NoteQps() {
    for (int i = 0; i < 2; ++i) {
      qp_[i].context = ctx_;
      qp_[i].qp_num = 10 + i;
      qp_[i].qp_type = IBV_QPT_RC;
      qp_[i].send_cq = qp_[i].recv_cq = &cq_;
      NoteQp(&qp_[i], nullptr);
    }
  }
  static ibv_wc Wc(uint32_t qp_num, bool recv, uint64_t wr_id, ibv_wc_status status = IBV_WC_SUCCESS) {
    ibv_wc w{};
    w.wr_id = wr_id;
    w.status = status;
    w.opcode = recv ? IBV_WC_RECV : IBV_WC_SEND;
    w.qp_num = qp_num;
    w.byte_len = 8;
    return w;
  }
  int PollCq(int n, ibv_wc* wc) { return ctx_->ops.poll_cq(&cq_, n, wc); }

  verbs_context v_{};
  ibv_context* ctx_ = nullptr;
  ibv_cq cq_{};
  ibv_qp qp_[2]{};
};

// Streams 0..3: QP 10 send, QP 10 recv, QP 11 send, QP 11 recv; wr_id =
// stream << 32 | index.
uint64_t StreamOf(const ibv_wc& w) { return w.wr_id >> 32; }

// The bytes of an error completion's opcode: poison is no ibv_wc_opcode,
// so the enum itself may not be loaded (UBSan).
uint32_t OpcodeBits(const ibv_wc& w) {
  uint32_t v;
  std::memcpy(&v, &w.opcode, sizeof v);
  return v;
}

struct RunResult {
  std::vector<uint64_t> order;  // wr_ids as returned
  int max_wait = 0;             // most polls between production and return
  bool legal = true;
  std::string why;
};

// Produces `per_stream` completions of each of 4 streams in a random
// interleaving (drawn from `script_seed`, independent of the schedule),
// a few per poll, and polls with n in 1..8 (or `fixed_n`) until all are
// back.  With `error_at` >= 0, the error_at-th completion produced of QP
// 11 is a WR_FLUSH_ERR (a barrier).
RunResult Drive(StubNic* t, uint32_t script_seed, int per_stream, int fixed_n = 0, int error_at = -1) {
  std::mt19937 rng(script_seed);
  std::vector<int> next(4, 0);
  std::vector<ibv_wc> produced;
  std::map<uint64_t, int> produced_at;
  int total = 4 * per_stream, made = 0, qp11 = 0;
  RunResult r;
  std::set<uint64_t> seen;
  for (int poll = 0; poll < 100000 && static_cast<int>(r.order.size()) < total; ++poll) {
    for (int k = rng() % 4; k > 0 && made < total; --k) {
      int s;
      do s = rng() % 4;
      while (next[s] >= per_stream);
      ibv_wc w = StubNic::Wc(10 + s / 2, s % 2, (uint64_t(s) << 32) | next[s]++);
      if (s >= 2 && qp11++ == error_at) w.status = IBV_WC_WR_FLUSH_ERR, w.opcode = IBV_WC_SEND;
      g_stub.ready.push_back(w);
      produced.push_back(w);
      produced_at[w.wr_id] = poll;
      ++made;
    }
    ibv_wc wc[64];  // room for the largest fixed_n
    const int n = fixed_n ? fixed_n : 1 + rng() % 8;
    const int got = t->PollCq(n, wc);
    if (got < 0 || got > n) {
      r.legal = false;
      r.why = "bad return";
      return r;
    }
    for (int i = 0; i < got; ++i) {
      if (!seen.insert(wc[i].wr_id).second) {
        r.legal = false;
        r.why = "duplicate";
      }
      r.order.push_back(wc[i].wr_id);
      r.max_wait = std::max(r.max_wait, poll - produced_at[wc[i].wr_id]);
    }
  }
  if (static_cast<int>(r.order.size()) != total) {
    r.legal = false;
    r.why = "lost completions";
  }
  // Per-stream FIFO; nothing of QP 11 crosses its error completion.
  std::map<uint64_t, int64_t> last;
  for (uint64_t id : r.order) {
    auto it = last.find(id >> 32);
    if (it != last.end() && static_cast<int64_t>(id & 0xffffffff) <= it->second) {
      r.legal = false;
      r.why = "stream order";
    }
    last[id >> 32] = id & 0xffffffff;
  }
  if (error_at >= 0) {
    std::map<uint64_t, size_t> pos;
    for (size_t i = 0; i < r.order.size(); ++i) pos[r.order[i]] = i;
    size_t err_pos = 0, err_prod = 0;
    for (size_t i = 0; i < produced.size(); ++i)
      if (produced[i].status != IBV_WC_SUCCESS) err_pos = pos[produced[i].wr_id], err_prod = i;
    for (size_t i = 0; i < produced.size(); ++i) {
      if (produced[i].qp_num != 11 || i == err_prod) continue;
      if ((i < err_prod) != (pos[produced[i].wr_id] < err_pos)) {
        r.legal = false;
        r.why = "crossed the error barrier";
      }
    }
  }
  return r;
}

TEST_F(StubNic, OffIsPassThrough) {
  Configure("off", 0);
  EXPECT_FALSE(sched::On());
  NoteQps();
  g_stub.ready.push_back(Wc(10, false, 1));
  ibv_wc wc[4];
  EXPECT_EQ(PollCq(4, wc), 1);
  EXPECT_EQ(sched::BufferedForTest(&cq_), 0);
}

TEST_F(StubNic, RandomSchedulesKeepEveryQueueFifoAndLoseNothing) {
  int reordered = 0, held = 0;
  for (int seed = 1; seed <= 1500; ++seed) {
    Configure("random", seed);
    ASSERT_TRUE(sched::On());
    NoteQps();
    RunResult r = Drive(this, seed * 7 + 1, 12, 0, seed % 3 == 0 ? 5 : -1);
    ASSERT_TRUE(r.legal) << "seed " << seed << ": " << r.why;
    reordered += Decider()->Count(core::Point::kSchedPick) > 0;
    held += Decider()->Count(core::Point::kSchedHold) > 0;
    sched::ForgetCq(&cq_);
  }
  // The schedules differ from the natural order (the test can fail).
  EXPECT_GT(reordered, 1000);
  EXPECT_GT(held, 1000);
}

TEST_F(StubNic, HoldIsBoundedByReorderDelay) {
  for (int delay : {0, 1, 4, 9}) {
    for (int seed = 1; seed <= 200; ++seed) {
      Configure("random", seed, "", "", "", delay);
      NoteQps();
      // n large enough that forced completions are never left for lack of room.
      RunResult r = Drive(this, seed, 10, 64);
      ASSERT_TRUE(r.legal) << r.why;
      ASSERT_LE(r.max_wait, delay) << "seed " << seed << " delay " << delay;
      sched::ForgetCq(&cq_);
    }
  }
}

TEST_F(StubNic, ArmingReleasesEverythingHeld) {
  int checked = 0;
  for (int seed = 1; seed <= 300; ++seed) {
    Configure("random", seed, "", "", "", 1000);
    NoteQps();
    for (int i = 0; i < 6; ++i)
      g_stub.ready.push_back(Wc(10 + i % 2, i % 3 == 0, (uint64_t(i % 4) << 32) | i));
    ibv_wc wc[64];
    int got = PollCq(64, wc);
    const int held = sched::BufferedForTest(&cq_);
    ASSERT_EQ(got + held, 6);
    if (held > 0) {
      ++checked;
      ASSERT_EQ(ibv_req_notify_cq(&cq_, 0), 0);
      EXPECT_EQ(PollCq(64, wc), held) << "seed " << seed;
      EXPECT_EQ(sched::BufferedForTest(&cq_), 0);
    }
    sched::ForgetCq(&cq_);
  }
  EXPECT_GT(checked, 10);
}

TEST_F(StubNic, PctReleasesTheHighestPriorityStream) {
  // Depth 1: no change points, so with everything buffered at once each
  // stream drains before the next, in priority order.
  std::set<uint64_t> firsts;
  for (int seed = 1; seed <= 100; ++seed) {
    Configure("pct", seed, "", "", "", 1000, 1);
    NoteQps();
    for (int i = 0; i < 4; ++i)
      for (int s = 0; s < 4; ++s) g_stub.ready.push_back(Wc(10 + s / 2, s % 2, (uint64_t(s) << 32) | i));
    std::vector<uint64_t> order;
    ibv_wc wc[1];
    while (order.size() < 16) {
      ASSERT_EQ(PollCq(1, wc), 1);
      order.push_back(wc[0].wr_id);
    }
    for (size_t i = 0; i < 16; ++i)
      ASSERT_EQ(StreamOf({.wr_id = order[i]}), StreamOf({.wr_id = order[i / 4 * 4]}));
    firsts.insert(order[0] >> 32);
    sched::ForgetCq(&cq_);
  }
  EXPECT_EQ(firsts.size(), 4u);  // every stream is first under some seed
}

TEST_F(StubNic, PctChangePointLowersTheRunningStream) {
  // Depth 2 over 4 steps: the one change point lands on a step in 1..4,
  // after which the stream that was running yields to the others.
  int switched = 0;
  for (int seed = 1; seed <= 100; ++seed) {
    Configure("pct", seed, "", "", "", 1000, 2, 4);
    NoteQps();
    for (int i = 0; i < 4; ++i)
      for (int s = 0; s < 2; ++s) g_stub.ready.push_back(Wc(10, s, (uint64_t(s) << 32) | i));
    std::vector<uint64_t> streams;
    ibv_wc wc[1];
    while (streams.size() < 8) {
      ASSERT_EQ(PollCq(1, wc), 1);
      streams.push_back(wc[0].wr_id >> 32);
    }
    // The first stream runs until the change point, then the other runs out.
    size_t k = 0;
    while (k < 8 && streams[k] == streams[0]) ++k;
    switched += k < 4;
    sched::ForgetCq(&cq_);
  }
  EXPECT_GT(switched, 10);
}

// One completion in flight at a time, polled until it is back (the common
// latency-bound program): each comes back after exactly the polls its
// sched.hold drew (at most reorder_delay), or at the first poll after the
// CQ was armed; nothing stays buffered.
TEST_F(StubNic, ALoneCompletionIsHeldForTheDrawnPolls) {
  char path[] = "/tmp/rdmasan-sched-lone-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  int held = 0;
  for (int seed = 1; seed <= 40; ++seed) {
    const int delay = 1 + seed % 5;
    Configure("random", seed, "", "", path, delay);
    NoteQps();
    constexpr int kCompletions = 30;
    int waited[kCompletions];
    bool armed[kCompletions];
    for (int i = 0; i < kCompletions; ++i) {
      g_stub.ready.push_back(Wc(10 + i % 2, i % 3 == 0, i));
      ibv_wc wc[4];
      armed[i] = i % 7 == 3;
      waited[i] = 0;
      int got;
      while ((got = PollCq(1 + i % 4, wc)) == 0) {
        ++waited[i];
        if (armed[i]) {
          ASSERT_EQ(ibv_req_notify_cq(&cq_, 0), 0);
        }
        ASSERT_LE(waited[i], delay) << "seed " << seed << " completion " << i;
      }
      ASSERT_EQ(got, 1);
      ASSERT_EQ(wc[0].wr_id, static_cast<uint64_t>(i));
      ASSERT_EQ(sched::BufferedForTest(&cq_), 0);
    }
    sched::ForgetCq(&cq_);
    // The log names each non-zero sched.hold: hit i + 1 is completion i's.
    std::FILE* f = std::fopen(path, "r");
    ASSERT_NE(f, nullptr);
    std::string text;
    char buf[4096];
    for (size_t k; (k = std::fread(buf, 1, sizeof buf, f)) > 0;) text.append(buf, k);
    std::fclose(f);
    auto log = core::ParseDecisionLog(text);
    ASSERT_TRUE(log.ok()) << log.status();
    std::map<uint64_t, uint64_t> hold;  // hit -> polls
    for (const auto& d : log->decisions)
      if (d.key.point == core::Point::kSchedHold) hold[d.key.hit] = d.outcome;
    for (int i = 0; i < kCompletions; ++i) {
      const auto it = hold.find(i + 1);
      const int drawn = it == hold.end() ? 0 : static_cast<int>(std::min<uint64_t>(it->second, delay));
      EXPECT_EQ(waited[i], armed[i] ? std::min(drawn, 1) : drawn) << "seed " << seed << " completion " << i;
      held += drawn > 0;
    }
  }
  EXPECT_GT(held, 100);  // the holds were drawn (the test can fail)
  unlink(path);
}

TEST_F(StubNic, ADecisionLogReplaysTheSameOrder) {
  char path[] = "/tmp/rdmasan-sched-test-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  for (int seed : {3, 17, 42}) {
    Configure("random", seed, "", "", path);
    NoteQps();
    RunResult a = Drive(this, 99, 10);
    sched::ForgetCq(&cq_);
    ASSERT_GT(Decider()->Count(core::Point::kSchedPick), 0u);
    Configure("off", 0, "", path);
    ASSERT_TRUE(Decider() && Decider()->replaying());
    NoteQps();
    RunResult b = Drive(this, 99, 10);
    sched::ForgetCq(&cq_);
    EXPECT_EQ(a.order, b.order) << "seed " << seed;
  }
  unlink(path);
}

TEST_F(StubNic, TheSameSeedGivesTheSameOrderAndDecisions) {
  for (const char* mode : {"random", "pct"}) {
    for (int seed = 1; seed <= 100; ++seed) {
      std::vector<uint64_t> orders[2];
      uint64_t picks[2], holds[2];
      for (int run = 0; run < 2; ++run) {
        Configure(mode, seed);
        NoteQps();
        orders[run] = Drive(this, 1000 + seed, 8).order;
        picks[run] = Decider()->Count(core::Point::kSchedPick);
        holds[run] = Decider()->Count(core::Point::kSchedHold);
        sched::ForgetCq(&cq_);
      }
      ASSERT_EQ(orders[0], orders[1]) << mode << " seed " << seed;
      ASSERT_EQ(picks[0], picks[1]);
      ASSERT_EQ(holds[0], holds[1]);
    }
  }
}

TEST_F(StubNic, WcErrorFailsTheQueueAndFlushesItsLaterCompletions) {
  Configure("off", 1, "wc.error:nth=2:status=retry-exc:qp=10");
  ASSERT_TRUE(sched::On());
  NoteQps();
  // The NIC completed 4 sends of QP 10 and one of QP 11 before the poll.
  for (int i = 0; i < 4; ++i) g_stub.ready.push_back(Wc(10, false, i));
  g_stub.ready.push_back(Wc(10, true, 100));  // its receive side: already generated, stays
  g_stub.ready.push_back(Wc(11, false, 200));
  ibv_wc wc[16];
  ASSERT_EQ(PollCq(16, wc), 6);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[1].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(wc[1].wr_id, 1u);
  EXPECT_EQ(wc[1].qp_num, 10u);
  EXPECT_EQ(wc[1].byte_len, kPoison32);
  EXPECT_EQ(OpcodeBits(wc[1]), kPoison32);
  for (int i = 2; i < 4; ++i) {
    EXPECT_EQ(wc[i].status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(wc[i].wr_id, static_cast<uint64_t>(i));
    EXPECT_EQ(wc[i].byte_len, kPoison32);
  }
  EXPECT_EQ(wc[4].status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc[4].wr_id, 100u);
  EXPECT_EQ(wc[5].status, IBV_WC_SUCCESS);
  EXPECT_EQ(Decider()->Count(core::Point::kWcError), 1u);
}

// ----------------------------------------------------------- on softnic --
class SchedSoftnic : public testing::SoftnicPair {
 protected:
  void SetUp() override {}  // each test configures first, then builds the pair
  void Build(const testing::QpOptions& o = {}) { SetUpWith(o); }
  void TearDown() override {
    if (ctx_) SoftnicPair::TearDown();
    Configure("off", 0);
  }
  void PostRecvs(int side, int n, uint64_t base) {
    for (int i = 0; i < n; ++i) ASSERT_EQ(PostRecv(side, base + i, 1024 + 64 * i, 64), 0);
  }
};

TEST_F(SchedSoftnic, RandomOrderIsLegalOnSoftnic) {
  for (int seed = 1; seed <= 40; ++seed) {
    Configure("random", seed);
    Build();
    PostRecvs(1, 8, 0x100);
    PostRecvs(0, 8, 0x200);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(Post(0, IBV_WR_SEND, 0x300 + i, 64 * i, 16), 0);
    for (int i = 0; i < 8; ++i) ASSERT_EQ(Post(1, IBV_WR_SEND, 0x400 + i, 64 * i, 16), 0);
    auto a = Poll(0, 16), b = Poll(1, 16);
    ASSERT_EQ(a.size(), 16u);
    ASSERT_EQ(b.size(), 16u);
    for (auto* v : {&a, &b}) {
      std::map<uint64_t, uint64_t> last;
      for (auto& w : *v) {
        EXPECT_EQ(w.status, IBV_WC_SUCCESS);
        const uint64_t stream = w.wr_id & ~0xffull;
        if (last.count(stream)) {
          EXPECT_GT(w.wr_id, last[stream]);
        }
        last[stream] = w.wr_id;
      }
    }
    SoftnicPair::TearDown();
    ctx_ = nullptr;
    for (auto& q : qp_) q = nullptr;
    for (auto& c : cq_) c = nullptr;
    for (auto& m : mr_) m = nullptr;
    pd_ = nullptr;
    channel_ = nullptr;
  }
}

TEST_F(SchedSoftnic, WcErrorNicChain) {
  Configure("off", 1, "wc.error:nth=1:status=retry-exc");
  Build();
  PostRecvs(1, 8, 0x100);
  PostRecvs(0, 3, 0x200);  // outstanding on the failing QP's receive queue
  ASSERT_EQ(Post(0, IBV_WR_SEND, 0x300, 0, 16), 0);
  auto got = Poll(0, 4);
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(got[0].wr_id, 0x300u);
  EXPECT_EQ(got[0].status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_EQ(State(0), IBV_QPS_ERR);
  // The receive queue's outstanding WRs flush in post order; every field
  // the man page leaves undefined on an error completion is poison.
  for (int i = 0; i < 4; ++i) {
    if (i > 0) {
      EXPECT_EQ(got[i].wr_id, 0x200u + i - 1);
      EXPECT_EQ(got[i].status, IBV_WC_WR_FLUSH_ERR);
    }
    EXPECT_EQ(got[i].qp_num, qp_[0]->qp_num);
    EXPECT_EQ(got[i].byte_len, kPoison32);
    EXPECT_EQ(OpcodeBits(got[i]), kPoison32);
    EXPECT_EQ(got[i].src_qp, kPoison32);
  }
  // Posts to the QP in ERR complete with WR_FLUSH_ERR in post order, the
  // unsignaled ones included; so do receives.
  for (int i = 1; i <= 4; ++i)
    ASSERT_EQ(Post(0, IBV_WR_SEND, 0x300 + i, 64 * i, 16, i % 2 ? 0 : IBV_SEND_SIGNALED), 0);
  PostRecvs(0, 2, 0x210);
  auto late = Poll(0, 6);
  ASSERT_EQ(late.size(), 6u);
  std::vector<uint64_t> sends, recvs;
  for (auto& w : late) {
    EXPECT_EQ(w.status, IBV_WC_WR_FLUSH_ERR);
    EXPECT_EQ(w.byte_len, kPoison32);
    (w.wr_id >= 0x300 ? sends : recvs).push_back(w.wr_id);
  }
  EXPECT_EQ(sends, (std::vector<uint64_t>{0x301, 0x302, 0x303, 0x304}));
  EXPECT_EQ(recvs, (std::vector<uint64_t>{0x210, 0x211}));
  EXPECT_TRUE(Poll(0, 1, 50).empty());
}

TEST_F(SchedSoftnic, WcErrorOnASrqQpLeavesTheSrqAndRaisesLastWqe) {
  Configure("off", 1, "wc.error:nth=1:status=rem-op");
  Build();
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 16;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq_[0];
  a.srq = srq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 8;
  a.cap.max_send_sge = 1;
  ibv_qp* sq = ibv_create_qp(pd_, &a);
  ASSERT_NE(sq, nullptr);
  // Connect the SRQ QP to side 1's QP in place of side 0's.
  ASSERT_EQ(Connect(sq, qp_[1]->qp_num), 0);
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(qp_[1], sq->qp_num), 0);
  for (int i = 0; i < 3; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data() + 2048 + 64 * i), 64, mr_[0]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 0x500 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  PostRecvs(1, 4, 0x100);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 16, mr_[0]->lkey};
  for (int i = 0; i < 2; ++i) {
    ibv_send_wr wr{};
    wr.wr_id = 0x600 + i;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_send_wr* bad;
    ASSERT_EQ(ibv_post_send(sq, &wr, &bad), 0);
  }
  auto got = Poll(0, 2);
  ASSERT_EQ(got.size(), 2u);
  EXPECT_EQ(got[0].wr_id, 0x600u);
  EXPECT_EQ(got[0].status, IBV_WC_REM_OP_ERR);
  EXPECT_EQ(got[1].status, IBV_WC_WR_FLUSH_ERR);
  // The SRQ's receives are not flushed.
  EXPECT_TRUE(Poll(0, 1, 100).empty());
  // IBV_EVENT_QP_LAST_WQE_REACHED on the context's async fd.
  const int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  bool last_wqe = false;
  for (int tries = 0; tries < 200 && !last_wqe; ++tries) {
    ibv_async_event ev;
    if (ibv_get_async_event(ctx_, &ev) == 0) {
      last_wqe |= ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == sq;
      ibv_ack_async_event(&ev);
    } else {
      usleep(5000);
    }
  }
  EXPECT_TRUE(last_wqe);
  EXPECT_EQ(ibv_destroy_qp(sq), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

TEST_F(SchedSoftnic, CqExServesTheScheduledCompletions) {
  for (int seed = 1; seed <= 20; ++seed) {
    Configure("random", seed);
    Build();
    ibv_cq_init_attr_ex ca{};
    ca.cqe = 64;
    ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN;
    ibv_cq_ex* cx = ibv_create_cq_ex(ctx_, &ca);
    ASSERT_NE(cx, nullptr);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(cx);
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* q = ibv_create_qp(pd_, &a);
    ASSERT_NE(q, nullptr);
    ASSERT_EQ(Connect(q, qp_[1]->qp_num), 0);
    ibv_qp_attr reset{};
    reset.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp_[1], &reset, IBV_QP_STATE), 0);
    ASSERT_EQ(Connect(qp_[1], q->qp_num), 0);
    for (int i = 0; i < 6; ++i) {
      ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data() + 4096 + 64 * i), 64, mr_[0]->lkey};
      ibv_recv_wr wr{};
      wr.wr_id = 0x200 + i;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_recv_wr* bad;
      ASSERT_EQ(ibv_post_recv(q, &wr, &bad), 0);
    }
    PostRecvs(1, 6, 0x100);
    for (int i = 0; i < 6; ++i) {
      ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data() + 64 * i), static_cast<uint32_t>(8 + i),
                  mr_[0]->lkey};
      ibv_send_wr wr{};
      wr.wr_id = 0x300 + i;
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      ibv_send_wr* bad;
      ASSERT_EQ(ibv_post_send(q, &wr, &bad), 0);
      ASSERT_EQ(Post(1, IBV_WR_SEND, 0x400 + i, 0, static_cast<uint32_t>(20 + i)), 0);
    }
    std::vector<std::pair<uint64_t, uint32_t>> seen;
    for (int spins = 0; spins < 200000 && seen.size() < 12; ++spins) {
      ibv_poll_cq_attr pa{};
      if (ibv_start_poll(cx, &pa) != 0) continue;
      do {
        ASSERT_EQ(cx->status, IBV_WC_SUCCESS);
        const bool recv = ibv_wc_read_opcode(cx) & IBV_WC_RECV;
        EXPECT_EQ(recv, cx->wr_id < 0x300);
        EXPECT_EQ(ibv_wc_read_qp_num(cx), q->qp_num);
        seen.emplace_back(cx->wr_id, ibv_wc_read_byte_len(cx));
      } while (ibv_next_poll(cx) == 0);
      ibv_end_poll(cx);
    }
    ASSERT_EQ(seen.size(), 12u);
    uint64_t last_s = 0, last_r = 0;
    for (auto& [id, len] : seen) {
      uint64_t& last = id >= 0x300 ? last_s : last_r;
      EXPECT_GT(id, last);
      last = id;
      if (id < 0x300) {
        EXPECT_EQ(len, 20 + (id - 0x200));  // the receive byte_len, read at pull time
      }
    }
    EXPECT_EQ(ibv_destroy_qp(q), 0);
    EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cx)), 0);
    SoftnicPair::TearDown();
    ctx_ = nullptr;
    for (auto& x : qp_) x = nullptr;
    for (auto& c : cq_) c = nullptr;
    for (auto& m : mr_) m = nullptr;
    pd_ = nullptr;
    channel_ = nullptr;
  }
}

}  // namespace
}  // namespace rdmasan::interpose

const char* const kRdmasanTestFabric = "inproc";
