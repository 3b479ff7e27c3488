// cq-overrun: every completion that can be pending on a CQ fits in its cqe.
// At create_qp the capacities of every QP (and SRQ) bound to the CQ are
// summed — a QP that errors flushes every outstanding WR, signaled or not;
// at each post the completions that can actually land are counted.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

uint64_t Capacity(const State& s, core::ObjId cq, const core::Event* adding) {
  uint64_t n = 0;
  absl::flat_hash_set<core::ObjId> srqs;
  auto add = [&](core::ObjId send_cq, core::ObjId recv_cq, core::ObjId srq, const core::QpCaps& caps) {
    if (send_cq == cq) n += caps.max_send_wr;
    if (recv_cq == cq) {
      if (srq)
        srqs.insert(srq);
      else
        n += caps.max_recv_wr;
    }
  };
  if (const CqState* c = s.Cq(cq))
    for (core::ObjId id : c->qps)
      if (const QpState* q = s.Qp(id)) add(q->send_cq, q->recv_cq, q->srq, q->caps);
  if (adding) add(adding->send_cq, adding->recv_cq, adding->srq, adding->caps);
  for (core::ObjId id : srqs)
    if (const SrqState* srq = s.Srq(id)) n += srq->max_wr;
  return n;
}

}  // namespace

void CheckCqOverrun(CheckContext& c) {
  const auto& e = c.e;
  if (e.kind == core::EventKind::kCreateQp && e.ret == 0) {
    for (core::ObjId cq : {e.send_cq, e.recv_cq}) {
      const CqState* st = c.s.Cq(cq);
      if (!st) continue;
      uint64_t cap = Capacity(c.s, cq, &e);
      if (cap > static_cast<uint64_t>(st->cqe)) {
        c.Emit(core::CheckId::kCqOverrun,
               absl::StrFormat("CQ 0x%x (cqe=%d) can receive %d completions from the QPs bound to it, this QP "
                               "included (max_send_wr + max_recv_wr of each)",
                               cq, st->cqe, cap),
               {{"CQ created at:", st->stack}});
      }
      if (e.send_cq == e.recv_cq) break;
    }
    return;
  }
  core::ObjId cq = 0;
  uint64_t adding = 0;
  if (e.kind == core::EventKind::kPostSend) {
    const QpState* q = c.s.Qp(e.obj);
    if (!q) return;
    cq = q->send_cq;
    const size_t n = std::min<size_t>(e.send_wrs.size(), e.bad_index);
    for (size_t i = 0; i < n; ++i) adding += q->sq_sig_all || (e.send_wrs[i].send_flags & IBV_SEND_SIGNALED);
  } else if (e.kind == core::EventKind::kPostRecv) {
    const QpState* q = c.s.Qp(e.obj);
    if (!q) return;
    cq = q->recv_cq;
    adding = std::min<size_t>(e.recv_wrs.size(), e.bad_index);
  } else {
    return;
  }
  const CqState* st = c.s.Cq(cq);
  if (!st || !adding) return;
  uint64_t pending = c.s.PendingOn(cq);
  if (pending + adding > static_cast<uint64_t>(st->cqe)) {
    c.Emit(core::CheckId::kCqOverrun,
           absl::StrFormat("%d completions can now be pending on CQ 0x%x, more than its cqe=%d", pending + adding, cq,
                           st->cqe),
           {{"CQ created at:", st->stack}});
  }
}

}  // namespace rdmasan::checkers
