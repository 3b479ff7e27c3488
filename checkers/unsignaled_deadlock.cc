// unsignaled-deadlock: the SQ never becomes full while no signaled WR is
// outstanding — unsignaled WRs are retired only by a later signaled one, so
// such an SQ can never drain (docs/checks.md#unsignaled-deadlock: signal the WR that fills the SQ).
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportUnsignaledDeadlock(CheckContext& c, const QpState& q) {
  c.Emit(core::CheckId::kUnsignaledDeadlock,
         absl::StrFormat(
             "%s: the SQ is full (%d WRs) and none of them is signaled; nothing can ever retire them",
             QpName(c.s, c.e.obj), q.caps.max_send_wr),
         {{core::StackKind::kCreated, "QP created at", q.stack}});
}

}  // namespace

void CheckUnsignaledDeadlock(CheckContext& c) {
  const QpState* q = c.qp;
  if (!q || q->caps.max_send_wr == 0) return;
  uint64_t occupancy = q->sq.size();
  bool any_signaled = q->sq_signaled > 0;
  for (const core::SendWr& w : c.Posted()) {
    any_signaled |= q->sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
    if (++occupancy == q->caps.max_send_wr && !any_signaled) return ReportUnsignaledDeadlock(c, *q);
  }
}

}  // namespace rdmasan::checkers
