// Events per second through the checkers engine from 1 and 2 threads, each
// thread posting and polling on its own QP: once with every QP on its own
// CQ (separate lock domains: the threads should not wait for each other)
// and once with all QPs on one shared CQ (one domain: they must take turns,
// as the CQ's books are shared).  Measured in one run; the engine alone, so
// softnic's own locking does not blur the picture.  Events are numbered
// (one shared counter, as in a traced run) only with ENGINE_SEQ=1.
#include <infiniband/verbs.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "checkers/engine.h"

namespace {

using rdmasan::checkers::Engine;
using rdmasan::core::Event;
using rdmasan::core::EventKind;
using rdmasan::core::ObjId;

double Now() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

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

// One thread's post+poll pairs on QP i.
void Loop(World& w, int i, int pairs) {
  const ObjId cq = w.cqs[w.cqs.size() == 1 ? 0 : i];
  Event post;
  post.kind = EventKind::kPostSend;
  post.obj = w.qps[i];
  post.stack = 1;
  rdmasan::core::SendWr wr;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.num_sge = 1;
  wr.sges.push_back({0x100000u + 64u * i, 8, 0x11, 0, 0});
  post.send_wrs.push_back(wr);
  Event poll;
  poll.kind = EventKind::kPollCq;
  poll.obj = cq;
  poll.count = 1;
  poll.wcs.push_back({0, IBV_WC_SUCCESS, IBV_WC_RDMA_WRITE, w.qpns[i], 8, 0});
  std::vector<rdmasan::core::Finding> out;
  for (int k = 0; k < pairs; ++k) {
    post.send_wrs[0].wr_id = k;
    poll.wcs[0].wr_id = k;
    w.eng->OnEvent(post, &out, nullptr);
    w.eng->OnEvent(poll, &out, nullptr);
  }
}

// Millions of events per second with `threads` threads.
double Rate(int threads, bool shared_cq, int pairs) {
  World w = Build(threads, shared_cq);
  std::atomic<int> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::thread> ts;
  for (int i = 0; i < threads; ++i)
    ts.emplace_back([&, i] {
      ready.fetch_add(1);
      while (!go.load()) {
      }
      Loop(w, i, pairs);
    });
  while (ready.load() != threads) {
  }
  const double t0 = Now();
  go = true;
  for (auto& t : ts) t.join();
  return 2.0 * pairs * threads / (Now() - t0) / 1e6;
}

}  // namespace

int main(int argc, char** argv) {
  const int pairs = argc > 1 ? atoi(argv[1]) : 1000000;
  const unsigned cores = std::thread::hardware_concurrency();
  // Best of 3 rounds per configuration, taken in turns.
  double one = 0, own = 0, shared = 0;
  for (int round = 0; round < 3; ++round) {
    one = std::max(one, Rate(1, false, pairs));
    own = std::max(own, Rate(2, false, pairs));
    shared = std::max(shared, Rate(2, true, pairs));
  }
  printf("checkers engine, post+poll events, %d pairs per thread, best of 3 (%u cores):\n", pairs, cores);
  printf("  1 thread                          %6.2f M events/s\n", one);
  printf("  2 threads, a CQ per QP            %6.2f M events/s  (x%.2f)\n", own, own / one);
  printf("  2 threads, one CQ shared by both  %6.2f M events/s  (x%.2f)\n", shared, shared / one);
  return 0;
}
