// The polls: ibv_poll_cq and ibv_req_notify_cq through the context's ops,
// and the extended CQ (ibv_create_cq_ex, its start/next/end_poll) through
// its own hooks (interpose/wrap_internal.h).  A poll of a dead CQ, or one
// of a closed context, is refused with EINVAL (use-after-destroy), checking
// on or off.  Each poll that returns completions is one kPollCq event, with
// what it implies: why softnic failed a completion (kWcReason), the
// tag-matching completions (kTmWc), the keys a peer invalidated
// (kRemoteInv), the payloads modified before their WR retired (kRetire).
//
// May not: take a lock on a poll that returns nothing of an unarmed CQ, or
// capture a stack for a clean poll.
#include <cstring>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/memory.h"
#include "interpose/ptr_table.h"
#include "interpose/sched.h"
#include "interpose/thread_domains.h"
#include "interpose/watchdog.h"
#include "interpose/wrap_internal.h"
#include "softnic/fingerprint.h"
#include "softnic/softnic.h"

namespace rdmasan::interpose {
namespace wrap {
namespace {

// CQs armed and not polled since: their empty polls matter to the
// notify-without-poll check; every other empty poll is not an event.
std::mutex g_armed_mu;                         // std::mutex: visible to TSan
absl::flat_hash_set<const ibv_cq*>& Armed() {  // made on first use
  static auto* const armed = new absl::flat_hash_set<const ibv_cq*>();
  return *armed;
}
std::atomic<int> g_armed_count{0};

// Each thread's poll event, reused (FreshEvent).
thread_local bool t_poll_event_gone = false;
struct ThreadPollEvent {
  core::Event event;
  ~ThreadPollEvent() { t_poll_event_gone = true; }
};
thread_local ThreadPollEvent t_poll_event;

// A tag-matching completion (core::EventKind::kTmWc) for each one a poll
// returned, before its poll event: its wc_flags tell the books whether it
// names a tagged buffer or an ordinary receive of the SRQ.
void EmitTmWc(const core::Event& poll, const core::Completion& c, uint32_t flags) {
  core::Event r;
  r.kind = core::EventKind::kTmWc;
  r.obj = poll.obj;
  r.stack = poll.stack;
  r.count = flags;
  r.wcs.push_back(c);
  Emit(r);
}

// ------------------------------------------------ completions explained --
// Why softnic failed a completion (softnic::ExplainCompletion, issue 13).

// Before the poll event that returns them: a kWcReason event for each
// error completion (flushes aside) softnic can explain.
[[gnu::noinline]] void EmitReasons(ibv_cq* cq, const core::Event& poll) {
  if (!cq || !softnic::IsContext(cq->context)) return;
  for (const core::Completion& c : poll.wcs) {
    if (c.status == IBV_WC_SUCCESS || c.status == IBV_WC_WR_FLUSH_ERR) continue;
    core::Event r;
    r.kind = core::EventKind::kWcReason;
    r.obj = poll.obj;
    r.stack = poll.stack;
    r.wcs.push_back(c);
    if (!softnic::ExplainCompletion(cq, c.qp_num, c.wr_id, c.status, &r.text) || r.text.empty()) continue;
    Emit(r);
  }
}

// Before the poll event that returns them: a kDestModified event for each
// completion whose destination the program wrote into before its data
// landed, as softnic marked it (softnic/fingerprint.h).
[[gnu::noinline]] void EmitDestModified(ibv_cq* cq, core::Event& poll, uintptr_t pc, uintptr_t frame) {
  softnic::DestModified marks[16];
  const size_t n = softnic::TakeModified(cq, marks, 16);
  for (size_t i = 0; i < n; ++i)
    for (const core::Completion& c : poll.wcs) {
      if (c.qp_num != marks[i].qp_num || c.wr_id != marks[i].wr_id) continue;
      if (!poll.stack) poll.stack = pc ? core::CaptureStackFrom(pc, frame) : RDMASAN_CAPTURE_CALLER_STACK();
      core::Event r;
      r.kind = core::EventKind::kDestModified;
      r.obj = poll.obj;
      r.stack = poll.stack;
      r.count = marks[i].recv ? 1 : 0;
      r.wcs.push_back(c);
      Emit(r);
      break;
    }
}

// After the poll event: a kRemoteInv event for each receive completion
// that invalidated a local key (the peer's SEND_WITH_INV).
struct RemoteInv {
  uint32_t qp_num, rkey;
  uint64_t wr_id;
};
void EmitRemoteInvs(const core::Event& poll, const RemoteInv* invs, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    core::Event r;
    r.kind = core::EventKind::kRemoteInv;
    r.obj = poll.obj;
    r.stack = poll.stack;
    r.qp_num = invs[i].qp_num;
    r.rkey = invs[i].rkey;
    core::Completion c;
    c.wr_id = invs[i].wr_id;
    c.qp_num = invs[i].qp_num;
    c.opcode = IBV_WC_RECV;
    r.wcs.push_back(c);
    Emit(r);
  }
}

// Emits a poll event, then the retirement event of the send WRs it retired
// whose payload changed since the post (buffer-modified-in-flight).  A poll
// event without a stack (ibv_poll_cq's, see PollCq) gets one here, from the
// wrapper's frame (pc, frame), if a retirement event needs it.
// Reused by each thread: a steady stream of polls does not allocate.
thread_local std::vector<checkers::RetiredWr> t_retired;

// The retirement events of the send WRs a poll retired (`retired`), of
// the poll whose stack is `poll_stack` (0: none, then one from (pc, frame)
// if a retirement event needs it).
[[gnu::noinline]] void EmitRetired(std::vector<checkers::RetiredWr>& retired, core::StackId poll_stack,
                                   uintptr_t pc, uintptr_t frame) {
  // The retiring completion is seen: the payloads must be as they were.
  core::Event r;
  r.kind = core::EventKind::kRetire;
  for (auto& rw : retired) {
    // Only WRs whose bytes changed become events: an unchanged payload
    // raises nothing, here or in a replay.
    bool changed = false;
    for (auto& g : rw.wr.sges) {
      g.hash_now = g.hash ? HashPayload(g.addr, g.length) : 0;
      changed |= g.hash && g.hash_now && g.hash_now != g.hash;
    }
    if (!changed) continue;
    if (!r.stack) r.stack = poll_stack ? poll_stack : pc ? core::CaptureStackFrom(pc, frame) : 0;
    if (!r.send_wrs.empty() && r.obj != rw.qp) {  // one event per QP
      Emit(r);
      r.send_wrs.clear();
    }
    r.obj = rw.qp;
    core::SendWr w;
    w.wr_id = rw.wr.wr_id;
    w.opcode = rw.wr.opcode;
    w.posted_at = rw.wr.stack;
    w.sges.assign(rw.wr.sges.begin(), rw.wr.sges.end());
    r.send_wrs.push_back(std::move(w));
    if (r.send_wrs.size() == 64) {
      Emit(r);
      r.send_wrs.clear();
    }
  }
  if (!r.send_wrs.empty()) Emit(r);
}

void EmitPoll(core::Event& e, uintptr_t pc = 0, uintptr_t frame = 0) {
  t_retired.clear();
  Emit(e, &t_retired);
  if (!t_retired.empty()) EmitRetired(t_retired, e.stack, pc, frame);
}

// A poll's completions as the engine's compact entry takes them
// (EmitPollSucceeded): at most this many, all successful, none that
// invalidated a key or is tag matching's, no destination marked modified
// (the poll event would need a stack or come with others).  Filled as
// PollCqFull fills the event's.
constexpr int kQuickPoll = 16;
constinit thread_local core::Completion t_quick_wcs[kQuickPoll];  // no TLS init hook
inline bool PlainWc(const ibv_wc& w) {
  return w.status == IBV_WC_SUCCESS && !(w.wc_flags & IBV_WC_WITH_INV) &&
         !checkers::IsTmCompletion(IBV_WC_SUCCESS, w.opcode);
}
inline bool QuickPoll(const ibv_wc* wc, int got) {
  if (__builtin_expect(softnic::g_modified_pending.load(std::memory_order_relaxed) != 0, 0)) return false;
  if (__builtin_expect(got == 1, 1)) return PlainWc(wc[0]);  // a busy poller's
  if (got > kQuickPoll) return false;
  bool plain = true;
  for (int i = 0; i < got; ++i) plain &= PlainWc(wc[i]);
  return plain;
}
// Field by field into the element: a whole Completion built on the stack
// and copied out is read back (16 bytes at a time) before its narrow
// stores have landed, a store-forwarding stall per completion.
inline void FillCompletion(const ibv_wc& w, core::Completion& c) {
  c.wr_id = w.wr_id;
  c.status = w.status;
  // An error completion's opcode is undefined (and may be poison that is
  // no ibv_wc_opcode): read its bytes, not the enum.
  std::memcpy(&c.opcode, &w.opcode, sizeof(c.opcode));
  c.qp_num = w.qp_num;
  c.byte_len = w.byte_len;
  c.vendor_err = w.vendor_err;
}

// The provider's poll, through the completion scheduler when the run
// reorders or injects error completions (one predictable branch if not).
inline int ProviderPoll(sched::PollFn provider, ibv_cq* cq, int n, ibv_wc* wc) {
  return sched::On() ? sched::Poll(cq, n, wc, provider) : provider(cq, n, wc);
}

// Id() of the CQ this thread polled last, remembered while no object was
// forgotten (g_ids_forgotten): a busy poller names the same CQ each time.
struct PolledCq {
  const ibv_cq* cq;
  uint64_t gen;
  core::ObjId id;
};
constinit thread_local PolledCq t_polled{nullptr, 0, 0};
inline core::ObjId PolledCqId(const ibv_cq* cq) {
  const uint64_t gen = g_ids_forgotten.load(std::memory_order_acquire);
  PolledCq& p = t_polled;
  if (__builtin_expect(p.cq == cq && p.gen == gen, 1)) return p.id;
  const core::ObjId id = Id(cq);
  if (id) p = {cq, gen, id};  // read after gen: a Forget in between makes it stale at once
  return id;
}

// The poll event of what a poll returned (`got`, of CQ `cq_id`), with
// what it implies, for a poll the compact entry does not take.
[[gnu::noinline]] int PollEvent(ibv_cq* cq, int n, ibv_wc* wc, int got, core::ObjId cq_id, uintptr_t pc,
                                uintptr_t frame) {
  std::unique_ptr<core::Event> spare;
  core::Event& e = FreshEvent(t_poll_event.event, t_poll_event_gone, spare, core::EventKind::kPollCq);
  e.stack = 0;
  e.obj = cq_id;
  e.ret = got < 0 ? -1 : 0;
  e.count = n;
  bool failed = got < 0;
  bool invalidated = false;
  bool tm = false;
  e.wcs.resize(got > 0 ? got : 0);
  core::Completion* out = e.wcs.data();
  for (int i = 0; i < got; ++i) {
    core::Completion& c = out[i];
    FillCompletion(wc[i], c);
    failed |= wc[i].status != IBV_WC_SUCCESS;
    invalidated |= wc[i].status == IBV_WC_SUCCESS && (wc[i].wc_flags & IBV_WC_WITH_INV);
    tm |= checkers::IsTmCompletion(c.status, c.opcode);
  }
  // A poll's stack is what error completions and modified payloads are
  // reported at; a clean poll, the common case by far, needs none.
  if (failed || invalidated || tm) e.stack = core::CaptureStackFrom(pc, frame);
  if (failed) EmitReasons(cq, e);
  if (__builtin_expect(softnic::g_modified_pending.load(std::memory_order_relaxed) != 0, 0))
    EmitDestModified(cq, e, pc, frame);
  if (__builtin_expect(tm, 0))
    for (int i = 0; i < got; ++i)
      if (checkers::IsTmCompletion(out[i].status, out[i].opcode)) EmitTmWc(e, out[i], wc[i].wc_flags);
  if (__builtin_expect(!invalidated, 1)) {
    EmitPoll(e, pc, frame);
    return got;
  }
  absl::InlinedVector<RemoteInv, 4> invs;
  for (int i = 0; i < got; ++i)
    if (wc[i].status == IBV_WC_SUCCESS && (wc[i].wc_flags & IBV_WC_WITH_INV))
      invs.push_back({wc[i].qp_num, wc[i].invalidated_rkey, wc[i].wr_id});
  EmitPoll(e, pc, frame);
  EmitRemoteInvs(e, invs.data(), invs.size());
  return got;
}

// An empty poll while some CQ is armed: true when it is no event (this CQ
// is not armed), false when it is one (the CQ is armed no more).
[[gnu::noinline]] bool QuietUnarmed(ibv_cq* cq) {
  std::lock_guard<std::mutex> l(g_armed_mu);
  if (!Armed().erase(cq)) return true;
  g_armed_count.fetch_sub(1, std::memory_order_relaxed);
  return false;
}

// The checks of what the program's own poll returned (`got`: the
// provider's answer, or the scheduler's), its Reentry held: the watchdog's
// empty poll, an armed CQ's empty poll, the compact entry for successful
// completions (EmitPollSucceeded), the event for anything else.
[[gnu::always_inline]] inline int PollChecks(ibv_cq* cq, int n, ibv_wc* wc, int got, uintptr_t pc,
                                             uintptr_t frame) {
  if (got == 0 && watchdog::Enabled()) watchdog::OnEmptyPoll(cq, pc, frame);
  if (got <= 0 && (got < 0 || g_armed_count.load(std::memory_order_relaxed) == 0 || QuietUnarmed(cq)))
    return got;
  const core::ObjId cq_id = PolledCqId(cq);
  if (got > 0 && QuickPoll(wc, got)) {
    core::Completion* cs = t_quick_wcs;
    for (int i = 0; i < got; ++i) FillCompletion(wc[i], cs[i]);
    t_retired.clear();
    if (EmitPollSucceeded(cq_id, cs, static_cast<size_t>(got), &t_retired)) {
      if (__builtin_expect(!t_retired.empty(), 0)) EmitRetired(t_retired, 0, pc, frame);
      return got;
    }
  }
  return PollEvent(cq, n, wc, got, cq_id, pc, frame);
}

// PollCq past its pass-through: `s` is the context's saved ops (or null),
// `pc` and `frame` the wrapper's (the program's call).
[[gnu::noinline]] int PollCqFull(ibv_cq* cq, int n, ibv_wc* wc, Saved* s, uintptr_t pc, uintptr_t frame) {
  if ((!s || __builtin_expect(AnyDestroyed(), 0)) &&
      wrap::RefuseDeadCall(cq, cq->context, core::EventKind::kPollCq, checkers::UadVerb::kByKind, -1, pc,
                           frame))
    return -1;
  if (!s) return -1;
  if (!Checking()) return ProviderPoll(s->poll_cq, cq, n, wc);
  Bump(GetCounters().poll_cq);
  Reentry re;
  const td::Hold hold(re.outer() ? cq : nullptr, td::Verb::kPollCq, 0, pc, frame);  // thread-domain-race
  int got = ProviderPoll(s->poll_cq, cq, n, wc);
  if (!re.outer()) return got;
  return PollChecks(cq, n, wc, got, pc, frame);
}

// The checked poll of a steady run (PollCq asked that checking is on,
// nothing was destroyed and the scheduler is off): PollCqFull's work when
// no thread domain is live and the call is the program's own, with an
// empty poll of an unarmed CQ left as soon as the provider answers.
[[gnu::noinline]] int PollCqChecked(ibv_cq* cq, int n, ibv_wc* wc, Saved* s, uintptr_t pc, uintptr_t frame) {
  if (__builtin_expect(td::Active() || Reentry::Depth() != 0, 0)) return PollCqFull(cq, n, wc, s, pc, frame);
  Bump(GetCounters().poll_cq);
  Reentry re;
  const int got = s->poll_cq(cq, n, wc);
  if (__builtin_expect(got == 0, 1) && !watchdog::Enabled() &&
      g_armed_count.load(std::memory_order_relaxed) == 0)
    return 0;
  return PollChecks(cq, n, wc, got, pc, frame);
}

}  // namespace

// The pass-through first (OnlyForward's words, and the scheduler off):
// the provider's poll, called last.  Then a steady checked run's poll
// (PollCqChecked), then the rest.  Each word is loaded once.
int PollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  Saved* const s = Find(cq->context);
  if (__builtin_expect(s != nullptr && g_destroyed_count.load(std::memory_order_relaxed) == 0, 1) &&
      sched::KnownOff()) {
    const int checking = g_checking.load(std::memory_order_relaxed);
    if (__builtin_expect(checking == 0, 1) && g_decider_built.load(std::memory_order_acquire) &&
        g_decider.load(std::memory_order_relaxed) == nullptr)
      return s->poll_cq(cq, n, wc);
    if (checking == 1) return PollCqChecked(cq, n, wc, s, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME);
  }
  return PollCqFull(cq, n, wc, s, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME);
}

int ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  Saved* s = Find(cq->context);
  Bump(GetCounters().req_notify_cq);
  if ((!s || __builtin_expect(AnyDestroyed(), 0)) &&
      wrap::RefuseDeadCall(cq, cq->context, core::EventKind::kReqNotifyCq, checkers::UadVerb::kByKind, EINVAL,
                           RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  if (!s) return ENODEV;
  Reentry re;
  int rc = s->req_notify_cq(cq, solicited_only);
  // Arming is a release point: the next poll returns what the scheduler held.
  if (rc == 0 && sched::On()) sched::Armed(cq);
  if (!re.outer() || !Checking()) return rc;
  if (rc == 0) {
    std::lock_guard<std::mutex> l(g_armed_mu);
    if (Armed().insert(cq).second) g_armed_count.fetch_add(1, std::memory_order_relaxed);
  }
  core::Event e;
  e.kind = core::EventKind::kReqNotifyCq;
  e.obj = Id(cq);
  e.ret = rc;
  e.err = rc;
  e.count = solicited_only;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  Emit(e);
  return rc;
}

namespace {

// The extended poll family (start_poll / next_poll / end_poll) of each
// ibv_cq_ex created through the shim: the provider's functions, and the
// completions of the poll in progress (one poller per CQ at a time, as the
// API requires), emitted as one kPollCq event at end_poll.
struct CqExHooks {
  int (*start_poll)(ibv_cq_ex*, ibv_poll_cq_attr*);
  int (*next_poll)(ibv_cq_ex*);
  void (*end_poll)(ibv_cq_ex*);
  ibv_wc_opcode (*read_opcode)(ibv_cq_ex*);
  uint32_t (*read_qp_num)(ibv_cq_ex*);
  uint32_t (*read_byte_len)(ibv_cq_ex*);
  uint32_t (*read_vendor_err)(ibv_cq_ex*);
  unsigned int (*read_wc_flags)(ibv_cq_ex*);
  __be32 (*read_imm_data)(ibv_cq_ex*);  // also the invalidated rkey
  core::Event batch;
  absl::InlinedVector<RemoteInv, 2> invs;  // of the batch
  // Tag-matching completions of the batch: index in batch.wcs, wc_flags.
  absl::InlinedVector<std::pair<uint32_t, uint32_t>, 2> tms;
};
PtrTable g_cq_ex;

CqExHooks* HooksOf(ibv_cq_ex* cq) { return reinterpret_cast<CqExHooks*>(g_cq_ex.Get(cq)); }

void RecordCurrent(CqExHooks* h, ibv_cq_ex* cq) {
  core::Completion c;
  c.wr_id = cq->wr_id;
  c.status = cq->status;
  // The opcode of an error completion is undefined: do not read it.
  c.opcode = (cq->status == IBV_WC_SUCCESS && h->read_opcode) ? h->read_opcode(cq) : 0;
  c.qp_num = h->read_qp_num ? h->read_qp_num(cq) : 0;
  c.byte_len = (cq->status == IBV_WC_SUCCESS && h->read_byte_len) ? h->read_byte_len(cq) : 0;
  c.vendor_err = (cq->status != IBV_WC_SUCCESS && h->read_vendor_err) ? h->read_vendor_err(cq) : 0;
  // A receive that invalidated a key (SEND_WITH_INV).
  if (cq->status == IBV_WC_SUCCESS && (c.opcode & IBV_WC_RECV) && h->read_wc_flags && h->read_imm_data &&
      (h->read_wc_flags(cq) & IBV_WC_WITH_INV))
    h->invs.push_back({c.qp_num, static_cast<uint32_t>(h->read_imm_data(cq)), c.wr_id});
  if (__builtin_expect(checkers::IsTmCompletion(c.status, c.opcode), 0)) {
    const uint32_t flags = cq->status != IBV_WC_SUCCESS ? 0
                           : h->read_wc_flags           ? h->read_wc_flags(cq)
                                                        : checkers::kTmFlagsUnknown;
    h->tms.push_back({static_cast<uint32_t>(h->batch.wcs.size()), flags});
  }
  h->batch.wcs.push_back(c);
}

void EmitBatch(CqExHooks* h, ibv_cq_ex* cq) {
  core::Event& e = h->batch;
  e.kind = core::EventKind::kPollCq;
  e.obj = Id(ibv_cq_ex_to_cq(cq));
  e.ret = 0;
  e.count = static_cast<uint32_t>(e.wcs.size());
  bool failed = false;
  for (const core::Completion& c : e.wcs) failed |= c.status != IBV_WC_SUCCESS;
  if (failed) EmitReasons(ibv_cq_ex_to_cq(cq), e);
  if (__builtin_expect(softnic::g_modified_pending.load(std::memory_order_relaxed) != 0, 0))
    EmitDestModified(ibv_cq_ex_to_cq(cq), e, 0, 0);
  for (const auto& [i, flags] : h->tms) EmitTmWc(e, e.wcs[i], flags);
  EmitPoll(e);
  if (!h->invs.empty()) EmitRemoteInvs(e, h->invs.data(), h->invs.size());
  h->invs.clear();
  h->tms.clear();
  e = core::Event();
}

int StartPollEx(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  CqExHooks* h = HooksOf(cq);
  if ((!h || __builtin_expect(AnyDestroyed(), 0)) &&
      wrap::RefuseDeadCall(ibv_cq_ex_to_cq(cq), cq->context, core::EventKind::kPollCq,
                           checkers::UadVerb::kStartPoll, -1, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  if (!h) return ENOENT;
  // thread-domain-race: a successful start_poll holds the CQ until end_poll.
  td::Gate* gate = nullptr;
  if (td::Active() && Reentry::Depth() == 0 && Checking() && (gate = td::GateOf(ibv_cq_ex_to_cq(cq))))
    td::Enter(gate, td::Verb::kCqExPoll, Id(ibv_cq_ex_to_cq(cq)), 0, RDMASAN_WRAPPER_PC,
              RDMASAN_WRAPPER_FRAME);
  int rc = h->start_poll(cq, attr);
  if (gate && rc != 0) td::Leave(gate);
  if (!Checking()) return rc;
  Reentry re;
  if (!re.outer()) return rc;
  h->batch = core::Event();
  h->invs.clear();
  h->tms.clear();
  h->batch.stack = RDMASAN_CAPTURE_CALLER_STACK();
  if (rc == ENOENT && watchdog::Enabled())
    watchdog::OnEmptyPoll(ibv_cq_ex_to_cq(cq), reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                          reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
  if (rc == 0) {
    RecordCurrent(h, cq);
  } else if (rc == ENOENT && g_armed_count.load(std::memory_order_relaxed) != 0) {
    // An empty poll of an armed CQ counts for notify-without-poll.
    bool armed;
    {
      std::lock_guard<std::mutex> l(g_armed_mu);
      armed = Armed().erase(ibv_cq_ex_to_cq(cq)) != 0;
      if (armed) g_armed_count.fetch_sub(1, std::memory_order_relaxed);
    }
    if (armed) EmitBatch(h, cq);
  }
  return rc;
}

int NextPollEx(ibv_cq_ex* cq) {
  CqExHooks* h = HooksOf(cq);
  if (!h && wrap::RefuseDeadCall(ibv_cq_ex_to_cq(cq), cq->context, core::EventKind::kPollCq,
                                 checkers::UadVerb::kNextPoll, -1, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  if (!h) return ENOENT;
  int rc = h->next_poll(cq);
  if (rc == 0 && Checking()) RecordCurrent(h, cq);
  return rc;
}

void EndPollEx(ibv_cq_ex* cq) {
  CqExHooks* h = HooksOf(cq);
  if (!h) return;
  h->end_poll(cq);
  if (td::Active() && Reentry::Depth() == 0)
    if (td::Gate* gate = td::GateOf(ibv_cq_ex_to_cq(cq))) td::Leave(gate);
  if (!Checking() || h->batch.wcs.empty()) return;
  Reentry re;
  if (!re.outer()) return;
  {
    std::lock_guard<std::mutex> l(g_armed_mu);
    if (Armed().erase(ibv_cq_ex_to_cq(cq))) g_armed_count.fetch_sub(1, std::memory_order_relaxed);
  }
  EmitBatch(h, cq);
}

void HookCqEx(ibv_cq_ex* cq) {
  auto* h = new CqExHooks{cq->start_poll,
                          cq->next_poll,
                          cq->end_poll,
                          cq->read_opcode,
                          cq->read_qp_num,
                          cq->read_byte_len,
                          cq->read_vendor_err,
                          cq->read_wc_flags,
                          cq->read_imm_data,
                          core::Event(),
                          {},
                          {}};
  if (!h->start_poll || !h->next_poll || !h->end_poll || !g_cq_ex.Put(cq, reinterpret_cast<uint64_t>(h))) {
    delete h;
    return;
  }
  cq->start_poll = StartPollEx;
  cq->next_poll = NextPollEx;
  cq->end_poll = EndPollEx;
}

}  // namespace

ibv_cq_ex* CreateCqEx(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  Saved* s = Find(ctx);
  Bump(GetCounters().create_cq_ex);
  if (!s && wrap::RefuseDeadCall(nullptr, ctx, core::EventKind::kCreateCq, checkers::UadVerb::kCreateCqEx, -1,
                                 RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return nullptr;
  if (!s || !s->create_cq_ex) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  const bool scheduled = re.outer() && sched::On();
  const int injected =
      re.outer() && FaultActive(core::Point::kCreateCq) ? CallFault(core::Point::kCreateCq, Id(ctx)) : 0;
  if (!injected && !re.outer()) return s->create_cq_ex(ctx, attr);
  if (!injected && !Checking() && !scheduled) {
    ibv_cq_ex* cq = s->create_cq_ex(ctx, attr);
    ForgetDestroyed(cq ? ibv_cq_ex_to_cq(cq) : nullptr);  // a new object at a destroyed one's address
    return cq;
  }
  const core::StackId stack = Checking() ? RDMASAN_CAPTURE_CALLER_STACK() : 0;
  if (injected) {
    errno = injected;  // an injected failure, as ibv_create_cq_ex(3) fails
    if (Checking()) OnCreateCq(nullptr, ctx, attr->channel, stack);
    return nullptr;
  }
  // Completions must name their QP for the books and the scheduler's
  // streams, and a receive that invalidated a window its key
  // (ibv_wc_read_invalidated_rkey reads the immediate-data field): ask for
  // both (extras the program does not see), unless the provider refuses.
  const uint64_t asked = attr->wc_flags;
  const uint64_t tries[] = {asked | IBV_WC_EX_WITH_QP_NUM | IBV_WC_EX_WITH_IMM, asked | IBV_WC_EX_WITH_QP_NUM,
                            asked};
  ibv_cq_ex* cq = nullptr;
  uint64_t got_flags = asked;
  for (size_t i = 0; i < 3 && !cq; ++i) {
    if (i > 0 && tries[i] == tries[i - 1]) continue;
    attr->wc_flags = tries[i];
    cq = s->create_cq_ex(ctx, attr);
    got_flags = attr->wc_flags;
    attr->wc_flags = asked;
  }
  if (Checking())
    OnCreateCq(cq ? ibv_cq_ex_to_cq(cq) : nullptr, ctx, attr->channel, stack);
  else
    ForgetDestroyed(cq ? ibv_cq_ex_to_cq(cq) : nullptr);
  // The scheduler's hooks go under the checking layer's: the checking
  // layer reads what the scheduler serves.
  if (cq && scheduled) sched::HookCqEx(cq, got_flags);
  if (cq && Checking()) HookCqEx(cq);
  // A CQ made with a parent domain that has a thread domain (thread-domain-race).
  if (cq && Checking() && (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD))
    td::Bind(ibv_cq_ex_to_cq(cq), attr->parent_domain);
  return cq;
}

}  // namespace wrap

void RefuseOnDestroyedCqEx(ibv_cq_ex* cq) {
  cq->start_poll = wrap::StartPollEx;
  cq->next_poll = wrap::NextPollEx;
}

void ForgetCq(ibv_cq* cq) {
  if (sched::On()) sched::ForgetCq(cq);
  auto* h = reinterpret_cast<wrap::CqExHooks*>(wrap::g_cq_ex.Get(cq));
  if (!h) return;
  wrap::g_cq_ex.Erase(cq);
  wrap::RetireLater(h, [](void* p) { delete static_cast<wrap::CqExHooks*>(p); });
}

}  // namespace rdmasan::interpose
