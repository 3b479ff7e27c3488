// interpose/faults: see faults.h.
#include "interpose/faults.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <mutex>
#include <sstream>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/synchronization/mutex.h"
#include "core/file.h"
#include "core/options.h"
#include "core/own_fd.h"
#include "core/report.h"
#include "interpose/dispatch.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/sched.h"
#include "softnic/chaos.h"
#include "softnic/softnic.h"

namespace rdmasan::interpose {
namespace {

struct Recent {
  static constexpr int kSize = 8;
  std::string line[kSize];
  int next = 0, count = 0;
};

struct State {
  std::unique_ptr<core::Decider> decider;
  ReorderMode reorder = ReorderMode::kOff;
  core::OwnFd log_fd;  // out of the program's way, checked before each write
  std::string log_path;
  std::string log_head;     // the header it starts with
  bool log_shared = false;  // its path names no process (no %p): a forked child writes PATH.<pid>
  absl::Mutex mu;           // log_fd writes, recent
  Recent recent;
  std::atomic<uint64_t> number{0};  // decisions so far (their #n in reports)
};

std::atomic<State*> g_state{nullptr};
std::atomic<bool> g_built{false};
std::atomic<bool> g_forked_child{false};  // this process is a fork() child of a process under the shim
std::mutex g_build_mu;

ReorderMode ParseReorder(const std::string& s) {
  if (s == "random") return ReorderMode::kRandom;
  if (s == "pct") return ReorderMode::kPct;
  return ReorderMode::kOff;
}

// What a decision did, for the decision log and reports.
std::string Describe(const core::Decision& d) {
  using core::Point;
  const uint64_t o = d.outcome;
  if (core::IsChaosPoint(d.key.point)) return absl::StrCat(core::PointName(d.key.point), " outcome ", o);
  switch (d.key.point) {
    case Point::kPostSend:
    case Point::kPostRecv:
    case Point::kPostSrqRecv:
      return absl::StrFormat("%s fails with %s at WR %u of the chain%s", core::PointName(d.key.point),
                             core::ErrnoName(static_cast<int>(o >> 32)),
                             static_cast<uint32_t>(o & 0xffffffff) - 1,
                             d.qp_num ? absl::StrFormat(" on QP 0x%x", d.qp_num) : "");
    case Point::kWcError:
      return absl::StrFormat("wc.error %s on QP 0x%x wr_id=0x%x",
                             core::WcStatusName(static_cast<uint32_t>(o)), d.qp_num, d.wr_id);
    case Point::kAsyncPortErr:
    case Point::kAsyncCqErr:
    case Point::kAsyncQpFatal:
      return absl::StrCat(core::PointName(d.key.point),
                          d.qp_num ? absl::StrFormat(" on QP 0x%x", d.qp_num) : "");
    case Point::kSchedHold:
    case Point::kSchedPick:
      return d.note;
    default:
      return absl::StrCat(core::PointName(d.key.point), " fails with ", core::ErrnoName(static_cast<int>(o)));
  }
}

thread_local bool t_decision_event_gone = false;
struct ThreadDecisionEvent {
  core::Event event;
  ~ThreadDecisionEvent() { t_decision_event_gone = true; }
};
thread_local ThreadDecisionEvent t_decision_event;

void Sink(State* s, const core::Decision& d) {
  const bool fault = core::IsFaultPoint(d.key.point);
  if (fault || s->log_fd.fd >= 0) {
    // The decision in words, for the recent faults and the log (a
    // scheduler's decision, the most frequent, needs neither without a log).
    std::string what = d.note.empty() ? Describe(d) : d.note;
    absl::MutexLock l(&s->mu);
    const uint64_t number = s->number.fetch_add(1, std::memory_order_relaxed) + 1;
    if (fault) {
      s->recent.line[s->recent.next] = absl::StrCat("injected ", what, " (decision #", number, ")");
      s->recent.next = (s->recent.next + 1) % Recent::kSize;
      ++s->recent.count;
    }
    if (s->log_fd.fd >= 0) {
      core::Decision copy = d;
      copy.note = what;
      const std::string line = core::FormatDecision(copy);
      if (core::CheckOwnFd(&s->log_fd, s->log_path)) (void)!write(s->log_fd.fd, line.data(), line.size());
    }
  } else {
    s->number.fetch_add(1, std::memory_order_relaxed);
  }
  if (!Checking()) return;
  // Each thread's decision event, reused: its vectors keep their storage
  // (a fresh one for a decision from a later thread destructor).
  std::unique_ptr<core::Event> spare;
  core::Event& e =
      t_decision_event_gone ? *(spare = std::make_unique<core::Event>()) : t_decision_event.event;
  e.kind = core::EventKind::kDecision;
  e.count = static_cast<uint32_t>(d.key.point);
  e.obj = d.key.obj;
  e.length = d.key.hit;
  e.addr = d.outcome;
  e.qp_num = d.qp_num;
  e.seq = 0;
  e.wcs.clear();
  if (d.key.point == core::Point::kWcError || d.wr_id) {
    core::Completion c;
    c.wr_id = d.wr_id;
    c.status = d.key.point == core::Point::kWcError ? static_cast<uint32_t>(d.outcome) : 0;
    c.qp_num = d.qp_num;
    e.wcs.push_back(c);
  }
  Emit(e);
}

// Reads the schedule file; "" and fills *log, or what is wrong.
std::string ReadSchedule(const std::string& path, core::DecisionLog* log) {
  std::string text;
  if (std::string why = core::ReadInputFile(path, &text); !why.empty())
    return absl::StrCat("schedule: cannot read '", path, "': ", why);
  auto parsed = core::ParseDecisionLog(text);
  if (!parsed.ok()) return absl::StrCat("schedule '", path, "': ", parsed.status().message());
  *log = std::move(*parsed);
  return "";
}

// chaos= as the run applies it: the option, else the schedule's "# chaos="
// (a log's header is not checked at start: a bad one is said and ignored).
std::string RunChaos(const core::Options& o, const core::DecisionLog* log) {
  if (!o.chaos.empty() || !log) return o.chaos;
  if (!core::ParseChaosSpec(log->chaos).ok()) {
    core::Diag(absl::StrCat("schedule '", o.schedule, "': chaos=", log->chaos,
                            " ignored: ", core::ParseChaosSpec(log->chaos).status().message()));
    return "";
  }
  return log->chaos;
}

// softnic's questions at its chaos points (softnic/chaos.h), answered by
// the run's Decider.
uint64_t DecideChaos(softnic::ChaosPoint p, uint64_t obj, uint64_t wr_id, uint64_t n, const char* what,
                     uint32_t qp_num) {
  core::Decider* d = Decider();
  if (!d) return 0;
  const auto point =
      static_cast<core::Point>(static_cast<int>(core::Point::kChaosPlace) + static_cast<int>(p));
  if (!core::IsChaosPoint(point)) return 0;
  return d->Chaos(
      point, obj, n,
      [&](uint64_t outcome) {
        return absl::StrCat(core::PointName(point), " ", what ? what : "", " (outcome ", outcome, ")");
      },
      qp_num, wr_id);
}

State* Build(const core::Options& o, std::unique_ptr<core::DecisionSource> given = nullptr) {
  auto* s = new State();
  std::string faults = o.faults;
  std::string reorder = o.reorder;
  std::string chaos = o.chaos;
  std::unique_ptr<core::DecisionSource> source = std::move(given);  // fuzzing: the input's bytes
  if (!source && !o.schedule.empty()) {
    core::DecisionLog log;
    if (std::string err = ReadSchedule(o.schedule, &log); !err.empty()) {
      core::Diag(err);  // init.cc stopped the program already if it was bad at start
    } else {
      if (reorder == "off" && !log.reorder.empty()) reorder = log.reorder;
      if (faults.empty()) faults = log.faults;
      chaos = RunChaos(o, &log);
      source = core::MakeLogSource(std::move(log.decisions), o.schedule);
    }
  }
  s->reorder = ParseReorder(reorder);
  auto chaos_spec = core::ParseChaosSpec(chaos);
  if (!chaos_spec.ok()) chaos_spec = core::ChaosSpec();
  if (chaos_spec->empty()) chaos.clear();
  softnic::SetChaos(chaos_spec->empty() ? nullptr : DecideChaos, chaos_spec->Mask());
  if (!source && (!faults.empty() || s->reorder != ReorderMode::kOff || !chaos.empty()))
    source = core::MakePrngSource(static_cast<uint64_t>(o.seed));
  if (!source) return s;
  auto spec = core::ParseFaultSpec(source->Replaying() ? "" : faults);
  s->decider = std::make_unique<core::Decider>(std::move(source), spec.ok() ? *spec : core::FaultSpec(),
                                               *std::move(chaos_spec));
  if (!o.decision_log.empty()) {
    std::string path = absl::StrReplaceAll(o.decision_log, {{"%p", absl::StrCat(getpid())}});
    s->log_shared = path == o.decision_log;
    // A forked child never replaces its parent's log (the log of a process
    // that forks before its first verbs call would be the child's alone).
    if (s->log_shared && g_forked_child.load(std::memory_order_relaxed))
      absl::StrAppend(&path, ".", getpid());
    s->log_fd = core::AdoptFd(core::CreateForWrite(path, core::CreateMode::kFresh));
    s->log_path = path;
    s->log_head = core::FormatLogHeader(reorder, faults, s->decider->source().Describe(), chaos);
    if (s->log_fd.fd < 0)
      core::Diag(absl::StrCat("decision_log: cannot create '", path, "': ", std::strerror(errno)));
    else
      (void)!write(s->log_fd.fd, s->log_head.data(), s->log_head.size());
  }
  // Notes (a decision in words) are read only by the decision log; a fault
  // point's line in reports is made from the decision itself (Describe).
  s->decider->SetSink([s](const core::Decision& d) { Sink(s, d); }, /*with_notes=*/s->log_fd.fd >= 0);
  return s;
}

State* GetState() {
  if (g_built.load(std::memory_order_acquire)) return g_state.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(g_build_mu);
  if (!g_built.load(std::memory_order_relaxed)) {
    g_state.store(Build(core::GlobalOptions()), std::memory_order_relaxed);
    g_built.store(true, std::memory_order_release);
  }
  return g_state.load(std::memory_order_relaxed);
}

// QPs by (context, number).
std::mutex g_qps_mu;
using QpMap = absl::flat_hash_map<std::pair<const ibv_context*, uint32_t>, QpInfo>;
QpMap& Qps() {  // made on first use, so it works before this library's initialisers
  static auto* const qps = new QpMap();
  return *qps;
}
// Bumped by every change of the table (QpTableGeneration).
constinit std::atomic<uint64_t> g_qps_gen{1};

}  // namespace

std::atomic<core::Decider*> g_decider{nullptr};
std::atomic<bool> g_decider_built{false};

core::Decider* DeciderSlow() {
  State* s = GetState();
  g_decider.store(s->decider.get(), std::memory_order_relaxed);
  g_decider_built.store(true, std::memory_order_release);
  return s->decider.get();
}

int PostFault(core::Point p, core::ObjId obj, uint32_t qp_num, uint32_t chain_len, uint32_t* index) {
  core::Decider* d = Decider();
  if (!d || !d->Active(p) || chain_len == 0) return 0;
  const uint64_t o = d->Fault(p, obj, qp_num, [&](const core::FaultRule& r, core::Draws& draws) -> uint64_t {
    uint32_t at = r.wr >= 0 ? static_cast<uint32_t>(std::min<int64_t>(r.wr, chain_len - 1))
                            : static_cast<uint32_t>(draws.Below(chain_len));
    static constexpr int kDefault[] = {ENOMEM, EINVAL};
    int err = r.errnos.empty() ? kDefault[draws.Below(2)] : r.errnos[draws.Below(r.errnos.size())];
    return (uint64_t(err) << 32) | (at + 1);
  });
  if (!o) return 0;
  const uint32_t at = static_cast<uint32_t>(o & 0xffffffff);
  *index = at ? std::min(at - 1, chain_len - 1) : 0;  // a log's outcome may name a WR past this chain
  const int err = static_cast<int>(o >> 32);
  return err > 0 ? err : ENOMEM;
}

void MaybeInjectAsync(ibv_qp* qp) {
  core::Decider* d = Decider();
  if (!d || !qp) return;
  const bool sn = softnic::IsContext(qp->context);
  auto fire = [&](core::Point p, core::ObjId obj) {
    return d->Active(p) &&
           d->Fault(p, obj, qp->qp_num, [](const core::FaultRule&, core::Draws&) { return 1; });
  };
  if (fire(core::Point::kAsyncQpFatal, Id(qp))) {
    if (sn)
      softnic::InjectAsync(qp->context, IBV_EVENT_QP_FATAL, qp, nullptr);
    else
      MoveQpToError(qp);
  }
  if (!sn) return;
  if (qp->send_cq && fire(core::Point::kAsyncCqErr, Id(qp->send_cq)))
    softnic::InjectAsync(qp->context, IBV_EVENT_CQ_ERR, nullptr, qp->send_cq);
  if (fire(core::Point::kAsyncPortErr, Id(qp->context))) {
    // A link flap: the port goes down and comes back.
    softnic::InjectAsync(qp->context, IBV_EVENT_PORT_ERR, nullptr, nullptr);
    softnic::InjectAsync(qp->context, IBV_EVENT_PORT_ACTIVE, nullptr, nullptr);
  }
}

int CallFault(core::Point p, core::ObjId obj) {
  core::Decider* d = Decider();
  if (!d || !d->Active(p)) return 0;
  const uint64_t o = d->Fault(p, obj, 0, [&](const core::FaultRule& r, core::Draws& draws) -> uint64_t {
    if (!r.errnos.empty()) return static_cast<uint64_t>(r.errnos[draws.Below(r.errnos.size())]);
    // What a registration fails with when pinning or resources run out; a
    // create or alloc, when resources do.
    if (p == core::Point::kRegMr) return draws.Below(2) ? EFAULT : ENOMEM;
    return ENOMEM;
  });
  return o ? (o < 4096 ? static_cast<int>(o) : ENOMEM) : 0;
}

void InstallChaos() {
  const core::Options& o = core::GlobalOptions();
  core::DecisionLog log;
  const bool have_log = !o.schedule.empty() && ReadSchedule(o.schedule, &log).empty();
  auto spec = core::ParseChaosSpec(RunChaos(o, have_log ? &log : nullptr));
  if (spec.ok() && !spec->empty()) softnic::SetChaos(DecideChaos, spec->Mask());
}

ReorderMode Reorder() {
  State* s = GetState();
  return s ? s->reorder : ReorderMode::kOff;
}

std::string ScheduleError() {
  const std::string& path = core::GlobalOptions().schedule;
  if (path.empty()) return "";
  core::DecisionLog log;
  return ReadSchedule(path, &log);
}

void NoteQp(ibv_qp* qp, ibv_srq* srq) {
  if (!qp) return;
  QpInfo info{qp, Id(qp), Id(srq), srq != nullptr, static_cast<uint32_t>(qp->qp_type)};
  std::lock_guard<std::mutex> l(g_qps_mu);
  Qps()[{qp->context, qp->qp_num}] = info;
  g_qps_gen.fetch_add(1, std::memory_order_release);
}

void ForgetQpNum(ibv_qp* qp) {
  if (!qp) return;
  std::lock_guard<std::mutex> l(g_qps_mu);
  auto it = Qps().find({qp->context, qp->qp_num});
  if (it != Qps().end() && it->second.qp == qp) Qps().erase(it);
  g_qps_gen.fetch_add(1, std::memory_order_release);
}

uint64_t QpTableGeneration() { return g_qps_gen.load(std::memory_order_acquire); }

bool LookupQp(const ibv_context* ctx, uint32_t qp_num, QpInfo* out) {
  std::lock_guard<std::mutex> l(g_qps_mu);
  auto it = Qps().find({ctx, qp_num});
  if (it == Qps().end()) return false;
  *out = it->second;
  return true;
}

int MoveQpToError(ibv_qp* qp) {
  Reentry re;  // the shim's call, not the program's
  ibv_qp_attr attr;
  std::memset(&attr, 0, sizeof(attr));
  attr.qp_state = IBV_QPS_ERR;
  return TableOf(qp->context).modify_qp(qp, &attr, IBV_QP_STATE);
}

void PoisonErrorWc(ibv_wc* wc) {
  // The enum field gets the poison's bytes (no ibv_wc_opcode has them).
  static_assert(sizeof(wc->opcode) == sizeof(kPoison32));
  std::memcpy(&wc->opcode, &kPoison32, sizeof(kPoison32));
  wc->byte_len = kPoison32;
  wc->imm_data = kPoison32;
  wc->src_qp = kPoison32;
  wc->wc_flags = kPoison32;
  wc->pkey_index = 0xbeef;
  wc->slid = 0xbeef;
  wc->sl = 0xef;
  wc->dlid_path_bits = 0xef;
}

std::string RecentInjections() {
  State* s = g_state.load(std::memory_order_acquire);
  if (!s || !s->mu.TryLock()) return "";
  std::string out;
  const int n = std::min(s->recent.count, Recent::kSize);
  for (int i = 0; i < n; ++i) {
    const int at = (s->recent.next - n + i + Recent::kSize) % Recent::kSize;
    absl::StrAppend(&out, out.empty() ? "" : "\n", s->recent.line[at]);
  }
  s->mu.Unlock();
  return out;
}

std::string DecisionSummary() {
  State* s = g_state.load(std::memory_order_acquire);
  if (!s || !s->decider) return "";
  std::string out;
  for (int i = 0; i < core::kNumPoints; ++i) {
    const auto p = static_cast<core::Point>(i);
    if (uint64_t n = s->decider->Count(p))
      absl::StrAppend(&out, out.empty() ? "" : ", ", core::PointName(p), " ", n);
  }
  if (out.empty()) return "";
  return absl::StrCat("decisions (", s->decider->source().Describe(), "): ", out);
}

void FinishDecisionLog() {
  State* s = g_state.load(std::memory_order_acquire);
  if (!s || !s->decider || s->log_fd.fd < 0) return;
  const std::string reached = core::FormatReached(*s->decider);
  absl::MutexLock l(&s->mu);
  if (!reached.empty() && core::CheckOwnFd(&s->log_fd, s->log_path))
    (void)!write(s->log_fd.fd, reached.data(), reached.size());
}

void DecisionsAfterForkInChild() {
  g_forked_child.store(true, std::memory_order_relaxed);
  // Built in the parent: the child's decisions go to a log of its own
  // (PATH.<pid>), with the parent's header, never into the parent's.  One
  // thread runs in the child: no lock (a parent thread may have held it).
  State* s = g_state.load(std::memory_order_acquire);
  if (!s || s->log_fd.fd < 0 || !s->log_shared) return;
  core::CloseOwnFd(&s->log_fd);
  const std::string path = absl::StrCat(s->log_path, ".", getpid());
  s->log_fd = core::AdoptFd(core::CreateForWrite(path, core::CreateMode::kFresh));
  s->log_path = path;
  if (s->log_fd.fd >= 0) (void)!write(s->log_fd.fd, s->log_head.data(), s->log_head.size());
}

void ResetDecisionsForTest(const std::string& options) {
  {
    std::lock_guard<std::mutex> l(g_build_mu);
    core::Options o = core::GlobalOptions();
    (void)core::ParseOptions(options, &o);
    State* s = Build(o);
    // The old state stays allocated (a verbs call of another test thread
    // may still read it) and reachable, so that LeakSanitizer does not
    // count it.
    static auto* const retired = new std::vector<State*>;
    if (State* old = g_state.exchange(s, std::memory_order_acq_rel)) retired->push_back(old);
    g_built.store(true, std::memory_order_release);
    g_decider.store(s->decider.get(), std::memory_order_relaxed);
    g_decider_built.store(true, std::memory_order_release);
  }
  sched::ResetForTest();  // re-reads whether the poll paths schedule
}

void ResetDecisionsForFuzz(const core::Options& options, std::unique_ptr<core::DecisionSource> source) {
  State* old;
  {
    std::lock_guard<std::mutex> l(g_build_mu);
    State* s = Build(options, std::move(source));
    old = g_state.exchange(s, std::memory_order_acq_rel);
    g_built.store(true, std::memory_order_release);
    g_decider.store(s->decider.get(), std::memory_order_relaxed);
    g_decider_built.store(true, std::memory_order_release);
  }
  sched::ResetForFuzz();
  if (old) core::CloseOwnFd(&old->log_fd);
  delete old;  // the caller guarantees no verbs call is in progress
}

}  // namespace rdmasan::interpose
