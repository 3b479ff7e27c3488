// Data-path pointer swapping for real provider contexts (see interpose.h).
// This file: contexts, posts, polls, the extended CQ; wrap_qp_ex.cc,
// wrap_mw.cc and wrap_create.cc have the rest (wrap_internal.h).  A call
// that reaches a wrapper through a dead handle, a closed context's ops or
// (UD) a destroyed AH is refused with EINVAL (use-after-destroy), checking
// on or off; until the program destroys something that costs one load per
// post or poll, after it a filter lookup of the handle.
//
// The provider's original pointers are kept in a small fixed table keyed by
// context address: lookups are lock-free (a linear probe over atomics), so
// pass-through costs a few nanoseconds and never serializes threads.
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>

#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/domains.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/memory.h"
#include "interpose/ptr_table.h"
#include "interpose/sched.h"
#include "interpose/watchdog.h"
#include "interpose/wrap_internal.h"
#include "softnic/softnic.h"

namespace rdmasan::interpose {

thread_local int Reentry::depth_ = 0;

namespace wrap {
namespace {

// Constant-initialized (a context opened from another library's
// constructor is saved here before this library's initialisers run; a
// dynamic initializer would then wipe it).
constexpr int kSlots = 64;
constinit Saved g_saved[kSlots];

}  // namespace

Saved* Find(const ibv_context* ctx) {
  for (int i = 0; i < kSlots; ++i)
    if (g_saved[i].ctx.load(std::memory_order_acquire) == ctx) return &g_saved[i];
  return nullptr;
}

// Opcodes whose local SGEs are read by the NIC (the payload sent).
bool SourcesPayload(uint32_t op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV || op == IBV_WR_ATOMIC_WRITE;
}

// Hashes the payloads the NIC will read (buffer-modified-in-flight), if
// this post is among those the buffer_check option samples.
void HashSendPayloads(core::Event* e) {
  if (!SamplePost()) return;
  for (auto& w : e->send_wrs) {
    if ((w.send_flags & IBV_SEND_INLINE) || !SourcesPayload(w.opcode)) continue;
    for (auto& g : w.sges) g.hash = HashPayload(g.addr, g.length);
  }
}

}  // namespace wrap

namespace {

using wrap::AllocMw;
using wrap::BindMw;
using wrap::Bump;
using wrap::CreateQpEx;
using wrap::CreateSrqEx;
using wrap::DeallocMw;
using wrap::Find;
using wrap::HashSendPayloads;
using wrap::HookQpEx;
using wrap::Saved;

std::mutex g_mu;  // writers only
using wrap::g_saved;

Counters g_counters;

// CQs armed and not polled since: their empty polls matter to the
// notify-without-poll check; every other empty poll is not an event.
std::mutex g_armed_mu;                         // std::mutex: visible to TSan
absl::flat_hash_set<const ibv_cq*>& Armed() {  // made on first use
  static auto* const armed = new absl::flat_hash_set<const ibv_cq*>();
  return *armed;
}
std::atomic<int> g_armed_count{0};

// Each thread's events of the busiest kinds, reused: their vectors keep
// their storage, so a steady stream of posts and polls neither constructs
// nor frees one (a fresh event costs more than many of the checks).  After
// the thread's destructors ran (a verbs call from a later destructor), a
// call gets a fresh event.
thread_local bool t_events_gone = false;
struct ThreadEvents {
  core::Event post_send, poll;
  ~ThreadEvents() { t_events_gone = true; }
};
thread_local ThreadEvents t_events;

// `reused` for a new call of `kind`.  Only that kind's calls use it, and
// each writes every field that kind's events carry (seq and time are
// written whenever the run is traced, and stay 0 otherwise); what a call
// writes only sometimes (a failed post's bad_index, a failed poll's
// stack), it resets itself.
inline core::Event& FreshEvent(core::Event& reused, std::unique_ptr<core::Event>& spare,
                               core::EventKind kind) {
  core::Event& e = t_events_gone ? *(spare = std::make_unique<core::Event>()) : reused;
  e.kind = kind;
  return e;
}

// A post to a dead QP or SRQ, or to one of a closed context, or (UD) a
// WR through a destroyed AH: refused whole (*bad is the first WR, none is
// posted), with an event naming the dead object (checking on).  Reached
// only when the context has no saved pointers or something was destroyed.
template <typename Wr>
void FillChain(core::Event& e, const void* wr) {
  e.bad_index = 0;
  if constexpr (std::is_same_v<Wr, ibv_send_wr>)
    CopySendChain(static_cast<const ibv_send_wr*>(wr), nullptr, &e, false, 0);
  else
    CopyRecvChain(static_cast<const ibv_recv_wr*>(wr), static_cast<const ibv_recv_wr*>(wr), &e, 0);
}
template <typename Wr>
[[gnu::noinline]] bool RefusedPost(const void* obj, const ibv_context* ctx, core::EventKind kind, Wr* wr,
                                   Wr** bad, uintptr_t pc, uintptr_t frame) {
  if (wrap::RefuseDeadCall(obj, ctx, kind, checkers::UadVerb::kByKind, EINVAL, pc, frame, FillChain<Wr>,
                           wr)) {
    *bad = wr;
    return true;
  }
  if constexpr (std::is_same_v<Wr, ibv_send_wr>) {
    if (static_cast<const ibv_qp*>(obj)->qp_type != IBV_QPT_UD) return false;
    uint32_t i = 0;
    for (const ibv_send_wr* w = wr; w && i < 4096; w = w->next, ++i) {
      const ibv_ah* ah = w->wr.ud.ah;
      const core::ObjId old = DestroyedId(ah);
      if (!old) continue;
      if (Checking() && old != kUnknownObj) {
        core::Event e;
        e.kind = kind;
        e.ret = EINVAL;
        e.err = EINVAL;
        e.bad_index = 0;
        e.stack = core::CaptureStackFrom(pc, frame);
        core::SendWr& s = e.send_wrs.emplace_back();
        s.wr_id = w->wr_id;
        s.opcode = w->opcode;
        s.ah = old;
        Emit(e);
      }
      errno = EINVAL;
      *bad = wr;
      return true;
    }
  }
  return false;
}

}  // namespace

void wrap::RetireLater(void* p, void (*del)(void*)) {
  static constinit std::mutex mu;
  static constinit std::pair<void*, void (*)(void*)> ring[kRetiredHooks] = {};
  static constinit size_t next = 0;
  std::pair<void*, void (*)(void*)> evicted;
  {
    std::lock_guard<std::mutex> l(mu);
    evicted = ring[next];
    ring[next] = {p, del};
    next = (next + 1) % kRetiredHooks;
  }
  if (evicted.first) evicted.second(evicted.first);
}

bool wrap::IsDead(const void* obj, const ibv_context* ctx) {
  // A record names only an address no live object has (a new object at a
  // recorded address drops the record, interpose/destroyed.h): the filter
  // alone answers for a live handle, with no lookup of its id.
  return DestroyedId(obj) || DestroyedId(ctx);
}

bool wrap::RefuseDeadCall(const void* obj, const ibv_context* ctx, core::EventKind kind,
                          checkers::UadVerb verb, int32_t ev_ret, uintptr_t pc, uintptr_t frame,
                          void (*fill)(core::Event&, const void*), const void* arg) {
  core::ObjId old = DestroyedId(obj);  // no id lookup: see IsDead
  const bool on_context = !old;
  if (!old) old = DestroyedId(ctx);
  if (!old) return false;
  if (Checking() && old != kUnknownObj) {
    core::Event e;
    e.kind = kind;
    (on_context ? e.parent : e.obj) = old;
    if (fill) fill(e, arg);
    e.attr_mask = static_cast<uint32_t>(verb);
    e.ret = ev_ret;
    e.err = EINVAL;
    e.stack = core::CaptureStackFrom(pc, frame);
    Emit(e);
  }
  errno = EINVAL;
  return true;
}

namespace {

// The index of `bad` among the first `n` WRs of a chain (its last
// occurrence: in a cyclic chain the provider refuses the WR only after it
// placed what fit), or n if it is not among them.
uint32_t BadIndex(const ibv_send_wr* wr, const ibv_send_wr* bad, uint32_t n) {
  uint32_t at = n, i = 0;
  for (; wr && i < n; wr = wr->next, ++i)
    if (wr == bad) at = i;
  return at;
}

// ------------------------------------------------------- post faults --
// An injected post failure (interpose/faults.h) as a provider fails: the
// WRs before the chosen one are posted, *bad points at the chosen one, the
// call returns the errno.  The prefix is posted from a shallow copy of its
// WRs (the program's chain is never modified).
template <typename Wr, typename Obj, typename Post>
int PostPrefixThenFail(Obj* obj, Wr* wr, Wr** bad, uint32_t k, int err, Post post) {
  Wr* at = wr;
  for (uint32_t i = 0; i < k && at; ++i) at = at->next;
  if (k > 0) {
    absl::InlinedVector<Wr, 8> copy(k);
    Wr* w = wr;
    for (uint32_t i = 0; i < k; ++i, w = w->next) {
      copy[i] = *w;
      copy[i].next = i + 1 < k ? &copy[i + 1] : nullptr;
    }
    Wr* cbad = nullptr;
    if (int rc = post(obj, copy.data(), &cbad)) {
      // The provider refused one of the prefix itself: name the program's WR.
      Wr* orig = wr;
      for (Wr* c = copy.data(); c && c != cbad && orig; c = c->next) orig = orig->next;
      *bad = orig ? orig : wr;
      return rc;
    }
  }
  *bad = at ? at : wr;
  return err;
}

template <typename Wr>
uint32_t ChainLength(const Wr* wr, uint32_t bound) {
  uint32_t n = 0;
  for (; wr && n < bound; wr = wr->next) ++n;
  return n;
}

// The provider's post, unless fault point `p` fires for this chain.
template <typename Wr, typename Obj, typename Post>
int PostOrFault(core::Point p, Obj* obj, uint32_t qp_num, Wr* wr, Wr** bad, Post post) {
  if (__builtin_expect(!FaultActive(p), 1) || !wr) return post(obj, wr, bad);
  uint32_t k = 0;
  const int err = PostFault(p, Id(obj), qp_num, ChainLength(wr, 65536), &k);
  return err ? PostPrefixThenFail(obj, wr, bad, k, err, post) : post(obj, wr, bad);
}

int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Saved* s = Find(qp->context);
  if (!s || __builtin_expect(AnyDestroyed(), 0)) {
    if (RefusedPost(qp, qp->context, core::EventKind::kPostSend, wr, bad, RDMASAN_WRAPPER_PC,
                    RDMASAN_WRAPPER_FRAME))
      return EINVAL;
    if (!s) return *bad = wr, ENODEV;
  }
  if (__builtin_expect(AnyAsyncActive(), 0) && Reentry::Depth() == 0) MaybeInjectAsync(qp);
  if (!Checking()) return PostOrFault(core::Point::kPostSend, qp, qp->qp_num, wr, bad, s->post_send);
  Bump(g_counters.post_send);
  Reentry re;
  if (!re.outer()) return s->post_send(qp, wr, bad);
  core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  // Copy (and hash the payloads) before the provider runs: the NIC may read
  // the buffers from the moment of the post.
  std::unique_ptr<core::Event> spare;
  core::Event& e = FreshEvent(t_events.post_send, spare, core::EventKind::kPostSend);
  e.bad_index = UINT32_MAX;
  e.obj = Id(qp);
  e.stack = stack;
  const ObjLimits lim = Limits(qp);
  const uint32_t copied = CopySendChain(wr, nullptr, &e, qp->qp_type == IBV_QPT_UD, lim.max_send_sge,
                                        ChainBound(lim.max_send_wr, 4096));
  HashSendPayloads(&e);
  int rc = PostOrFault(core::Point::kPostSend, qp, qp->qp_num, wr, bad, s->post_send);
  e.ret = rc;
  e.err = rc;
  if (rc) e.bad_index = BadIndex(wr, *bad, copied);
  Emit(e);
  return rc;
}

int PostRecvCommon(core::EventKind kind, const void* obj, ibv_recv_wr* wr, ibv_recv_wr** bad, int rc,
                   core::StackId stack) {
  core::Event e;
  e.kind = kind;
  e.obj = Id(obj);
  e.ret = rc;
  e.err = rc;
  e.stack = stack;
  const ObjLimits lim = Limits(obj);
  CopyRecvChain(wr, rc ? *bad : nullptr, &e, lim.max_recv_sge, ChainBound(lim.max_recv_wr, 65536));
  Emit(e);
  return rc;
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Saved* s = Find(qp->context);
  if (!s || __builtin_expect(AnyDestroyed(), 0)) {
    if (RefusedPost(qp, qp->context, core::EventKind::kPostRecv, wr, bad, RDMASAN_WRAPPER_PC,
                    RDMASAN_WRAPPER_FRAME))
      return EINVAL;
    if (!s) return *bad = wr, ENODEV;
  }
  if (!Checking()) return PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, s->post_recv);
  Bump(g_counters.post_recv);
  Reentry re;
  if (!re.outer()) return s->post_recv(qp, wr, bad);
  core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  return PostRecvCommon(core::EventKind::kPostRecv, qp, wr, bad,
                        PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, s->post_recv), stack);
}

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Saved* s = Find(srq->context);
  if ((!s || __builtin_expect(AnyDestroyed(), 0)) &&
      RefusedPost(srq, srq->context, core::EventKind::kPostSrqRecv, wr, bad, RDMASAN_WRAPPER_PC,
                  RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  Bump(g_counters.post_srq_recv);
  if (!s || !s->post_srq_recv) {
    *bad = wr;
    return s ? EOPNOTSUPP : ENODEV;
  }
  Reentry re;
  if (!re.outer()) return s->post_srq_recv(srq, wr, bad);
  if (!Checking()) return PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, s->post_srq_recv);
  core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  return PostRecvCommon(core::EventKind::kPostSrqRecv, srq, wr, bad,
                        PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, s->post_srq_recv), stack);
}

// SGEs copied of a TAG_ADD (a provider takes a few; more is refused).
constexpr uint32_t kMaxTagSges = 64;

// ibv_post_srq_ops (inline in verbs.h, through the context's op): tag
// list operations of a TM SRQ.  The event is copied after the provider
// ran: a TAG_ADD's handle is what the provider wrote into the WR.
int PostSrqOps(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad) {
  Saved* s = Find(srq->context);
  if ((!s || __builtin_expect(AnyDestroyed(), 0)) &&
      wrap::RefuseDeadCall(srq, srq->context, core::EventKind::kPostSrqOps, checkers::UadVerb::kByKind,
                           EINVAL, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return *bad = wr, EINVAL;
  if (!s || !s->post_srq_ops) {
    *bad = wr;
    return s ? EOPNOTSUPP : ENODEV;
  }
  Reentry re;
  if (!re.outer() || !Checking()) return s->post_srq_ops(srq, wr, bad);
  core::Event e;
  e.kind = core::EventKind::kPostSrqOps;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  e.obj = Id(srq);
  const int rc = s->post_srq_ops(srq, wr, bad);
  e.ret = rc;
  e.err = rc;
  CopyOpsChain(wr, rc ? *bad : nullptr, &e, kMaxTagSges);
  Emit(e);
  return rc;
}

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
void EmitPoll(core::Event& e, uintptr_t pc = 0, uintptr_t frame = 0) {
  // Reused by each thread: a steady stream of polls does not allocate.
  thread_local std::vector<checkers::RetiredWr> retired;
  retired.clear();
  Emit(e, &retired);
  if (retired.empty()) return;
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
    if (!r.stack) r.stack = e.stack ? e.stack : pc ? core::CaptureStackFrom(pc, frame) : 0;
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

// The provider's poll, through the completion scheduler when the run
// reorders or injects error completions (one predictable branch if not).
inline int ProviderPoll(sched::PollFn provider, ibv_cq* cq, int n, ibv_wc* wc) {
  return sched::On() ? sched::Poll(cq, n, wc, provider) : provider(cq, n, wc);
}

int PollCq(ibv_cq* cq, int n, ibv_wc* wc) {
  Saved* s = Find(cq->context);
  if ((!s || __builtin_expect(AnyDestroyed(), 0)) &&
      wrap::RefuseDeadCall(cq, cq->context, core::EventKind::kPollCq, checkers::UadVerb::kByKind, -1,
                           RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return -1;
  if (!s) return -1;
  if (!Checking()) return ProviderPoll(s->poll_cq, cq, n, wc);
  Bump(g_counters.poll_cq);
  Reentry re;
  int got = ProviderPoll(s->poll_cq, cq, n, wc);
  if (!re.outer()) return got;
  if (got == 0 && watchdog::Enabled())
    watchdog::OnEmptyPoll(cq, reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                          reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
  if (got <= 0) {
    if (got < 0 || g_armed_count.load(std::memory_order_relaxed) == 0) return got;
    std::lock_guard<std::mutex> l(g_armed_mu);
    if (!Armed().erase(cq)) return got;
    g_armed_count.fetch_sub(1, std::memory_order_relaxed);
  }
  std::unique_ptr<core::Event> spare;
  core::Event& e = FreshEvent(t_events.poll, spare, core::EventKind::kPollCq);
  e.stack = 0;
  e.obj = Id(cq);
  e.ret = got < 0 ? -1 : 0;
  e.count = n;
  bool failed = got < 0;
  bool invalidated = false;
  bool tm = false;
  e.wcs.resize(got > 0 ? got : 0);
  core::Completion* out = e.wcs.data();
  for (int i = 0; i < got; ++i) {
    // Field by field into the element: a whole Completion built on the
    // stack and copied out is read back (16 bytes at a time) before its
    // narrow stores have landed, a store-forwarding stall per completion.
    core::Completion& c = out[i];
    c.wr_id = wc[i].wr_id;
    c.status = wc[i].status;
    // An error completion's opcode is undefined (and may be poison that
    // is no ibv_wc_opcode): read its bytes, not the enum.
    std::memcpy(&c.opcode, &wc[i].opcode, sizeof(c.opcode));
    c.qp_num = wc[i].qp_num;
    c.byte_len = wc[i].byte_len;
    c.vendor_err = wc[i].vendor_err;
    failed |= wc[i].status != IBV_WC_SUCCESS;
    invalidated |= wc[i].status == IBV_WC_SUCCESS && (wc[i].wc_flags & IBV_WC_WITH_INV);
    tm |= checkers::IsTmCompletion(c.status, c.opcode);
  }
  // A poll's stack is what error completions and modified payloads are
  // reported at; a clean poll, the common case by far, needs none.
  const auto pc = reinterpret_cast<uintptr_t>(__builtin_return_address(0));
  const auto frame = reinterpret_cast<uintptr_t>(__builtin_frame_address(0));
  if (failed || invalidated || tm) e.stack = core::CaptureStackFrom(pc, frame);
  if (failed) EmitReasons(cq, e);
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

int ReqNotifyCq(ibv_cq* cq, int solicited_only) {
  Saved* s = Find(cq->context);
  Bump(g_counters.req_notify_cq);
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
  int rc = h->start_poll(cq, attr);
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

ibv_cq_ex* CreateCqEx(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  Saved* s = Find(ctx);
  Bump(g_counters.create_cq_ex);
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
  if (!injected && (!re.outer() || (!Checking() && !scheduled))) return s->create_cq_ex(ctx, attr);
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
  if (Checking()) OnCreateCq(cq ? ibv_cq_ex_to_cq(cq) : nullptr, ctx, attr->channel, stack);
  // The scheduler's hooks go under the checking layer's: the checking
  // layer reads what the scheduler serves.
  if (cq && scheduled) sched::HookCqEx(cq, got_flags);
  if (cq && Checking()) HookCqEx(cq);
  return cq;
}

int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) {
  Saved* s = Find(ctx);
  Bump(g_counters.query_port);
  if (!s || !s->query_port) return EOPNOTSUPP;
  return s->query_port(ctx, port, attr, len);
}

bool HasOp(verbs_context* v, size_t offset) {
  // verbs_get_ctx_op's rule: the op exists if the provider's struct is big
  // enough to hold it.
  return v && v->sz >= sizeof(*v) - offset;
}

}  // namespace

Counters& GetCounters() { return g_counters; }

bool IsWrapped(const ibv_context* ctx) { return Find(ctx) != nullptr; }

void WrapRealContext(ibv_context* ctx) { WrapContext(ctx, /*softnic=*/false); }

void WrapContext(ibv_context* ctx, bool /*softnic: wrapped alike*/) {
  if (!ctx) return;
  WrapDomainOps(ctx);
  std::lock_guard<std::mutex> g(g_mu);
  if (Find(ctx)) return;
  Saved* s = nullptr;
  for (auto& e : g_saved)
    if (!e.ctx.load(std::memory_order_relaxed)) {
      s = &e;
      break;
    }
  if (!s) return;  // more contexts than slots: leave this one unwrapped
  s->post_send = ctx->ops.post_send;
  s->post_recv = ctx->ops.post_recv;
  s->post_srq_recv = ctx->ops.post_srq_recv;
  s->poll_cq = ctx->ops.poll_cq;
  s->req_notify_cq = ctx->ops.req_notify_cq;
  verbs_context* v = verbs_get_ctx(ctx);
  s->create_cq_ex = HasOp(v, offsetof(verbs_context, create_cq_ex)) ? v->create_cq_ex : nullptr;
  s->create_qp_ex = HasOp(v, offsetof(verbs_context, create_qp_ex)) ? v->create_qp_ex : nullptr;
  s->create_srq_ex = HasOp(v, offsetof(verbs_context, create_srq_ex)) ? v->create_srq_ex : nullptr;
  s->query_port = HasOp(v, offsetof(verbs_context, query_port)) ? v->query_port : nullptr;
  s->alloc_mw = ctx->ops.alloc_mw;
  s->dealloc_mw = ctx->ops.dealloc_mw;
  s->bind_mw = ctx->ops.bind_mw;
  s->post_srq_ops = HasOp(v, offsetof(verbs_context, post_srq_ops)) ? v->post_srq_ops : nullptr;
  s->ctx.store(ctx, std::memory_order_release);
  if (s->post_send) ctx->ops.post_send = PostSend;
  if (s->post_recv) ctx->ops.post_recv = PostRecv;
  if (s->post_srq_recv) ctx->ops.post_srq_recv = PostSrqRecv;
  if (s->poll_cq) ctx->ops.poll_cq = PollCq;
  if (s->req_notify_cq) ctx->ops.req_notify_cq = ReqNotifyCq;
  if (s->create_cq_ex) v->create_cq_ex = CreateCqEx;
  if (s->create_qp_ex) v->create_qp_ex = CreateQpEx;
  if (s->create_srq_ex) v->create_srq_ex = CreateSrqEx;
  if (s->query_port) v->query_port = QueryPort;
  if (s->alloc_mw) ctx->ops.alloc_mw = AllocMw;
  if (s->dealloc_mw) ctx->ops.dealloc_mw = DeallocMw;
  if (s->bind_mw) ctx->ops.bind_mw = BindMw;
  if (s->post_srq_ops) v->post_srq_ops = PostSrqOps;
}

void RefuseOnClosedContext(ibv_context* ctx) {
  // The block is the shim's now (held back at the close): no provider
  // reads these pointers again, and no Saved slot names it.
  ctx->ops.post_send = PostSend;
  ctx->ops.post_recv = PostRecv;
  ctx->ops.post_srq_recv = PostSrqRecv;
  ctx->ops.poll_cq = PollCq;
  ctx->ops.req_notify_cq = ReqNotifyCq;
  ctx->ops.alloc_mw = AllocMw;
  ctx->ops.dealloc_mw = DeallocMw;
  ctx->ops.bind_mw = BindMw;
  verbs_context* v = verbs_get_ctx(ctx);
  if (HasOp(v, offsetof(verbs_context, create_cq_ex))) v->create_cq_ex = CreateCqEx;
  if (HasOp(v, offsetof(verbs_context, create_qp_ex))) v->create_qp_ex = CreateQpEx;
  if (HasOp(v, offsetof(verbs_context, create_srq_ex))) v->create_srq_ex = CreateSrqEx;
  if (HasOp(v, offsetof(verbs_context, post_srq_ops))) v->post_srq_ops = PostSrqOps;
}

void RefuseOnDestroyedCqEx(ibv_cq_ex* cq) {
  cq->start_poll = StartPollEx;
  cq->next_poll = NextPollEx;
}

void ForgetCq(ibv_cq* cq) {
  if (sched::On()) sched::ForgetCq(cq);
  auto* h = reinterpret_cast<CqExHooks*>(g_cq_ex.Get(cq));
  if (!h) return;
  g_cq_ex.Erase(cq);
  wrap::RetireLater(h, [](void* p) { delete static_cast<CqExHooks*>(p); });
}

void UnwrapRealContext(ibv_context* ctx) {
  UnwrapDomainOps(ctx);
  std::lock_guard<std::mutex> g(g_mu);
  Saved* s = Find(ctx);
  if (!s) return;
  ctx->ops.post_send = s->post_send;
  ctx->ops.post_recv = s->post_recv;
  ctx->ops.post_srq_recv = s->post_srq_recv;
  ctx->ops.poll_cq = s->poll_cq;
  ctx->ops.req_notify_cq = s->req_notify_cq;
  if (s->alloc_mw) ctx->ops.alloc_mw = s->alloc_mw;
  if (s->dealloc_mw) ctx->ops.dealloc_mw = s->dealloc_mw;
  if (s->bind_mw) ctx->ops.bind_mw = s->bind_mw;
  if (verbs_context* v = verbs_get_ctx(ctx)) {
    if (s->create_cq_ex) v->create_cq_ex = s->create_cq_ex;
    if (s->create_qp_ex) v->create_qp_ex = s->create_qp_ex;
    if (s->create_srq_ex) v->create_srq_ex = s->create_srq_ex;
    if (s->query_port) v->query_port = s->query_port;
    if (s->post_srq_ops) v->post_srq_ops = s->post_srq_ops;
  }
  s->ctx.store(nullptr, std::memory_order_release);
}

}  // namespace rdmasan::interpose
