// Nanoseconds per post+poll pair (one 8-byte signaled RDMA WRITE, 1 SGE) on
// softnic in-process, in one run: no shim (the softnic ops called straight),
// pass-through (through the shim's data-path wrappers, checking off) and
// full checking (every call an Event through the checkers), and full
// checking with the fault and scheduling machinery on: "scheduling on"
// (a fault rule that never fires, faults=wc.error:p=0: every completion
// passes through the scheduler, nothing is injected) and "reorder=random"
// (completions merged and held back as the random strategy decides).
//
// Built twice: postpoll_bench, and postpoll_bench_bare over a copy of the
// shim with the off options' tests compiled out (interpose/off_options.h),
// which runs only the first three modes (bench/speed.sh's goal 6 compares
// full checking's cost in the two).
//
// On Google Benchmark: each mode is a registered benchmark, run for a fixed
// number of pairs in five rounds taken in turns; the table shows every round
// (with its per_pair time), and the summary after it each mode's best round
// and its cost over no shim.  Usage: postpoll_bench [PAIRS] [--benchmark_...]
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
#include "interpose/off_options.h"

namespace {

struct Setup {
  ibv_context* ctx;
  ibv_pd* pd;
  ibv_cq* cq;
  ibv_qp* qp[2];
  ibv_mr* mr;
  std::vector<uint8_t> buf = std::vector<uint8_t>(4096);
  ibv_sge sge;
  ibv_send_wr wr;  // one signaled 8-byte RDMA WRITE from buf to buf + 2048
};

bool Build(Setup* s) {
  int n;
  ibv_device** list = ibv_get_device_list(&n);
  if (!list || n < 1) return false;
  s->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!s->ctx) return false;
  s->pd = ibv_alloc_pd(s->ctx);
  s->cq = ibv_create_cq(s->ctx, 64, nullptr, nullptr, 0);
  s->mr = ibv_reg_mr(s->pd, s->buf.data(), s->buf.size(), IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  for (auto& q : s->qp) {
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = s->cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 32;
    a.cap.max_recv_wr = 1;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    q = ibv_create_qp(s->pd, &a);
    if (!q) return false;
  }
  for (int i = 0; i < 2; ++i) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_modify_qp(s->qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      return false;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_4096;
    a.dest_qp_num = s->qp[1 - i]->qp_num;
    a.ah_attr.port_num = 1;
    a.min_rnr_timer = 12;
    if (ibv_modify_qp(s->qp[i], &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      return false;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    if (ibv_modify_qp(s->qp[i], &a,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC))
      return false;
  }
  return true;
}

void PrepareWrite(Setup* s) {
  s->sge = {reinterpret_cast<uint64_t>(s->buf.data()), 8, s->mr->lkey};
  s->wr = {};
  s->wr.opcode = IBV_WR_RDMA_WRITE;
  s->wr.send_flags = IBV_SEND_SIGNALED;
  s->wr.sg_list = &s->sge;
  s->wr.num_sge = 1;
  s->wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(s->buf.data() + 2048);
  s->wr.wr.rdma.rkey = s->mr->rkey;
}

// One post+poll pair.
inline void PostPoll(Setup& s, uint64_t wr_id) {
  s.wr.wr_id = wr_id;
  ibv_send_wr* bad;
  if (ibv_post_send(s.qp[0], &s.wr, &bad)) abort();
  ibv_wc wc;
  while (ibv_poll_cq(s.cq, 1, &wc) == 0) {}
  if (wc.status != IBV_WC_SUCCESS) abort();
}

enum Mode : int64_t { kNoShim, kPassThrough, kFullChecking, kScheduling, kReorder };
constexpr const char* kModeNames[] = {"no shim", "pass-through", "full checking", "scheduling on",
                                      "reorder=random"};
constexpr const char* kModeIds[] = {"no_shim", "pass_through", "full_checking", "scheduling",
                                    "reorder_random"};

Setup* g_setup;  // built before the benchmarks run

// no shim: the softnic ops called straight (the context unwrapped);
// pass-through: the shim's wrappers with checking off; full checking.
void SetMode(Setup& s, Mode mode) {
  namespace ip = rdmasan::interpose;
  ip::ResetDecisionsForTest(mode == kScheduling ? "faults=wc.error:p=0"
                            : mode == kReorder  ? "reorder=random"
                                                : "faults=:reorder=off");
  if (mode == kNoShim) {
    ip::UnwrapContext(s.ctx);
    return;
  }
  ip::WrapContext(s.ctx);
  ip::SetChecking(mode >= kFullChecking);
}

void BM_PostPoll(benchmark::State& state, Mode mode) {
  Setup& s = *g_setup;
  SetMode(s, mode);
  uint64_t wr_id = 0;
  for (auto _ : state) PostPoll(s, wr_id++);
  state.counters["per_pair"] = benchmark::Counter(static_cast<double>(state.iterations()),
                                                  benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}

benchmark::internal::Benchmark* Register(Mode mode, int round, int iters) {
  std::string name = std::string("postpoll/") + kModeIds[mode];
  if (round >= 0) name += "/round:" + std::to_string(round);
  return benchmark::RegisterBenchmark(name.c_str(), BM_PostPoll, mode)
      ->Iterations(iters)
      ->UseRealTime()
      ->Unit(benchmark::kNanosecond);
}

double NsPerPair(const benchmark::BenchmarkReporter::Run& run) {
  return run.GetAdjustedRealTime() * 1e9 / benchmark::GetTimeUnitMultiplier(run.time_unit);
}

void PrintSummary(const rdmasan::bench::BestOfReporter& best, int rounds, int iters) {
  const double raw = best.Best("postpoll/no_shim"), pass = best.Best("postpoll/pass_through"),
               full = best.Best("postpoll/full_checking"), sched = best.Best("postpoll/scheduling"),
               reorder = best.Best("postpoll/reorder_random");
  printf("post+poll pair, softnic in-process, 1 SGE, best of %d rounds of %d:\n", rounds, iters);
  printf("  %-22s %8.1f ns\n", kModeNames[kNoShim], raw);
  printf("  %-22s %8.1f ns  (+%.1f ns)\n", kModeNames[kPassThrough], pass, pass - raw);
  printf("  %-22s %8.1f ns  (+%.1f ns)\n", kModeNames[kFullChecking], full, full - raw);
  if (!RDMASAN_OFF_OPTIONS_COMPILED_OUT) {
    printf("  %-22s %8.1f ns  (+%.1f ns over full checking)\n", kModeNames[kScheduling], sched, sched - full);
    printf("  %-22s %8.1f ns  (+%.1f ns over full checking)\n", kModeNames[kReorder], reorder,
           reorder - full);
  }
  printf("targets: pass-through < 10 ns, checking < 100 ns over no shim: %s, %s\n",
         pass - raw < 10 ? "PASS" : "MISS", full - raw < 100 ? "PASS" : "MISS");
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags
  const int iters = argc > 1 ? atoi(argv[1]) : 200000;
  // POSTPOLL_TRACE=PATH records the run (the cost of --trace in-process).
  std::string opts = "softnic=on:softnic_fabric=inproc";
  if (const char* t = getenv("POSTPOLL_TRACE")) opts += std::string(":trace=") + t;
  // POSTPOLL_OPTS=... adds options (e.g. buffer_check=off to price hashing).
  if (const char* o = getenv("POSTPOLL_OPTS")) opts += std::string(":") + o;
  setenv("RDMASAN_OPTIONS", opts.c_str(), 1);
  Setup s;
  if (!Build(&s)) {
    fprintf(stderr, "setup failed\n");
    return 1;
  }
  PrepareWrite(&s);
  g_setup = &s;
  // Warm up every path once (checking on), outside the measurements.
  SetMode(s, kFullChecking);
  for (int i = 0; i < iters / 10; ++i) PostPoll(s, i);
  rdmasan::bench::BestOfReporter best(NsPerPair, /*higher_is_better=*/false);
  if (getenv("POSTPOLL_PROFILE")) {  // full checking only, for a profiler
    Register(kFullChecking, -1, iters);
    benchmark::RunSpecifiedBenchmarks(&best);
    printf("full checking: %.1f ns per pair\n", best.Best("postpoll/full_checking"));
    return 0;
  }
  // The modes in turns, five rounds; each mode's best round counts.
  constexpr int kRounds = 5;
  for (int round = 0; round < kRounds; ++round)
    for (Mode mode : {kNoShim, kPassThrough, kFullChecking, kScheduling, kReorder})
      if (mode <= kFullChecking || !RDMASAN_OFF_OPTIONS_COMPILED_OUT) Register(mode, round, iters);
  benchmark::RunSpecifiedBenchmarks(&best);
  PrintSummary(best, kRounds, iters);
  benchmark::Shutdown();
  return 0;
}
