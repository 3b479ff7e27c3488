// rq-overflow: posted receives fit in the returned max_recv_wr (or the
// SRQ's max_wr); a receive occupies its slot until its completion is polled.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckRqOverflow(CheckContext& c) {
  const auto& e = c.e;
  uint64_t outstanding, limit;
  core::StackId made;
  if (e.kind == core::EventKind::kPostRecv) {
    const QpState* q = c.qp;
    if (!q || q->srq) return;
    if (q->type == IBV_QPT_XRC_SEND || q->type == IBV_QPT_XRC_RECV) {
      c.Emit(core::CheckId::kRqOverflow,
             absl::StrFormat("post_recv to %s, an %s QP, which has no receive queue (%s)", QpName(c.s, e.obj),
                             q->type == IBV_QPT_XRC_SEND ? "XRC_SEND" : "XRC_RECV",
                             q->type == IBV_QPT_XRC_SEND ? "an XRC initiator only sends"
                                                         : "post receives to an XRC SRQ of its domain"),
             {{core::StackKind::kCreated, "created at", q->stack}});
      return;
    }
    outstanding = q->rq.size();
    limit = q->caps.max_recv_wr;
    made = q->stack;
  } else {  // post_srq_recv
    const SrqState* s = c.s.Srq(e.obj);
    if (!s) return;
    outstanding = s->rq.size();
    limit = s->max_wr;
    made = s->stack;
  }
  if (outstanding + e.recv_wrs.size() <= limit) return;
  const std::string name =
      e.kind == core::EventKind::kPostRecv ? QpName(c.s, e.obj) : absl::StrFormat("SRQ 0x%x", e.obj);
  c.Emit(core::CheckId::kRqOverflow,
         absl::StrFormat("post of %d receive(s) to %s with %d outstanding exceeds its capacity %d",
                         e.recv_wrs.size(), name, outstanding, limit),
         {{core::StackKind::kCreated, "created at", made}});
}

}  // namespace rdmasan::checkers
