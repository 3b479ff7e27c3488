// cq-overrun: every completion that can be pending on a CQ fits in its cqe
// (seed 000): at each post, the signaled sends and posted receives still
// outstanding on every QP and SRQ bound to the CQ are counted.  Capacities
// at create_qp are not summed: programs routinely size a QP beyond what they
// ever post (perftest's one-receive RQ on a write test's CQ).
#include "checkers/check.h"

namespace rdmasan::checkers {
void CheckCqOverrun(CheckContext& c) {
  const auto& e = c.e;
  core::ObjId cq = 0;
  uint64_t adding = 0;
  if (e.kind == core::EventKind::kPostSend) {
    const QpState* q = c.qp;
    if (!q) return;
    cq = q->send_cq;
    const size_t n = std::min<size_t>(e.send_wrs.size(), e.bad_index);
    for (size_t i = 0; i < n; ++i) adding += q->sq_sig_all || (e.send_wrs[i].send_flags & IBV_SEND_SIGNALED);
  } else if (e.kind == core::EventKind::kPostRecv) {
    const QpState* q = c.qp;
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
           {{"CQ created at", st->stack}});
  }
}

}  // namespace rdmasan::checkers
