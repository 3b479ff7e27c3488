// Data-path pointer swapping for real provider contexts (see interpose.h).
//
// The provider's original pointers are kept in a small fixed table keyed by
// context address: lookups are lock-free (a linear probe over atomics), so
// pass-through costs a few nanoseconds and never serializes threads.
#include <dlfcn.h>

#include <cstring>
#include <memory>
#include <mutex>
#include <string>

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
#include "softnic/softnic.h"

namespace rdmasan::interpose {

thread_local int Reentry::depth_ = 0;

namespace {

struct Saved {
  std::atomic<ibv_context*> ctx{nullptr};
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**) = nullptr;
  int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) = nullptr;
  int (*post_srq_recv)(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**) = nullptr;
  int (*poll_cq)(ibv_cq*, int, ibv_wc*) = nullptr;
  int (*req_notify_cq)(ibv_cq*, int) = nullptr;
  ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*) = nullptr;
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*) = nullptr;
  ibv_srq* (*create_srq_ex)(ibv_context*, ibv_srq_init_attr_ex*) = nullptr;
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*, size_t) = nullptr;
  ibv_mw* (*alloc_mw)(ibv_pd*, ibv_mw_type) = nullptr;
  int (*dealloc_mw)(ibv_mw*) = nullptr;
  int (*bind_mw)(ibv_qp*, ibv_mw*, ibv_mw_bind*) = nullptr;
  int (*post_srq_ops)(ibv_srq*, ibv_ops_wr*, ibv_ops_wr**) = nullptr;
};

// Constant-initialized (a context opened from another library's
// constructor is saved here before this library's initialisers run; a
// dynamic initializer would then wipe it).
constexpr int kSlots = 64;
constinit Saved g_saved[kSlots];
std::mutex g_mu;  // writers only

Saved* Find(const ibv_context* ctx) {
  for (int i = 0; i < kSlots; ++i)
    if (g_saved[i].ctx.load(std::memory_order_acquire) == ctx) return &g_saved[i];
  return nullptr;
}

Counters g_counters;

// Diagnostic counts of wrapped calls that were checked: a relaxed load and
// store, not a locked add (concurrent bumps may lose a count; nothing
// depends on exact totals under threads).  Pass-through counts nothing.
inline void Bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
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

// A data-path call on a destroyed QP, SRQ or CQ (its block held back by
// the destroy, interpose/destroyed.h): an event naming the id it had, for
// use-after-destroy, and the call refused; the provider is not called.
// `fill` completes the event (the WR chain of a post).  False for a live
// or unknown object (one lookup in the thread's cache of objects).
template <typename Fill>
[[gnu::noinline]] bool RefusedAsDestroyed(const void* obj, core::EventKind kind, uintptr_t pc,
                                          uintptr_t frame, Fill fill) {
  const core::ObjId old = DestroyedId(obj);
  if (!old) return false;
  core::Event e;
  e.kind = kind;
  e.obj = old;
  e.ret = kind == core::EventKind::kPollCq ? -1 : EINVAL;
  e.err = EINVAL;
  e.stack = core::CaptureStackFrom(pc, frame);
  fill(e);
  Emit(e);
  errno = EINVAL;
  return true;
}
#define RDMASAN_REFUSE_DESTROYED(obj, kind, fill)                                          \
  (AnyDestroyed() && Id(obj) == 0 &&                                                       \
   RefusedAsDestroyed(obj, kind, reinterpret_cast<uintptr_t>(__builtin_return_address(0)), \
                      reinterpret_cast<uintptr_t>(__builtin_frame_address(0)), fill))

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
  if (!s) {
    *bad = wr;
    return ENODEV;
  }
  if (__builtin_expect(AnyAsyncActive(), 0) && Reentry::Depth() == 0) MaybeInjectAsync(qp);
  if (!Checking()) return PostOrFault(core::Point::kPostSend, qp, qp->qp_num, wr, bad, s->post_send);
  Bump(g_counters.post_send);
  Reentry re;
  if (!re.outer()) return s->post_send(qp, wr, bad);
  if (RDMASAN_REFUSE_DESTROYED(qp, core::EventKind::kPostSend, [&](core::Event& e) {
        e.bad_index = 0;
        CopySendChain(wr, nullptr, &e, false, 0);
      })) {
    *bad = wr;
    return EINVAL;
  }
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
  if (!s) {
    *bad = wr;
    return ENODEV;
  }
  if (!Checking()) return PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, s->post_recv);
  Bump(g_counters.post_recv);
  Reentry re;
  if (!re.outer()) return s->post_recv(qp, wr, bad);
  if (RDMASAN_REFUSE_DESTROYED(qp, core::EventKind::kPostRecv,
                               [&](core::Event& e) { CopyRecvChain(wr, wr, &e, 0); })) {
    *bad = wr;
    return EINVAL;
  }
  core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  return PostRecvCommon(core::EventKind::kPostRecv, qp, wr, bad,
                        PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, s->post_recv), stack);
}

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Saved* s = Find(srq->context);
  Bump(g_counters.post_srq_recv);
  if (!s || !s->post_srq_recv) {
    *bad = wr;
    return s ? EOPNOTSUPP : ENODEV;
  }
  Reentry re;
  if (!re.outer()) return s->post_srq_recv(srq, wr, bad);
  if (!Checking()) return PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, s->post_srq_recv);
  if (RDMASAN_REFUSE_DESTROYED(srq, core::EventKind::kPostSrqRecv,
                               [&](core::Event& e) { CopyRecvChain(wr, wr, &e, 0); })) {
    *bad = wr;
    return EINVAL;
  }
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
  if (!s) return -1;
  if (!Checking()) return ProviderPoll(s->poll_cq, cq, n, wc);
  Bump(g_counters.poll_cq);
  Reentry re;
  if (re.outer() &&
      RDMASAN_REFUSE_DESTROYED(cq, core::EventKind::kPollCq, [&](core::Event& e) { e.count = n; }))
    return -1;
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
  if (!s) return ENODEV;
  Reentry re;
  if (re.outer() && Checking() &&
      RDMASAN_REFUSE_DESTROYED(cq, core::EventKind::kReqNotifyCq,
                               [&](core::Event& e) { e.count = solicited_only; }))
    return EINVAL;
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

// ---------------------------------------------------- ibv_qp_ex shadows --
// A provider's ibv_wr_* calls build its batch on their own terms (a real
// one writes WQEs directly; softnic refuses a WR past max_send_wr or an
// inline payload past its limit, and fails the whole batch at complete):
// on every provider each setter is wrapped to build a copy of the batch as
// the application built it, which becomes one kPostSend event at
// ibv_wr_complete, with the stack of that call and the payload hashes taken
// there, before the provider rings the doorbell.  Every entry holds the
// re-entry guard: what the provider does inside (softnic posts the batch
// through ops.post_send) is not the application's call.  One batch per QP
// at a time, as the API requires.
struct WrHooks {
  ibv_qp_ex orig;  // the provider's function pointers
  core::Event batch;
  bool open = false;
};
PtrTable g_qp_ex;

WrHooks* WrHooksOf(ibv_qp_ex* q) { return reinterpret_cast<WrHooks*>(g_qp_ex.Get(q)); }

core::SendWr* NewShadowWr(WrHooks* h, ibv_qp_ex* q, uint32_t opcode) {
  if (!h->open) return nullptr;
  core::SendWr w;
  w.wr_id = q->wr_id;
  w.opcode = opcode;
  w.send_flags = q->wr_flags;
  h->batch.send_wrs.push_back(std::move(w));
  return &h->batch.send_wrs.back();
}

core::SendWr* LastShadowWr(WrHooks* h) {
  return h->open && !h->batch.send_wrs.empty() ? &h->batch.send_wrs.back() : nullptr;
}

void ShStart(ibv_qp_ex* q) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_start(q);
  h->batch = core::Event();
  h->batch.kind = core::EventKind::kPostSend;
  h->batch.obj = Id(&q->qp_base);
  h->open = Checking() && re.outer();
}

void ShSend(ibv_qp_ex* q) {
  Reentry re;
  if (WrHooks* h = WrHooksOf(q)) h->orig.wr_send(q), NewShadowWr(h, q, IBV_WR_SEND);
}
void ShSendImm(ibv_qp_ex* q, __be32 imm) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_send_imm(q, imm);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void ShRdma(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint32_t op) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  if (op == IBV_WR_RDMA_WRITE)
    h->orig.wr_rdma_write(q, rkey, addr);
  else
    h->orig.wr_rdma_read(q, rkey, addr);
  if (core::SendWr* w = NewShadowWr(h, q, op)) w->remote_addr = addr, w->rkey = rkey;
}
void ShWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) { ShRdma(q, rkey, addr, IBV_WR_RDMA_WRITE); }
void ShRead(ibv_qp_ex* q, uint32_t rkey, uint64_t addr) { ShRdma(q, rkey, addr, IBV_WR_RDMA_READ); }
void ShWriteImm(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, __be32 imm) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_rdma_write_imm(q, rkey, addr, imm);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_RDMA_WRITE_WITH_IMM))
    w->remote_addr = addr, w->rkey = rkey, w->imm_data = imm;
}
void ShCas(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_atomic_cmp_swp(q, rkey, addr, compare, swap);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_ATOMIC_CMP_AND_SWP))
    w->remote_addr = addr, w->rkey = rkey, w->compare_add = compare, w->swap = swap;
}
void ShFaa(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_atomic_fetch_add(q, rkey, addr, add);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_ATOMIC_FETCH_AND_ADD))
    w->remote_addr = addr, w->rkey = rkey, w->compare_add = add;
}
// The 8-byte value is copied into the WQE at the call (as inline data is),
// so the WR has no SGE: no key, no buffer the checks must follow.
void ShAtomicWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* value) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_atomic_write(q, rkey, addr, value);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_ATOMIC_WRITE)) w->remote_addr = addr, w->rkey = rkey;
}
void ShSetSge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_set_sge(q, lkey, addr, length);
  if (core::SendWr* w = LastShadowWr(h)) {
    w->sges.assign(1, core::Sge{addr, length, lkey, 0, 0});
    w->num_sge = 1;
  }
}
void ShSetSgeList(ibv_qp_ex* q, size_t n, const ibv_sge* list) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_set_sge_list(q, n, list);
  if (core::SendWr* w = LastShadowWr(h)) {
    w->sges.clear();
    // None of a list longer than the QP allows: it is refused, and the
    // list may be shorter than n.
    const size_t readable = n <= Limits(&q->qp_base).max_send_sge ? std::min<size_t>(n, kMaxCopiedSges) : 0;
    for (size_t i = 0; list && i < readable; ++i)
      w->sges.push_back({list[i].addr, list[i].length, list[i].lkey, 0, 0});
    w->num_sge = static_cast<int32_t>(n);
  }
}
void ShSetInline(ibv_qp_ex* q, void* addr, size_t length) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_set_inline_data(q, addr, length);
  if (core::SendWr* w = LastShadowWr(h)) {
    w->send_flags |= IBV_SEND_INLINE;
    w->sges.assign(1, core::Sge{reinterpret_cast<uint64_t>(addr), static_cast<uint32_t>(length), 0, 0, 0});
    w->num_sge = 1;
  }
}
void ShSetInlineList(ibv_qp_ex* q, size_t n, const ibv_data_buf* bufs) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_set_inline_data_list(q, n, bufs);
  if (core::SendWr* w = LastShadowWr(h)) {
    w->send_flags |= IBV_SEND_INLINE;
    w->sges.clear();
    for (size_t i = 0; bufs && i < n && i < 1024; ++i)
      w->sges.push_back(
          {reinterpret_cast<uint64_t>(bufs[i].addr), static_cast<uint32_t>(bufs[i].length), 0, 0, 0});
    w->num_sge = static_cast<int32_t>(n);
  }
}
void ShSetUdAddr(ibv_qp_ex* q, ibv_ah* ah, uint32_t qpn, uint32_t qkey) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_set_ud_addr(q, ah, qpn, qkey);
  if (core::SendWr* w = LastShadowWr(h)) w->ah = Id(ah), w->remote_qpn = qpn;
}
void ShBindMw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_bind_mw(q, mw, rkey, info);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_BIND_MW)) {
    w->rkey = rkey;
    if (info) w->bind = {Id(mw), Id(info->mr), info->addr, info->length, info->mw_access_flags};
  }
}
void ShLocalInv(ibv_qp_ex* q, uint32_t rkey) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_local_inv(q, rkey);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_LOCAL_INV)) w->imm_data = rkey;
}
void ShSendInv(ibv_qp_ex* q, uint32_t rkey) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_send_inv(q, rkey);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_SEND_WITH_INV)) w->imm_data = rkey;
}
// ibv_wr_complete posts the batch all or nothing: an injected failure
// aborts the batch at the provider and returns the errno.
int CompleteOrFault(WrHooks* h, ibv_qp_ex* q, uint32_t n) {
  if (__builtin_expect(!FaultActive(core::Point::kPostSend), 1) || n == 0 || !h->orig.wr_abort)
    return h->orig.wr_complete(q);
  uint32_t k = 0;
  const int err = PostFault(core::Point::kPostSend, Id(&q->qp_base), q->qp_base.qp_num, n, &k);
  if (!err) return h->orig.wr_complete(q);
  h->orig.wr_abort(q);
  return err;
}

int ShComplete(ibv_qp_ex* q) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return EINVAL;
  if (!h->open) return CompleteOrFault(h, q, 1);
  h->open = false;
  h->batch.stack = RDMASAN_CAPTURE_CALLER_STACK();
  HashSendPayloads(&h->batch);
  int rc = CompleteOrFault(h, q, static_cast<uint32_t>(h->batch.send_wrs.size()));
  h->batch.ret = rc;
  h->batch.err = rc;
  if (rc) h->batch.bad_index = 0;  // wr_complete posts all or nothing
  Emit(h->batch);
  h->batch = core::Event();
  return rc;
}
void ShAbort(ibv_qp_ex* q) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if (!h) return;
  h->orig.wr_abort(q);
  h->open = false;
  h->batch = core::Event();
}

// Hooks a provider's qp_ex; every setter the provider offers is shadowed
// (those it leaves null stay null, so the inline verbs fail as before).
void HookQpEx(ibv_qp_ex* q) {
  if (!q || !q->wr_start || !q->wr_complete) return;
  auto* h = new WrHooks{*q, core::Event(), false};
  if (!g_qp_ex.Put(q, reinterpret_cast<uint64_t>(h))) {
    delete h;
    return;
  }
  q->wr_start = ShStart;
  q->wr_complete = ShComplete;
  if (q->wr_abort) q->wr_abort = ShAbort;
  if (q->wr_send) q->wr_send = ShSend;
  if (q->wr_send_imm) q->wr_send_imm = ShSendImm;
  if (q->wr_rdma_write) q->wr_rdma_write = ShWrite;
  if (q->wr_rdma_write_imm) q->wr_rdma_write_imm = ShWriteImm;
  if (q->wr_rdma_read) q->wr_rdma_read = ShRead;
  if (q->wr_atomic_cmp_swp) q->wr_atomic_cmp_swp = ShCas;
  if (q->wr_atomic_fetch_add) q->wr_atomic_fetch_add = ShFaa;
  if (q->wr_atomic_write) q->wr_atomic_write = ShAtomicWrite;
  if (q->wr_set_sge) q->wr_set_sge = ShSetSge;
  if (q->wr_set_sge_list) q->wr_set_sge_list = ShSetSgeList;
  if (q->wr_set_inline_data) q->wr_set_inline_data = ShSetInline;
  if (q->wr_set_inline_data_list) q->wr_set_inline_data_list = ShSetInlineList;
  if (q->wr_set_ud_addr) q->wr_set_ud_addr = ShSetUdAddr;
  if (q->wr_bind_mw) q->wr_bind_mw = ShBindMw;
  if (q->wr_local_inv) q->wr_local_inv = ShLocalInv;
  if (q->wr_send_inv) q->wr_send_inv = ShSendInv;
}

ibv_qp* CreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  Saved* s = Find(ctx);
  Bump(g_counters.create_qp_ex);
  if (!s || !s->create_qp_ex) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer()) return s->create_qp_ex(ctx, attr);
  const int err = FaultActive(core::Point::kCreateQp) ? CallFault(core::Point::kCreateQp, Id(attr->pd)) : 0;
  if (!Checking()) {
    ibv_qp* qp = err ? (errno = err, nullptr) : s->create_qp_ex(ctx, attr);
    if (qp) NoteQp(qp, attr->srq);  // for wc.error and the scheduler's streams
    return qp;
  }
  core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_qp* qp = err ? (errno = err, nullptr) : s->create_qp_ex(ctx, attr);
  OnCreateQp(qp, attr->pd, attr->cap, attr->send_cq, attr->recv_cq, attr->srq, attr->qp_type,
             attr->sq_sig_all, stack);
  if (qp) NoteQp(qp, attr->srq);  // after OnCreateQp: with its id
  // A QP created with send_ops_flags is an ibv_qp_ex (ibv_qp_to_qp_ex gives
  // the same address: qp_base is its first member).
  if (qp && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) HookQpEx(reinterpret_cast<ibv_qp_ex*>(qp));
  return qp;
}

// ibv_create_srq_ex (inline: a basic SRQ with only PD and TYPE goes to
// the exported ibv_create_srq instead).  An XRC SRQ's receives complete on
// its own CQ: the event names it in recv_cq.
ibv_srq* CreateSrqEx(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  Saved* s = Find(ctx);
  if (!s || !s->create_srq_ex) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer()) return s->create_srq_ex(ctx, attr);
  const bool has_pd = attr->comp_mask & IBV_SRQ_INIT_ATTR_PD;
  const int err = FaultActive(core::Point::kCreateSrq)
                      ? CallFault(core::Point::kCreateSrq, Id(has_pd ? attr->pd : nullptr))
                      : 0;
  if (!Checking()) return err ? (errno = err, nullptr) : s->create_srq_ex(ctx, attr);
  const core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_srq* srq = err ? (errno = err, nullptr) : s->create_srq_ex(ctx, attr);
  const int saved = errno;
  const bool typed = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && (attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ);
  const bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  const bool tm = typed && attr->srq_type == IBV_SRQT_TM;
  core::Event e;
  e.kind = core::EventKind::kCreateSrq;
  e.stack = stack;
  e.parent = Id(has_pd ? attr->pd : nullptr);
  e.recv_cq = xrc ? Id(attr->cq) : 0;
  // A TM SRQ's tag operations complete on its CQ; its receives, on the
  // receive CQs of its QPs (as a basic SRQ's).
  e.qp_type = tm ? static_cast<uint32_t>(IBV_SRQT_TM) : 0u;
  e.send_cq = tm ? Id(attr->cq) : 0;
  e.caps.max_recv_wr = attr->attr.max_wr;
  e.caps.max_recv_sge = attr->attr.max_sge;
  if (srq) e.obj = Assign(srq, {0, attr->attr.max_sge, 0, attr->attr.max_wr});
  e.ret = srq ? 0 : -1;
  e.err = srq ? 0 : saved;
  Emit(e);
  errno = saved;
  return srq;
}

int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) {
  Saved* s = Find(ctx);
  Bump(g_counters.query_port);
  if (!s || !s->query_port) return EOPNOTSUPP;
  return s->query_port(ctx, port, attr, len);
}

// ------------------------------------------------------ memory windows --
// ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw are inline in verbs.h and
// dispatch through the context's ops: wrapped like the data path, for
// real providers and softnic alike.
ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  Saved* s = Find(pd->context);
  if (!s || !s->alloc_mw) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer() || !Checking()) return s->alloc_mw(pd, type);
  const core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_mw* mw = s->alloc_mw(pd, type);
  const int err = errno;
  core::Event e;
  e.kind = core::EventKind::kAllocMw;
  e.stack = stack;
  e.parent = Id(pd);
  e.count = type;
  if (mw) {
    e.obj = Assign(mw);
    e.rkey = mw->rkey;
  }
  e.ret = mw ? 0 : -1;
  e.err = mw ? 0 : err;
  Emit(e);
  errno = err;
  return mw;
}

int DeallocMw(ibv_mw* mw) {
  Saved* s = Find(mw->context);
  if (!s || !s->dealloc_mw) return EOPNOTSUPP;
  Reentry re;
  if (!re.outer() || !Checking()) {
    const int rc = s->dealloc_mw(mw);
    if (!rc && re.outer()) Forget(mw);
    return rc;
  }
  core::Event e;
  e.kind = core::EventKind::kDeallocMw;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  e.obj = Id(mw);
  e.rkey = mw->rkey;
  const int rc = s->dealloc_mw(mw);
  e.ret = rc;
  e.err = rc;
  Emit(e);
  if (!rc) Forget(mw);
  return rc;
}

int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  Saved* s = Find(mw->context);
  if (!s || !s->bind_mw) return EOPNOTSUPP;
  Reentry re;
  if (!re.outer() || !Checking()) return s->bind_mw(qp, mw, bind);
  core::Event e;
  e.kind = core::EventKind::kBindMw;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  e.obj = Id(qp);
  const int rc = s->bind_mw(qp, mw, bind);
  core::SendWr& w = e.send_wrs.emplace_back();
  w.wr_id = bind->wr_id;
  w.opcode = IBV_WR_BIND_MW;
  w.send_flags = bind->send_flags;
  w.rkey = mw->rkey;  // the key the verb gave the window
  const ibv_mw_bind_info& b = bind->bind_info;
  w.bind = {Id(mw), Id(b.mr), b.addr, b.length, b.mw_access_flags};
  e.ret = rc;
  e.err = rc;
  e.bad_index = rc ? 0 : UINT32_MAX;
  Emit(e);
  return rc;
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

void ForgetQp(ibv_qp* qp) {
  auto* h = reinterpret_cast<WrHooks*>(g_qp_ex.Get(qp));
  if (!h) return;
  g_qp_ex.Erase(qp);
  delete h;
}

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

void ForgetCq(ibv_cq* cq) {
  if (sched::On()) sched::ForgetCq(cq);
  auto* h = reinterpret_cast<CqExHooks*>(g_cq_ex.Get(cq));
  if (!h) return;
  g_cq_ex.Erase(cq);
  delete h;
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
