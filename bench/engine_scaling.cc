// Events per second through the checkers engine from 1 and 2 threads, each
// thread posting and polling on its own QP: once with every QP on its own
// CQ (separate lock domains: the threads should not wait for each other)
// and once with all QPs on one shared CQ (one domain: they must take turns,
// as the CQ's books are shared).  Measured in one run; the engine alone, so
// softnic's own locking does not blur the picture.  Events are numbered
// (one shared counter, as in a traced run) only with ENGINE_SEQ=1.
//
// On Google Benchmark: each configuration is a registered benchmark (its
// threads started together by the library), run for a fixed number of
// pairs per thread in three rounds taken in turns; the table shows every
// round (events_per_s), the summary after it each configuration's best.
// Usage: engine_scaling [PAIRS] [--benchmark_...]
#include <benchmark/benchmark.h>
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "bench/best_of.h"
#include "checkers/engine.h"

namespace {

using rdmasan::checkers::Engine;
using rdmasan::core::Event;
using rdmasan::core::EventKind;
using rdmasan::core::ObjId;

void Feed(Engine& eng, Event e) {
  std::vector<rdmasan::core::Finding> out;
  eng.OnEvent(e, &out, nullptr);
}

struct World {
  std::unique_ptr<Engine> eng = std::make_unique<Engine>(/*assign_seq=*/getenv("ENGINE_SEQ") != nullptr);
  ObjId next = 1;
  std::vector<ObjId> qps;
  std::vector<uint32_t> qpns;
  std::vector<ObjId> cqs;
};

World Build(int nqps, bool shared_cq) {
  World w;
  Event e;
  e.kind = EventKind::kAllocPd;
  const ObjId pd = e.obj = w.next++;
  Feed(*w.eng, e);
  e = Event();
  e.kind = EventKind::kRegMr;
  e.obj = w.next++;
  e.parent = pd;
  e.addr = e.iova = 0x100000;
  e.length = 1 << 20;
  e.lkey = 0x11;
  e.access = IBV_ACCESS_LOCAL_WRITE;
  Feed(*w.eng, e);
  for (int i = 0; i < nqps; ++i) {
    if (i == 0 || !shared_cq) {
      e = Event();
      e.kind = EventKind::kCreateCq;
      e.obj = w.next++;
      e.cqe = 4096;
      Feed(*w.eng, e);
      w.cqs.push_back(e.obj);
    }
    e = Event();
    e.kind = EventKind::kCreateQp;
    e.obj = w.next++;
    e.parent = pd;
    e.send_cq = e.recv_cq = w.cqs.back();
    e.qp_type = IBV_QPT_RC;
    e.qp_num = 0x100 + i;
    e.caps = {128, 128, 1, 1, 0};
    Feed(*w.eng, e);
    w.qps.push_back(e.obj);
    w.qpns.push_back(e.qp_num);
    for (uint32_t s : {IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS}) {
      Event m;
      m.kind = EventKind::kModifyQp;
      m.obj = e.obj;
      m.attr_mask = IBV_QP_STATE;
      m.qp_state = s;
      Feed(*w.eng, m);
    }
  }
  return w;
}

// One thread's post+poll pair on QP i.
struct Pair {
  Event post, poll;
  std::vector<rdmasan::core::Finding> out;
};

Pair MakePair(const World& w, int i) {
  Pair p;
  p.post.kind = EventKind::kPostSend;
  p.post.obj = w.qps[i];
  p.post.stack = 1;
  rdmasan::core::SendWr wr;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.num_sge = 1;
  wr.sges.push_back({0x100000u + 64u * i, 8, 0x11, 0, 0});
  p.post.send_wrs.push_back(wr);
  p.poll.kind = EventKind::kPollCq;
  p.poll.obj = w.cqs[w.cqs.size() == 1 ? 0 : i];
  p.poll.count = 1;
  p.poll.wcs.push_back({0, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, w.qpns[i], 8, 0});
  return p;
}

// The world of the benchmark running now: built before its threads start.
std::unique_ptr<World> g_world;

void BuildWorld(const benchmark::State& state) {
  g_world = std::make_unique<World>(Build(state.threads(), /*shared_cq=*/state.range(0) != 0));
}
void DropWorld(const benchmark::State&) { g_world.reset(); }

// Each thread posts and polls on its own QP.
void BM_Engine(benchmark::State& state) {
  World& w = *g_world;
  Pair p = MakePair(w, state.thread_index());
  uint64_t k = 0;
  for (auto _ : state) {
    p.post.send_wrs[0].wr_id = k;
    p.poll.wcs[0].wr_id = k++;
    w.eng->OnEvent(p.post, &p.out, nullptr);
    w.eng->OnEvent(p.poll, &p.out, nullptr);
  }
  // Summed over the threads, per second of the run.
  state.counters["events_per_s"] = benchmark::Counter(2.0 * state.iterations(), benchmark::Counter::kIsRate);
}

struct Config {
  const char* id;
  int threads;
  bool shared_cq;
};
constexpr Config kConfigs[] = {
    {"1_thread", 1, false}, {"2_threads_cq_per_qp", 2, false}, {"2_threads_shared_cq", 2, true}};

void Register(const Config& c, int round, int pairs) {
  const std::string name = std::string("engine/") + c.id + "/round:" + std::to_string(round);
  benchmark::RegisterBenchmark(name.c_str(), BM_Engine)
      ->Arg(c.shared_cq)
      ->ArgName("shared_cq")
      ->Threads(c.threads)
      ->Iterations(pairs)
      ->UseRealTime()
      ->Setup(BuildWorld)
      ->Teardown(DropWorld);
}

// Millions of events per second.
double MEventsPerS(const benchmark::BenchmarkReporter::Run& run) {
  return run.counters.at("events_per_s") / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);  // takes the --benchmark_* flags
  const int pairs = argc > 1 ? atoi(argv[1]) : 1000000;
  const unsigned cores = std::thread::hardware_concurrency();
  // Best of 3 rounds per configuration, taken in turns.
  constexpr int kRounds = 3;
  for (int round = 0; round < kRounds; ++round)
    for (const Config& c : kConfigs) Register(c, round, pairs);
  rdmasan::bench::BestOfReporter best(MEventsPerS, /*higher_is_better=*/true);
  benchmark::RunSpecifiedBenchmarks(&best);
  const double one = best.Best("engine/1_thread"), own = best.Best("engine/2_threads_cq_per_qp"),
               shared = best.Best("engine/2_threads_shared_cq");
  printf("checkers engine, post+poll events, %d pairs per thread, best of %d (%u cores):\n", pairs, kRounds,
         cores);
  printf("  1 thread                          %6.2f M events/s\n", one);
  printf("  2 threads, a CQ per QP            %6.2f M events/s  (x%.2f)\n", own, own / one);
  printf("  2 threads, one CQ shared by both  %6.2f M events/s  (x%.2f)\n", shared, shared / one);
  benchmark::Shutdown();
  return 0;
}
