// The posts: ibv_post_send, ibv_post_recv, ibv_post_srq_recv and
// ibv_post_srq_ops, through the context's ops (interpose/wrap_internal.h).
// Each starts with the one post prologue (wrap::PostEntry): the re-entry
// guard, the saved op, the refusal of a dead handle (a dead QP or SRQ, a
// closed context, (UD) a destroyed AH: EINVAL, use-after-destroy, checking
// on or off), the fault point (faults=post_send / post_recv /
// post_srq_recv; post_srq_ops shares post_srq_recv's), then the checks.
// Until the program destroys something the refusal costs one load per
// post, after it a filter lookup of the handle.
#include <cstdint>
#include <memory>
#include <type_traits>

#include "absl/container/inlined_vector.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/memory.h"
#include "interpose/thread_domains.h"
#include "interpose/wrap_internal.h"

namespace rdmasan::interpose::wrap {
namespace {

// Opcodes whose local SGEs are read by the NIC (the payload sent).
bool SourcesPayload(uint32_t op) {
  return op == IBV_WR_SEND || op == IBV_WR_SEND_WITH_IMM || op == IBV_WR_RDMA_WRITE ||
         op == IBV_WR_RDMA_WRITE_WITH_IMM || op == IBV_WR_SEND_WITH_INV || op == IBV_WR_ATOMIC_WRITE;
}

// Each thread's post_send event, reused (FreshEvent).
thread_local bool t_post_event_gone = false;
struct ThreadPostEvent {
  core::Event event;
  ~ThreadPostEvent() { t_post_event_gone = true; }
};
thread_local ThreadPostEvent t_post_event;

// A post to a dead QP or SRQ, or to one of a closed context, or (UD) a
// WR through a destroyed AH: refused whole (*bad is the first WR, none is
// posted), with an event naming the dead object (checking on).  Reached
// only when the context has no saved pointers or something was destroyed.
template <typename Wr>
void FillChain(core::Event& e, const void* wr) {
  if constexpr (std::is_same_v<Wr, ibv_send_wr>) {
    e.bad_index = 0;
    CopySendChain(static_cast<const ibv_send_wr*>(wr), nullptr, &e, false, 0);
  } else if constexpr (std::is_same_v<Wr, ibv_recv_wr>) {
    e.bad_index = 0;
    CopyRecvChain(static_cast<const ibv_recv_wr*>(wr), static_cast<const ibv_recv_wr*>(wr), &e, 0);
  }  // a refused post_srq_ops names the SRQ only
}
template <typename Wr>
[[gnu::noinline]] bool RefusedPost(const void* obj, const ibv_context* ctx, core::EventKind kind, Wr* wr,
                                   Wr** bad, uintptr_t pc, uintptr_t frame) {
  if (RefuseDeadCall(obj, ctx, kind, checkers::UadVerb::kByKind, EINVAL, pc, frame, FillChain<Wr>, wr)) {
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
// WRs (the program's chain is never modified, but for what a provider
// writes into it: a TAG_ADD's handle, copied back).
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
    const int rc = post(obj, copy.data(), &cbad);
    if constexpr (std::is_same_v<Wr, ibv_ops_wr>) {
      w = wr;
      for (uint32_t i = 0; i < k; ++i, w = w->next)
        if (copy[i].opcode == IBV_WR_TAG_ADD) w->tm.handle = copy[i].tm.handle;
    }
    if (rc) {
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
[[gnu::always_inline]] inline int PostOrFault(core::Point p, Obj* obj, uint32_t qp_num, Wr* wr, Wr** bad,
                                              Post post) {
  if (__builtin_expect(!FaultActive(p), 1) || !wr) return post(obj, wr, bad);
  uint32_t k = 0;
  const int err = PostFault(p, Id(obj), qp_num, ChainLength(wr, 65536), &k);
  return err ? PostPrefixThenFail(obj, wr, bad, k, err, post) : post(obj, wr, bad);
}

// Each thread's post_recv and post_srq_recv event, reused (FreshEvent):
// PostRecvCommon writes the same fields of either kind.
thread_local bool t_recv_event_gone = false;
struct ThreadRecvEvent {
  core::Event event;
  ~ThreadRecvEvent() { t_recv_event_gone = true; }
};
thread_local ThreadRecvEvent t_recv_event;

int PostRecvCommon(core::EventKind kind, const void* obj, ibv_recv_wr* wr, ibv_recv_wr** bad, int rc,
                   core::StackId stack) {
  std::unique_ptr<core::Event> spare;
  core::Event& e = FreshEvent(t_recv_event.event, t_recv_event_gone, spare, kind);
  e.bad_index = UINT32_MAX;
  e.recv_wrs.clear();
  const ObjInfo info = Lookup(obj);
  e.obj = info.id;
  e.ret = rc;
  e.err = rc;
  e.stack = stack;
  const ObjLimits& lim = info.limits;
  CopyRecvChain(wr, rc ? *bad : nullptr, &e, lim.max_recv_sge, ChainBound(lim.max_recv_wr, 65536));
  Emit(e);
  return rc;
}

// SGEs copied of a TAG_ADD (a provider takes a few; more is refused).
constexpr uint32_t kMaxTagSges = 64;

}  // namespace

void HashSendPayloads(core::Event* e) {
  if (!SamplePost()) return;
  for (auto& w : e->send_wrs) {
    if ((w.send_flags & IBV_SEND_INLINE) || !SourcesPayload(w.opcode)) continue;
    for (auto& g : w.sges) g.hash = HashPayload(g.addr, g.length);
  }
}

namespace {

// The event of a post_send, into the thread's reused one: its WRs
// copied (CopySendChain), ret and bad_index from `rc`.
core::Event& SendEvent(std::unique_ptr<core::Event>& spare, const ibv_qp* qp, const ibv_send_wr* wr,
                       const ObjInfo& info, core::StackId stack, uint32_t* copied) {
  core::Event& e = FreshEvent(t_post_event.event, t_post_event_gone, spare, core::EventKind::kPostSend);
  e.bad_index = UINT32_MAX;
  e.obj = info.id;
  e.stack = stack;
  const ObjLimits& lim = info.limits;
  *copied = CopySendChain(wr, nullptr, &e, qp->qp_type == IBV_QPT_UD, lim.max_send_sge,
                          ChainBound(lim.max_send_wr, 4096));
  return e;
}
void SetSendResult(core::Event& e, const ibv_send_wr* wr, ibv_send_wr* const* bad, int rc, uint32_t copied) {
  e.ret = rc;
  e.err = rc;
  if (rc) e.bad_index = BadIndex(wr, *bad, copied);
}

// Whether a post_send may go as a checkers::OneSend: one WR with at most
// one SGE, of a OneSendable opcode, to a QP other than UD (whose WRs name
// an AH).
inline bool OneSendPost(const ibv_qp* qp, const ibv_send_wr* wr) {
  return wr && !wr->next && wr->num_sge <= 1 && qp->qp_type != IBV_QPT_UD &&
         checkers::OneSendable(wr->opcode, wr->send_flags);
}

// PostSendFull of a OneSendPost: its payload's hash as HashSendPayloads
// takes it, then the provider's post, so that the message leaves before
// the rest of the checks' work (a ping-pong's one way waits for it, not
// for them); then the post's stack and the WR's fields as CopySendChain
// reads them (a provider reads a WR, never writes it); then the engine's
// compact entry, or the event when that declines (a failed post, a check
// that may speak, a trace or hook that reads events).
template <typename Post>
[[gnu::always_inline]] inline int PostOneSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad, Post post,
                                              uintptr_t pc, uintptr_t frame) {
  // The payload's hash before the provider's post (SamplePost asked once a
  // post): the device may write into the buffer during the post already
  // (softnic runs a loopback exchange there: a receive the program posted
  // over the buffer may take a reply), which buffer-modified-in-flight is
  // about.  Dropped below when the QP takes no SGE.
  uint64_t hash = 0;
  if (SamplePost() && wr->num_sge == 1 && wr->sg_list && !(wr->send_flags & IBV_SEND_INLINE))
    hash = HashPayload(wr->sg_list[0].addr, wr->sg_list[0].length);  // OneSendable: SourcesPayload
  const int rc = PostOrFault(core::Point::kPostSend, qp, qp->qp_num, wr, bad, post);
  const SendObjInfo info = LookupSend(qp);
  const core::StackId stack = core::CaptureStackFrom(pc, frame);
  checkers::OneSend p;
  p.qp = info.id;
  p.stack = stack;
  p.opcode = wr->opcode;
  p.send_flags = wr->send_flags;
  p.imm_data = wr->imm_data;
  p.num_sge = wr->num_sge;
  p.wr_id = wr->wr_id;
  p.has_sge = wr->num_sge == 1 && wr->sg_list && info.max_send_sge >= 1;  // ReadableSges
  if (p.has_sge) {
    const ibv_sge& g = wr->sg_list[0];
    p.sge.addr = g.addr;
    p.sge.length = g.length;
    p.sge.lkey = g.lkey;
    p.sge.hash = hash;
  }
  if (__builtin_expect(rc == 0, 1) && EmitOneSend(p)) return 0;
  // The event: the WR copied again, with the hash taken above.
  std::unique_ptr<core::Event> spare;
  uint32_t copied;
  core::Event& e = SendEvent(spare, qp, wr, Lookup(qp), stack, &copied);
  if (p.has_sge && !e.send_wrs.empty() && !e.send_wrs[0].sges.empty())
    e.send_wrs[0].sges[0].hash = p.sge.hash;
  SetSendResult(e, wr, bad, rc, copied);
  Emit(e);
  return rc;
}

// PostSend past its pass-through: `s` is the context's saved ops (or
// null), `pc` and `frame` the wrapper's (the post's stack is the
// program's call of it).
[[gnu::noinline]] int PostSendFull(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad, Saved* s, uintptr_t pc,
                                   uintptr_t frame) {
  const PostEntry entry(s);
  if (entry.MayBeDead() && RefusedPost(qp, qp->context, core::EventKind::kPostSend, wr, bad, pc, frame))
    return EINVAL;
  const auto post = entry.Real(&Saved::post_send);
  if (!post) return *bad = wr, entry.Missing();
  if (!entry.Outer()) return post(qp, wr, bad);
  if (__builtin_expect(AnyAsyncActive(), 0)) MaybeInjectAsync(qp);
  if (!Checking()) return PostOrFault(core::Point::kPostSend, qp, qp->qp_num, wr, bad, post);
  const Reentry re;  // the checks: what they call is not the program's
  Bump(GetCounters().post_send);
  // thread-domain-race (its report walks the stack from pc and frame).
  const td::Hold hold(qp, td::Verb::kPostSend, 0, pc, frame);
  if (__builtin_expect(OneSendPost(qp, wr), 1)) return PostOneSend(qp, wr, bad, post, pc, frame);
  const core::StackId stack = core::CaptureStackFrom(pc, frame);
  const ObjInfo info = Lookup(qp);
  // Copy (and hash the payloads) before the provider runs: the NIC may read
  // the buffers from the moment of the post.
  std::unique_ptr<core::Event> spare;
  uint32_t copied;
  core::Event& e = SendEvent(spare, qp, wr, info, stack, &copied);
  HashSendPayloads(&e);
  const int rc = PostOrFault(core::Point::kPostSend, qp, qp->qp_num, wr, bad, post);
  SetSendResult(e, wr, bad, rc, copied);
  Emit(e);
  return rc;
}

// PostRecvFull of one WR with at most one SGE: its fields as
// CopyRecvChain reads them, the provider's post, then the engine's compact
// entry, or the event when that declines (as PostOneSend).
template <typename Post>
[[gnu::always_inline]] inline int PostOneRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad, Post post,
                                              core::StackId stack) {
  const RecvObjInfo info = LookupRecv(qp);
  checkers::OneRecv p;
  p.qp = info.id;
  p.stack = stack;
  p.num_sge = wr->num_sge;
  p.wr_id = wr->wr_id;
  p.has_sge = wr->num_sge == 1 && wr->sg_list && info.max_recv_sge >= 1;  // ReadableSges
  if (p.has_sge) {
    const ibv_sge& g = wr->sg_list[0];
    p.sge.addr = g.addr;
    p.sge.length = g.length;
    p.sge.lkey = g.lkey;
  }
  const int rc = PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, post);
  if (__builtin_expect(rc == 0, 1) && EmitOneRecv(p)) return 0;
  return PostRecvCommon(core::EventKind::kPostRecv, qp, wr, bad, rc, stack);
}

// PostRecv past its pass-through (as PostSendFull).
[[gnu::noinline]] int PostRecvFull(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad, Saved* s, uintptr_t pc,
                                   uintptr_t frame) {
  const PostEntry entry(s);
  if (entry.MayBeDead() && RefusedPost(qp, qp->context, core::EventKind::kPostRecv, wr, bad, pc, frame))
    return EINVAL;
  const auto post = entry.Real(&Saved::post_recv);
  if (!post) return *bad = wr, entry.Missing();
  if (!entry.Outer()) return post(qp, wr, bad);
  if (!Checking()) return PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, post);
  const Reentry re;  // the checks: what they call is not the program's
  Bump(GetCounters().post_recv);
  const core::StackId stack = core::CaptureStackFrom(pc, frame);
  const td::Hold hold(qp, td::Verb::kPostRecv, stack);  // thread-domain-race
  if (__builtin_expect(wr && !wr->next && wr->num_sge <= 1, 1)) return PostOneRecv(qp, wr, bad, post, stack);
  return PostRecvCommon(core::EventKind::kPostRecv, qp, wr, bad,
                        PostOrFault(core::Point::kPostRecv, qp, qp->qp_num, wr, bad, post), stack);
}

}  // namespace

// The pass-through first (OnlyForward): the provider's op, called last.
int PostSend(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Saved* const s = Find(qp->context);
  if (__builtin_expect(s != nullptr && OnlyForward(), 1))
    if (const auto post = s->post_send) return post(qp, wr, bad);
  return PostSendFull(qp, wr, bad, s, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME);
}

int PostRecv(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Saved* const s = Find(qp->context);
  if (__builtin_expect(s != nullptr && OnlyForward(), 1))
    if (const auto post = s->post_recv) return post(qp, wr, bad);
  return PostRecvFull(qp, wr, bad, s, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME);
}

int PostSrqRecv(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  const PostEntry entry(srq->context);
  if (entry.MayBeDead() && RefusedPost(srq, srq->context, core::EventKind::kPostSrqRecv, wr, bad,
                                       RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  const auto post = entry.Real(&Saved::post_srq_recv);
  if (!post) return *bad = wr, entry.Missing();
  if (!entry.Outer()) return post(srq, wr, bad);
  if (!Checking()) return PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, post);
  const Reentry re;  // the checks: what they call is not the program's
  Bump(GetCounters().post_srq_recv);
  const core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  return PostRecvCommon(core::EventKind::kPostSrqRecv, srq, wr, bad,
                        PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, post), stack);
}

// ibv_post_srq_ops (inline in verbs.h, through the context's op): tag
// list operations of a TM SRQ, failed by the SRQ's fault point
// (post_srq_recv: the ops fill the same SRQ, and fail as its receives do,
// ENOMEM or EINVAL at one op, the earlier ones done).  The event is copied
// after the provider ran: a TAG_ADD's handle is what the provider wrote
// into the WR.
int PostSrqOps(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad) {
  const PostEntry entry(srq->context);
  if (entry.MayBeDead() && RefusedPost(srq, srq->context, core::EventKind::kPostSrqOps, wr, bad,
                                       RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  const auto post = entry.Real(&Saved::post_srq_ops);
  if (!post) return *bad = wr, entry.Missing();
  if (!entry.Outer()) return post(srq, wr, bad);
  if (!Checking()) return PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, post);
  const Reentry re;  // the checks: what they call is not the program's
  core::Event e;
  e.kind = core::EventKind::kPostSrqOps;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  e.obj = Id(srq);
  const int rc = PostOrFault(core::Point::kPostSrqRecv, srq, 0, wr, bad, post);
  e.ret = rc;
  e.err = rc;
  CopyOpsChain(wr, rc ? *bad : nullptr, &e, kMaxTagSges);
  Emit(e);
  return rc;
}

}  // namespace rdmasan::interpose::wrap
