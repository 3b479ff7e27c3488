#include "interpose/hooks.h"
#include "interpose/interpose.h"

#include "interpose/ptr_table.h"

#include <signal.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <sys/syscall.h>
#include <unistd.h>

#include <errno.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "absl/strings/str_cat.h"
#include "checkers/engine.h"
#include "core/biased_lock.h"
#include "core/options.h"
#include "core/report.h"
#include "traces/trace.h"

namespace rdmasan::interpose {
namespace {

// Object pointer -> id, read on every data-path call without a lock.
class Registry {
 public:
  core::ObjId Assign(const void* obj) {
    core::ObjId id = next_.fetch_add(1, std::memory_order_relaxed);
    return table_.Put(obj, id) ? id : 0;  // full: the object goes untracked
  }
  core::ObjId Find(const void* obj) const {
    // Each thread remembers the last few objects it named (a data path
    // names the same QP and CQ over and over), good until any object is
    // forgotten: an address may then be reused by another object.
    Cache& c = t_cache;
    const uint64_t gen = forgotten_.load(std::memory_order_acquire);
    if (c.gen == gen) {
      for (size_t i = 0; i < Cache::kWays; ++i)
        if (c.obj[i] == obj) return c.id[i];
    } else {
      c = Cache();
      c.gen = gen;
    }
    const core::ObjId id = table_.Get(obj);
    if (id) {
      c.obj[c.next] = obj;
      c.id[c.next] = id;
      c.next = (c.next + 1) % Cache::kWays;
    }
    return id;
  }
  void Forget(const void* obj) {
    table_.Erase(obj);
    forgotten_.fetch_add(1, std::memory_order_acq_rel);
  }

 private:
  struct Cache {
    static constexpr size_t kWays = 4;
    uint64_t gen = 0;
    const void* obj[kWays] = {};
    core::ObjId id[kWays] = {};
    size_t next = 0;
  };
  static thread_local Cache t_cache;
  std::atomic<core::ObjId> next_{1};
  std::atomic<uint64_t> forgotten_{1};  // bumped by every Forget
  PtrTable table_;
};

thread_local Registry::Cache Registry::t_cache;

Registry& Objects() {
  static Registry* r = new Registry();  // outlives every atexit handler
  return *r;
}

// The trace of this run (option trace=PATH), opened at the first event.
std::atomic<traces::TraceWriter*> g_trace{nullptr};
std::once_flag g_trace_once;

int kFatalSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTERM, SIGINT, SIGQUIT};
struct sigaction g_old_actions[sizeof(kFatalSignals) / sizeof(kFatalSignals[0])];

// A fatal signal: write what the trace holds (its valid prefix), then let
// the program's previous disposition run.
void OnFatalSignal(int sig) {
  if (traces::TraceWriter* w = g_trace.load(std::memory_order_acquire)) w->FlushFromSignalHandler();
  for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(kFatalSignals[0]); ++i)
    if (kFatalSignals[i] == sig) sigaction(sig, &g_old_actions[i], nullptr);
  raise(sig);
}

void CloseTrace();

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// The trace's clock: the time-stamp counter where there is one (a few
// cycles to read, where clock_gettime costs tens of ns on some VMs), else
// CLOCK_MONOTONIC.  Its rate goes into the trace header.
#if defined(__x86_64__)
uint64_t TraceClock() { return __rdtsc(); }
std::pair<std::string, std::string> ClockProperty(std::vector<std::pair<std::string, std::string>>* props) {
  const uint64_t n0 = MonotonicNs(), t0 = __rdtsc();
  uint64_t n1;
  do n1 = MonotonicNs();
  while (n1 - n0 < 2'000'000);  // 2 ms of calibration, only when tracing
  const uint64_t t1 = __rdtsc();
  props->push_back({"clock", "tsc"});
  return {"clock_hz", absl::StrCat(static_cast<uint64_t>((t1 - t0) * 1e9 / (n1 - n0)))};
}
#else
uint64_t TraceClock() { return MonotonicNs(); }
std::pair<std::string, std::string> ClockProperty(std::vector<std::pair<std::string, std::string>>* props) {
  props->push_back({"clock", "ns"});
  return {"clock_hz", "1000000000"};
}
#endif

void OpenTrace() {
  Reentry re;
  const std::string& pattern = core::GlobalOptions().trace;
  if (pattern.empty()) return;
  traces::TraceHeader h = traces::CurrentProcessHeader();
  h.properties.push_back({"RDMASAN_OPTIONS", getenv("RDMASAN_OPTIONS") ? getenv("RDMASAN_OPTIONS") : ""});
  h.properties.push_back(ClockProperty(&h.properties));
  const std::string path = traces::ExpandTracePath(pattern, getpid());
  auto w = traces::TraceWriter::Open(path, h);
  if (!w.ok()) {
    fprintf(stderr, "==%d==rdmasan: cannot record the trace: %s\n", getpid(),
            std::string(w.status().message()).c_str());
    return;
  }
  g_trace.store(w->release(), std::memory_order_release);
  core::SetBeforeHaltHook(CloseTrace);
  // Only where the program left the default: its own handlers stay its own.
  for (size_t i = 0; i < sizeof(kFatalSignals) / sizeof(kFatalSignals[0]); ++i) {
    struct sigaction old;
    if (sigaction(kFatalSignals[i], nullptr, &old) != 0 || old.sa_handler != SIG_DFL) continue;
    struct sigaction sa = {};
    sa.sa_handler = OnFatalSignal;
    sigemptyset(&sa.sa_mask);
    g_old_actions[i] = old;
    sigaction(kFatalSignals[i], &sa, nullptr);
  }
}

}  // namespace

void AfterForkInChild() {
  core::BiasAfterFork();
  // The child must not write, close or rename its parent's trace.
  if (traces::TraceWriter* w = g_trace.exchange(nullptr, std::memory_order_acq_rel)) w->AbandonAfterFork();
}

namespace {

void CloseTrace() {
  traces::TraceWriter* w = g_trace.exchange(nullptr, std::memory_order_acq_rel);
  if (!w) return;
  absl::Status st = w->Close();
  if (!st.ok()) fprintf(stderr, "==%d==rdmasan: trace: %s\n", getpid(), std::string(st.message()).c_str());
  // The writer is not deleted: a thread still inside Append may touch it.
}

// One engine per process (see checkers/engine.h for its locks).  It numbers
// the events only when they are recorded: the trace's order is all that
// reads the numbers, and one counter shared by every thread would be the
// one cache line that threads on separate QPs still fight over.
checkers::Engine& GetEngine() {
  static checkers::Engine* e = new checkers::Engine(/*assign_seq=*/!core::GlobalOptions().trace.empty(),
                                                    core::GlobalReporter().checks());
  return *e;
}

thread_local uint32_t t_tid = 0;

uint32_t Tid() {
  if (!t_tid) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

void AtExit() {
  Reentry re;  // what the trace writer and the reporter free is rdmasan's own
  CloseTrace();
  core::Reporter& r = core::GlobalReporter();
  int code = r.Finish();
  if (code) {
    // Like the sanitizers' exitcode: the run had errors.  Flush what the
    // program wrote first; _exit skips the remaining atexit work, so what
    // must happen at exit happens here (softnic's fabric file).
    fflush(nullptr);
    core::RunBeforeExitHooks();
    _exit(code);
  }
}

std::atomic<bool> g_atexit_registered{false};
std::atomic<bool> g_started{false};  // atexit registered and the trace opened

}  // namespace

std::atomic<int> g_checking{-1};  // -1: not read yet

bool Checking() {
  int v = g_checking.load(std::memory_order_relaxed);
  if (v < 0) {
    v = core::GlobalOptions().checking ? 1 : 0;
    g_checking.store(v, std::memory_order_relaxed);
  }
  return v;
}

void SetChecking(bool on) { g_checking.store(on ? 1 : 0, std::memory_order_relaxed); }

core::ObjId Assign(const void* obj) { return Objects().Assign(obj); }

core::ObjId Id(const void* obj) { return obj ? Objects().Find(obj) : 0; }

void Forget(const void* obj) { Objects().Forget(obj); }

void Emit(core::Event& e, std::vector<checkers::RetiredWr>* retired) {
  // Once per process; one load on every later event.
  if (!g_started.load(std::memory_order_acquire)) {
    if (!g_atexit_registered.exchange(true)) atexit(AtExit);
    std::call_once(g_trace_once, OpenTrace);
    g_started.store(true, std::memory_order_release);
  }
  std::vector<core::Finding> findings;
  GetEngine().OnEvent(e, &findings, retired);
  // Recorded outside the engine's locks: the writer is thread-safe, each
  // thread's events reach it in that thread's seq order, and the reader
  // merges the threads back into seq order (the engine's order).  Only
  // the trace reads the thread id.
  if (traces::TraceWriter* w = g_trace.load(std::memory_order_acquire)) {
    e.tid = Tid();
    e.time = TraceClock();
    w->Append(e);
  }
  for (const auto& f : findings) core::GlobalReporter().Report(f);
}

void OnCreateCq(ibv_cq* cq, ibv_context* ctx, ibv_comp_channel* channel, core::StackId stack) {
  core::Event e;
  e.kind = core::EventKind::kCreateCq;
  e.ret = cq ? 0 : -1;
  e.err = cq ? 0 : errno;
  e.stack = stack;
  e.parent = Id(ctx);
  e.channel = Id(channel);
  if (cq) {
    e.obj = Assign(cq);
    e.cqe = cq->cqe;
  }
  Emit(e);
}

void OnCreateQp(ibv_qp* qp, ibv_pd* pd, const ibv_qp_cap& cap, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq,
                ibv_qp_type type, int sq_sig_all, core::StackId stack) {
  core::Event e;
  e.kind = core::EventKind::kCreateQp;
  e.ret = qp ? 0 : -1;
  e.err = qp ? 0 : errno;
  e.stack = stack;
  e.parent = Id(pd);
  e.send_cq = Id(send_cq);
  e.recv_cq = Id(recv_cq);
  e.srq = Id(srq);
  e.qp_type = type;
  e.sq_sig_all = sq_sig_all;
  e.caps = {cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data};
  if (qp) {
    e.obj = Assign(qp);
    e.qp_num = qp->qp_num;
  }
  Emit(e);
}

void CopySendChain(const ibv_send_wr* wr, const ibv_send_wr* bad, core::Event* e, bool ud) {
  // Into the WRs the event already holds where it has them (a reused event
  // keeps its elements and their SGE storage): every field is written.
  auto& wrs = e->send_wrs;
  uint32_t i = 0;
  for (; wr && i < 4096; wr = wr->next, ++i) {
    if (wr == bad) e->bad_index = i;
    core::SendWr& w = i < wrs.size() ? wrs[i] : wrs.emplace_back();
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.send_flags = wr->send_flags;
    w.imm_data = wr->imm_data;
    w.num_sge = wr->num_sge;
    w.posted_at = 0;
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.remote_addr = wr->wr.atomic.remote_addr;
      w.rkey = wr->wr.atomic.rkey;
      w.compare_add = wr->wr.atomic.compare_add;
      w.swap = wr->wr.atomic.swap;
    } else {
      w.remote_addr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
      w.compare_add = w.swap = 0;
    }
    // Only a UD QP's WRs hold an AH in the union (for others the same bytes
    // are the remote address, not worth a lookup).
    if (ud) {
      w.ah = Id(wr->wr.ud.ah);
      w.remote_qpn = wr->wr.ud.remote_qpn;
    } else {
      w.ah = 0;
      w.remote_qpn = 0;
    }
    // A null sg_list with num_sge > 0 is the program's bug: copy no SGE
    // (the provider rejects or crashes on it; the shim must not).
    const int n = wr->sg_list && wr->num_sge > 0 && wr->num_sge <= 1024 ? wr->num_sge : 0;
    w.sges.resize(n);
    core::Sge* g = w.sges.data();
    for (int k = 0; k < n; ++k)
      g[k] = {wr->sg_list[k].addr, wr->sg_list[k].length, wr->sg_list[k].lkey, 0, 0};
  }
  if (wrs.size() > i) wrs.erase(wrs.begin() + i, wrs.end());
}

void CopyRecvChain(const ibv_recv_wr* wr, const ibv_recv_wr* bad, core::Event* e) {
  uint32_t i = 0;
  for (; wr && i < 65536; wr = wr->next, ++i) {
    if (wr == bad) e->bad_index = i;
    core::RecvWr w;
    w.wr_id = wr->wr_id;
    w.num_sge = wr->num_sge;
    const int n = wr->sg_list && wr->num_sge > 0 && wr->num_sge <= 1024 ? wr->num_sge : 0;
    for (int k = 0; k < n; ++k)
      w.sges.push_back({wr->sg_list[k].addr, wr->sg_list[k].length, wr->sg_list[k].lkey, 0});
    e->recv_wrs.push_back(std::move(w));
  }
}

}  // namespace rdmasan::interpose
