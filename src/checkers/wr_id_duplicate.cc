// wr-id-duplicate (off by default): two outstanding signaled WRs of one QP
// share a wr_id, so their completions cannot be told apart.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckWrIdDuplicate(CheckContext& c) {
  if (c.e.kind != core::EventKind::kPostSend) return;
  const QpState* q = c.qp;
  if (!q) return;
  for (const auto& w : c.e.send_wrs) {
    if (!q->sq_sig_all && !(w.send_flags & IBV_SEND_SIGNALED)) continue;
    for (const auto& o : q->sq)
      if (o.signaled && o.wr_id == w.wr_id) {
        c.Emit(core::CheckId::kWrIdDuplicate,
               absl::StrFormat("post_send to %s: signaled wr_id=0x%x is already outstanding", QpName(c.s, c.e.obj),
                               w.wr_id),
               {{WrLabel(o, "outstanding"), o.stack}});
        return;
      }
  }
}

}  // namespace rdmasan::checkers
