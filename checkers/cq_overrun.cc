// cq-overrun: every completion that can be pending on a CQ fits in its cqe
// (docs/checks.md#cq-overrun): at each post, the signaled sends and posted receives still
// outstanding on every QP and SRQ bound to the CQ are counted; at
// ibv_resize_cq, the new size is held against that count.  Capacities
// at create_qp are not summed: programs routinely size a QP beyond what they
// ever post (perftest's one-receive RQ on a write test's CQ).
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportCqOverrun(CheckContext& c, core::ObjId cq, const CqState& st,
                                                  uint64_t pending) {
  c.Emit(core::CheckId::kCqOverrun,
         absl::StrFormat("%d completions can now be pending on CQ 0x%x, more than its cqe=%d", pending, cq,
                         st.cqe),
         {{core::StackKind::kCreated, "CQ created at", st.stack}});
}

}  // namespace

void CheckCqOverrun(CheckContext& c) {
  const auto& e = c.e;
  if (e.kind == core::EventKind::kPostSrqRecv) {
    // SRQ receives complete on the receive CQ of whichever QP takes them:
    // every such CQ must have room for all of them.
    const SrqState* srq = c.s.Srq(e.obj);
    if (!srq) return;
    const uint64_t adding = AcceptedWrs(e, e.recv_wrs.size(), srq->rq.size(), srq->max_wr);
    absl::flat_hash_set<core::ObjId> cqs;
    if (srq->cq) cqs.insert(srq->cq);  // XRC: its own CQ
    for (core::ObjId q : srq->qps)
      if (const QpState* qp = c.s.Qp(q)) cqs.insert(qp->recv_cq);
    core::ObjId worst = 0;
    for (core::ObjId cq : cqs) {
      const CqState* st = c.s.Cq(cq);
      if (st && c.s.PendingOn(cq) + adding > static_cast<uint64_t>(st->cqe) && (!worst || cq < worst))
        worst = cq;
    }
    if (worst) ReportCqOverrun(c, worst, *c.s.Cq(worst), c.s.PendingOn(worst) + adding);
    return;
  }
  if (e.kind == core::EventKind::kResizeCq) {
    // A CQ made smaller than what can still land in it.
    const CqState* st = c.s.Cq(e.obj);
    if (e.ret != 0 || !st) return;
    const uint64_t pending = c.s.PendingOn(*st);
    if (pending > static_cast<uint64_t>(e.cqe))
      c.Emit(core::CheckId::kCqOverrun,
             absl::StrFormat("CQ 0x%x resized to cqe=%d with %d completions that can be pending on it", e.obj,
                             e.cqe, pending),
             {{core::StackKind::kCreated, "CQ created at", st->stack}});
    return;
  }
  if (e.kind == core::EventKind::kCreateQp) {
    // A QP that brings an SRQ with receives already posted to a CQ that
    // did not see them yet.
    const CqState* st = c.s.Cq(e.recv_cq);
    const SrqState* srq = e.srq ? c.s.Srq(e.srq) : nullptr;
    if (e.ret != 0 || !st || !srq || st->srqs.contains(e.srq)) return;
    const uint64_t pending = c.s.PendingOn(e.recv_cq) + srq->rq.size();
    if (pending > static_cast<uint64_t>(st->cqe)) ReportCqOverrun(c, e.recv_cq, *st, pending);
    return;
  }
  core::ObjId cq = 0;
  const CqState* st = nullptr;
  uint64_t adding = 0;
  if (e.kind == core::EventKind::kPostSend) {
    const QpState* q = c.qp;
    if (!q) return;
    cq = q->send_cq;
    st = q->scq;
    for (const core::SendWr& w : c.Posted()) adding += q->sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
  } else {  // post_recv
    const QpState* q = c.qp;
    if (!q) return;
    cq = q->recv_cq;
    st = q->rcq;
    adding = AcceptedWrs(e, e.recv_wrs.size(), q->rq.size(), q->caps.max_recv_wr);
  }
  if (!st || !adding) return;
  const uint64_t pending = c.s.PendingOn(*st) + adding;
  if (pending > static_cast<uint64_t>(st->cqe)) ReportCqOverrun(c, cq, *st, pending);
}

}  // namespace rdmasan::checkers
