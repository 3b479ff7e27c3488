// wr-id-duplicate (off by default): two outstanding signaled WRs of one QP
// share a wr_id, so their completions cannot be told apart.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckWrIdDuplicate(CheckContext& c) {
  const QpState* q = c.qp;
  if (!q) return;
  for (size_t i = 0; i < c.e.send_wrs.size(); ++i) {
    const auto& w = c.e.send_wrs[i];
    auto signaled = [&](uint32_t flags) { return q->sq_sig_all || (flags & IBV_SEND_SIGNALED); };
    if (!signaled(w.send_flags)) continue;
    for (const auto& o : q->sq)
      if (o.signaled && o.wr_id == w.wr_id) {
        c.Emit(core::CheckId::kWrIdDuplicate,
               absl::StrFormat("post_send to %s: signaled wr_id=0x%x is already outstanding",
                               QpName(c.s, c.e.obj), w.wr_id),
               {{core::StackKind::kPosted, WrLabel(o, "outstanding"), o.stack}});
        return;
      }
    for (size_t j = 0; j < i; ++j)
      if (signaled(c.e.send_wrs[j].send_flags) && c.e.send_wrs[j].wr_id == w.wr_id) {
        c.Emit(
            core::CheckId::kWrIdDuplicate,
            absl::StrFormat("post_send to %s: signaled wr_id=0x%x appears twice in one chain (WRs %d and %d)",
                            QpName(c.s, c.e.obj), w.wr_id, j, i));
        return;
      }
  }
}

}  // namespace rdmasan::checkers
