// inline-too-large: the inline payload fits in the returned max_inline_data.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportInlineTooLarge(CheckContext& c, const QpState& q,
                                                       const core::SendWr& w, uint64_t total) {
  c.Emit(core::CheckId::kInlineTooLarge,
         absl::StrFormat("post_send to %s: inline WR wr_id=0x%x carries %d bytes, max_inline_data is %d",
                         QpName(c.s, c.e.obj), w.wr_id, total, q.caps.max_inline_data),
         {{core::StackKind::kCreated, "QP created at", q.stack}});
}

}  // namespace

void CheckInlineTooLarge(CheckContext& c) {
  const QpState* q = c.qp;
  if (!q) return;
  for (const core::SendWr& w : c.e.send_wrs) {
    if (!(w.send_flags & IBV_SEND_INLINE)) continue;
    uint64_t total = 0;
    for (const auto& g : w.sges) total += g.length;
    if (total > q->caps.max_inline_data) ReportInlineTooLarge(c, *q, w, total);
  }
}

}  // namespace rdmasan::checkers
