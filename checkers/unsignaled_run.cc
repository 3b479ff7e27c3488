// unsignaled-run: no run of unsignaled WRs passes half the SQ depth
// (docs/checks.md#unsignaled-run: signal at least at the half mark).
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportUnsignaledRun(CheckContext& c, const QpState& q, uint32_t run) {
  if (c.Repeated(core::CheckId::kUnsignaledRun)) return;
  c.Emit(core::CheckId::kUnsignaledRun,
         absl::StrFormat("%s: %d unsignaled WRs in a row pass half the SQ depth (max_send_wr=%d); signal at "
                         "least every %d",
                         QpName(c.s, c.e.obj), run, q.caps.max_send_wr, q.caps.max_send_wr / 2),
         {{core::StackKind::kCreated, "QP created at", q.stack}});
}

}  // namespace

void CheckUnsignaledRun(CheckContext& c) {
  const QpState* q = c.qp;
  if (!q || q->sq_sig_all || q->caps.max_send_wr < 2) return;
  uint32_t run = q->unsignaled_run;
  for (const core::SendWr& w : c.Posted()) {
    run = (w.send_flags & IBV_SEND_SIGNALED) ? 0 : run + 1;
    if (run > q->caps.max_send_wr / 2) return ReportUnsignaledRun(c, *q, run);
  }
}

}  // namespace rdmasan::checkers
