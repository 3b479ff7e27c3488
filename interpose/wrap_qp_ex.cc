// The ibv_qp_ex shadows: each ibv_wr_* batch becomes one post_send event
// as the application built it (interpose/wrap_internal.h).  A batch on a
// destroyed QP, or on one whose context was closed, is refused at
// ibv_wr_start / ibv_wr_complete (use-after-destroy), not handed to the
// provider.
#include <algorithm>
#include <memory>

#include "core/spin_lock.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/ptr_table.h"
#include "interpose/thread_domains.h"
#include "interpose/wrap_internal.h"

namespace rdmasan::interpose {
namespace wrap {
namespace {

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
// A batch and a destroy of the QP on two threads (a program bug) do not
// meet inside the provider: ibv_wr_start marks the QP busy, then checks
// that no destroy began; the destroy marks it dying, then waits for the
// batch in progress (QuiesceQpEx).  Both sides store then load, sequentially
// consistent; a batch costs one locked store and one plain store.
struct WrHooks {
  ibv_qp_ex orig;  // the provider's function pointers
  core::Event batch;
  bool open = false;
  bool started = false;  // between a wr_start that reached the provider and its complete/abort
  std::atomic<bool> busy{false}, dying{false};
};
PtrTable g_qp_ex;

WrHooks* WrHooksOf(ibv_qp_ex* q) { return reinterpret_cast<WrHooks*>(g_qp_ex.Get(q)); }
// The hooks of a QP whose batch reached the provider's wr_start.
WrHooks* Batching(ibv_qp_ex* q) {
  WrHooks* h = WrHooksOf(q);
  return h && h->started ? h : nullptr;
}
void EndBatch(WrHooks* h) {
  h->started = false;
  h->busy.store(false, std::memory_order_release);
}
// thread-domain-race: a batch holds its QP's thread domain from
// ibv_wr_start to ibv_wr_complete / ibv_wr_abort (ibv_wr_post(3): the
// critical region).
void EnterTd(ibv_qp_ex* q, uintptr_t pc, uintptr_t frame) {
  if (td::Gate* g = td::GateOf(&q->qp_base)) td::Enter(g, td::Verb::kWrBatch, Id(&q->qp_base), 0, pc, frame);
}
void LeaveTd(ibv_qp_ex* q) {
  if (td::Gate* g = td::GateOf(&q->qp_base)) td::Leave(g);
}

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
  // A batch on a dead QP (or one of a closed context) is refused at
  // ibv_wr_complete, which reports it; the provider never sees it.
  if ((!h || AnyDestroyed()) && IsDead(&q->qp_base, q->qp_base.context)) {
    if (h) h->open = false;
    return;
  }
  if (!h) return;
  h->busy.store(true, std::memory_order_seq_cst);
  if (h->dying.load(std::memory_order_seq_cst)) {
    h->open = false;
    return EndBatch(h);
  }
  if (td::Active() && re.outer() && Checking()) EnterTd(q, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME);
  h->started = true;
  h->orig.wr_start(q);
  h->batch = core::Event();
  h->batch.kind = core::EventKind::kPostSend;
  h->batch.obj = Id(&q->qp_base);
  h->open = Checking() && re.outer();
}

void ShSend(ibv_qp_ex* q) {
  Reentry re;
  if (WrHooks* h = Batching(q)) h->orig.wr_send(q), NewShadowWr(h, q, IBV_WR_SEND);
}
void ShSendImm(ibv_qp_ex* q, __be32 imm) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_send_imm(q, imm);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void ShRdma(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint32_t op) {
  Reentry re;
  WrHooks* h = Batching(q);
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
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_rdma_write_imm(q, rkey, addr, imm);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_RDMA_WRITE_WITH_IMM))
    w->remote_addr = addr, w->rkey = rkey, w->imm_data = imm;
}
void ShCas(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_atomic_cmp_swp(q, rkey, addr, compare, swap);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_ATOMIC_CMP_AND_SWP))
    w->remote_addr = addr, w->rkey = rkey, w->compare_add = compare, w->swap = swap;
}
void ShFaa(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, uint64_t add) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_atomic_fetch_add(q, rkey, addr, add);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_ATOMIC_FETCH_AND_ADD))
    w->remote_addr = addr, w->rkey = rkey, w->compare_add = add;
}
// The 8-byte value is copied into the WQE at the call (as inline data is),
// so the WR has no SGE: no key, no buffer the checks must follow.
void ShAtomicWrite(ibv_qp_ex* q, uint32_t rkey, uint64_t addr, const void* value) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_atomic_write(q, rkey, addr, value);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_ATOMIC_WRITE)) w->remote_addr = addr, w->rkey = rkey;
}
void ShSetSge(ibv_qp_ex* q, uint32_t lkey, uint64_t addr, uint32_t length) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_set_sge(q, lkey, addr, length);
  if (core::SendWr* w = LastShadowWr(h)) {
    w->sges.assign(1, core::Sge{addr, length, lkey, 0, 0});
    w->num_sge = 1;
  }
}
void ShSetSgeList(ibv_qp_ex* q, size_t n, const ibv_sge* list) {
  Reentry re;
  WrHooks* h = Batching(q);
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
  WrHooks* h = Batching(q);
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
  WrHooks* h = Batching(q);
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
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_set_ud_addr(q, ah, qpn, qkey);
  if (core::SendWr* w = LastShadowWr(h)) w->ah = Id(ah), w->remote_qpn = qpn;
}
void ShBindMw(ibv_qp_ex* q, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_bind_mw(q, mw, rkey, info);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_BIND_MW)) {
    w->rkey = rkey;
    if (info) w->bind = {Id(mw), Id(info->mr), info->addr, info->length, info->mw_access_flags};
  }
}
void ShLocalInv(ibv_qp_ex* q, uint32_t rkey) {
  Reentry re;
  WrHooks* h = Batching(q);
  if (!h) return;
  h->orig.wr_local_inv(q, rkey);
  if (core::SendWr* w = NewShadowWr(h, q, IBV_WR_LOCAL_INV)) w->imm_data = rkey;
}
void ShSendInv(ibv_qp_ex* q, uint32_t rkey) {
  Reentry re;
  WrHooks* h = Batching(q);
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

// The post prologue's order (wrap_internal.h) over the QP's hooks: the
// re-entry guard, the provider's functions, the refusal of a dead QP, the
// fault point (not for a nested call), then the checks.
int ShComplete(ibv_qp_ex* q) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if ((!h || AnyDestroyed()) &&
      RefuseDeadCall(&q->qp_base, q->qp_base.context, core::EventKind::kPostSend,
                     checkers::UadVerb::kWrComplete, EINVAL, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  if (!h || !h->started) return EINVAL;
  if (!h->open) {
    const int rc = re.outer() ? CompleteOrFault(h, q, 1) : h->orig.wr_complete(q);
    EndBatch(h);
    if (td::Active() && re.outer()) LeaveTd(q);
    return rc;
  }
  h->open = false;
  h->batch.stack = RDMASAN_CAPTURE_CALLER_STACK();
  HashSendPayloads(&h->batch);
  int rc = CompleteOrFault(h, q, static_cast<uint32_t>(h->batch.send_wrs.size()));
  h->batch.ret = rc;
  h->batch.err = rc;
  if (rc) h->batch.bad_index = 0;  // wr_complete posts all or nothing
  Emit(h->batch);
  h->batch = core::Event();
  EndBatch(h);
  if (td::Active() && re.outer()) LeaveTd(q);
  return rc;
}
void ShAbort(ibv_qp_ex* q) {
  Reentry re;
  WrHooks* h = WrHooksOf(q);
  if ((!h || AnyDestroyed()) && IsDead(&q->qp_base, q->qp_base.context)) return;
  if (!h || !h->started) return;
  h->orig.wr_abort(q);
  h->open = false;
  h->batch = core::Event();
  EndBatch(h);
  if (td::Active() && re.outer()) LeaveTd(q);
}

// Hooks a provider's qp_ex; every setter the provider offers is shadowed
// (those it leaves null stay null, so the inline verbs fail as before).
}  // namespace

void HookQpEx(ibv_qp_ex* q) {
  if (!q || !q->wr_start || !q->wr_complete) return;
  auto* h = new WrHooks{*q, core::Event()};
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

}  // namespace wrap

void QuiesceQpEx(ibv_qp* qp, bool dying) {
  auto* h = reinterpret_cast<wrap::WrHooks*>(wrap::g_qp_ex.Get(qp));
  if (!h) return;
  h->dying.store(dying, std::memory_order_seq_cst);
  // A batch another thread has open ends first (bounded: a batch left
  // open forever does not hang the destroy).
  for (int spins = 0; dying && h->busy.load(std::memory_order_seq_cst) && spins < 100000; ++spins)
    core::SpinWait(spins);
}

void ForgetQp(ibv_qp* qp) {
  auto* h = reinterpret_cast<wrap::WrHooks*>(wrap::g_qp_ex.Get(qp));
  if (!h) return;
  wrap::g_qp_ex.Erase(qp);
  wrap::RetireLater(h, [](void* p) { delete static_cast<wrap::WrHooks*>(p); });
}

}  // namespace rdmasan::interpose
