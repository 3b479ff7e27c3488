// The checking cost of a receive at depth: nanoseconds per post+poll pair
// (one receive posted, its completion polled) with 16 and with 4096
// receives outstanding, on a 4096-deep SRQ and on a 4096-deep RQ, softnic
// in-process, in one run.  The checking cost of a configuration is its
// full-checking time minus its no-shim time; the figure asked for is the
// ratio of that cost at depth 4096 to the cost at depth 16 (target: ≤ 1,
// retirement does not scan or shift the queue).
//
// Each pair also sends the message the receive takes: an 8-byte SEND from
// the peer QP, signaled one in 8 (its completion polled then), the same at
// every depth.  Every configuration has its own QPs (and SRQ), filled to
// its depth in its own mode, so the checkers' books always hold exactly
// the receives the device holds.
//
// On Google Benchmark, as bench/postpoll_bench.cc: each configuration a
// registered benchmark, a fixed number of pairs in five rounds taken in
// turns; the summary after the table takes each configuration's best round
// (by CPU time per pair).
// Usage: recv_depth_bench [PAIRS] [--benchmark_...]
#include <benchmark/benchmark.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>

#include <string>
#include <vector>

#include "bench/best_of.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"

namespace {

constexpr uint32_t kCapacity = 4096;  // of the SRQ and of the RQs
constexpr uint32_t kSignalEvery = 8;
// Two runs of the same code differ by a few percent: the ratio that still
// counts as "no more".
constexpr double kNoise = 1.05;

enum Kind : int { kSrq, kRq };
enum Mode : int { kNoShim, kFullChecking };
constexpr int kDepths[] = {16, 4096};

struct Shared {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(8192);
};

// One configuration's queues: qp[0] sends to qp[1], whose receives are on
// `srq` (kSrq) or its own RQ (kRq).
struct Config {
  Kind kind;
  int depth;
  Mode mode;
  ibv_cq* scq = nullptr;
  ibv_cq* rcq = nullptr;
  ibv_srq* srq = nullptr;
  ibv_qp* qp[2] = {};
  ibv_sge send_sge{}, recv_sge{};
  uint64_t next_recv = 0;  // wr_id of the next receive posted
  uint64_t next_recv_done = 0;
  uint64_t sends = 0;
  std::string name;
};

Shared g_shared;
std::vector<Config> g_configs;

bool Connect(ibv_qp* qp, uint32_t dest) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = dest;
  a.ah_attr.port_num = 1;
  a.min_rnr_timer = 12;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return false;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_MAX_QP_RD_ATOMIC) == 0;
}

bool BuildShared(Shared* s) {
  int n;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) return false;
  s->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!s->ctx) return false;
  s->pd = ibv_alloc_pd(s->ctx);
  s->mr = ibv_reg_mr(s->pd, s->buf.data(), s->buf.size(), IBV_ACCESS_LOCAL_WRITE);
  return s->pd && s->mr;
}

bool Build(const Shared& sh, Config* c) {
  c->scq = ibv_create_cq(sh.ctx, 64, nullptr, nullptr, 0);
  c->rcq = ibv_create_cq(sh.ctx, 2 * kCapacity, nullptr, nullptr, 0);
  if (!c->scq || !c->rcq) return false;
  if (c->kind == kSrq) {
    ibv_srq_init_attr a{};
    a.attr.max_wr = kCapacity;
    a.attr.max_sge = 1;
    c->srq = ibv_create_srq(sh.pd, &a);
    if (!c->srq) return false;
  }
  for (int i = 0; i < 2; ++i) {
    ibv_qp_init_attr a{};
    a.send_cq = c->scq;
    a.recv_cq = c->rcq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 32;
    a.cap.max_recv_wr = i == 1 && c->kind == kRq ? kCapacity : 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    if (i == 1) a.srq = c->srq;
    c->qp[i] = ibv_create_qp(sh.pd, &a);
    if (!c->qp[i]) return false;
  }
  if (!Connect(c->qp[0], c->qp[1]->qp_num) || !Connect(c->qp[1], c->qp[0]->qp_num)) return false;
  c->send_sge = {reinterpret_cast<uint64_t>(sh.buf.data()), 8, sh.mr->lkey};
  c->recv_sge = {reinterpret_cast<uint64_t>(sh.buf.data() + 4096), 64, sh.mr->lkey};
  return true;
}

void PostRecv(Config& c) {
  ibv_recv_wr wr{}, *bad;
  wr.wr_id = c.next_recv++;
  wr.sg_list = &c.recv_sge;
  wr.num_sge = 1;
  if (c.srq ? ibv_post_srq_recv(c.srq, &wr, &bad) : ibv_post_recv(c.qp[1], &wr, &bad)) abort();
}

uint64_t g_empty_polls = 0;  // polls that found nothing (each an event when checked)

void PollOne(ibv_cq* cq, ibv_wc* wc) {
  while (ibv_poll_cq(cq, 1, wc) == 0) ++g_empty_polls;
  if (wc->status != IBV_WC_SUCCESS) abort();
}

// One pair: a receive posted, the peer's SEND taking the oldest, its
// completion polled (and the SEND's, when signaled).
inline void PostPoll(Config& c) {
  PostRecv(c);
  ibv_send_wr wr{}, *bad;
  wr.wr_id = c.sends;
  wr.opcode = IBV_WR_SEND;
  wr.sg_list = &c.send_sge;
  wr.num_sge = 1;
  const bool signaled = ++c.sends % kSignalEvery == 0;
  if (signaled) wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(c.qp[0], &wr, &bad)) abort();
  ibv_wc wc;
  PollOne(c.rcq, &wc);
  if (wc.wr_id != c.next_recv_done++) abort();  // the queue completes oldest first
  if (signaled) PollOne(c.scq, &wc);
}

void SetMode(Mode mode) {
  namespace ip = rdmasan::interpose;
  ip::ResetDecisionsForTest("faults=:reorder=off");
  if (mode == kNoShim) {
    ip::UnwrapContext(g_shared.ctx);
    return;
  }
  ip::WrapContext(g_shared.ctx);
  ip::SetChecking(true);
}

void BM_RecvPair(benchmark::State& state, Config* c) {
  SetMode(c->mode);
  g_empty_polls = 0;
  for (auto _ : state) PostPoll(*c);
  state.counters["empty_polls"] =
      static_cast<double>(g_empty_polls) / static_cast<double>(state.iterations());
}

std::string ConfigName(Kind kind, int depth, Mode mode) {
  return std::string("recv/") + (kind == kSrq ? "srq" : "rq") + "/depth:" + std::to_string(depth) + "/" +
         (mode == kNoShim ? "no_shim" : "full_checking");
}

// CPU time, not wall time: on a shared machine the wall clock also counts
// the time the thread spent descheduled, which is not the code's (nothing
// here waits: softnic in-process completes a SEND within the post).
double NsPerPair(const benchmark::BenchmarkReporter::Run& run) {
  return run.GetAdjustedCPUTime() * 1e9 / benchmark::GetTimeUnitMultiplier(run.time_unit);
}

void PrintSummary(const rdmasan::bench::BestOfReporter& best, int rounds, int iters) {
  printf(
      "receive post+poll pair (8-byte SEND, 1 in %u signaled), softnic in-process, best of %d rounds of "
      "%d:\n",
      kSignalEvery, rounds, iters);
  printf("  %-10s %6s %10s %15s %15s\n", "queue", "depth", "no shim", "full checking", "checking cost");
  bool pass = true;
  for (Kind kind : {kSrq, kRq}) {
    double cost[2];
    for (int d = 0; d < 2; ++d) {
      const double raw = best.Best(ConfigName(kind, kDepths[d], kNoShim));
      const double full = best.Best(ConfigName(kind, kDepths[d], kFullChecking));
      cost[d] = full - raw;
      printf("  %-10s %6d %7.1f ns %12.1f ns %+12.1f ns\n", kind == kSrq ? "SRQ" : "RQ", kDepths[d], raw,
             full, cost[d]);
    }
    const double ratio = cost[1] / cost[0];
    pass &= ratio <= kNoise;
    printf("  %-10s checking cost at depth %d / at depth %d: %.2f\n", kind == kSrq ? "SRQ" : "RQ", kDepths[1],
           kDepths[0], ratio);
  }
  printf(
      "target: the cost at depth %d no more than at depth %d (ratio <= 1, %.2f allowed for run-to-run "
      "noise): %s\n",
      kDepths[1], kDepths[0], kNoise, pass ? "PASS" : "MISS");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags
  const int iters = argc > 1 ? atoi(argv[1]) : 100000;
  std::string opts = "softnic=on:softnic_fabric=inproc";
  if (const char* o = getenv("RECV_DEPTH_OPTS")) opts += std::string(":") + o;
  setenv("RDMASAN_OPTIONS", opts.c_str(), 1);
  if (!BuildShared(&g_shared)) {
    fprintf(stderr, "setup failed\n");
    return 1;
  }
  for (Kind kind : {kSrq, kRq})
    for (int depth : kDepths)
      for (Mode mode : {kNoShim, kFullChecking}) g_configs.push_back({kind, depth, mode});
  // Filled to depth - 1 in its own mode (each pair posts one first), then
  // every path warmed up once, outside the measurements.
  for (Config& c : g_configs) {
    SetMode(c.mode);
    if (!Build(g_shared, &c)) {
      fprintf(stderr, "setup failed\n");
      return 1;
    }
    for (int i = 0; i + 1 < c.depth; ++i) PostRecv(c);
    for (int i = 0; i < iters / 10; ++i) PostPoll(c);
    c.name = ConfigName(c.kind, c.depth, c.mode);
  }
  rdmasan::bench::BestOfReporter best(NsPerPair, /*higher_is_better=*/false);
  constexpr int kRounds = 5;
  for (int round = 0; round < kRounds; ++round)
    for (Config& c : g_configs) {
      const std::string name = c.name + "/round:" + std::to_string(round);
      benchmark::RegisterBenchmark(name.c_str(), BM_RecvPair, &c)
          ->Iterations(iters)
          ->UseRealTime()
          ->Unit(benchmark::kNanosecond);
    }
  benchmark::RunSpecifiedBenchmarks(&best);
  PrintSummary(best, kRounds, iters);
  benchmark::Shutdown();
  return 0;
}
