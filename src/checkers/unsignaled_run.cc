// unsignaled-run: no run of unsignaled WRs passes half the SQ depth (docs/RULES.md:
// signal at least at the half mark).
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckUnsignaledRun(CheckContext& c) {
  if (c.e.kind != core::EventKind::kPostSend) return;
  const QpState* q = c.qp;
  if (!q || q->sq_sig_all || q->caps.max_send_wr < 2) return;
  uint32_t run = q->unsignaled_run;
  const size_t n = std::min<size_t>(c.e.send_wrs.size(), c.e.bad_index);
  for (size_t i = 0; i < n; ++i) {
    run = (c.e.send_wrs[i].send_flags & IBV_SEND_SIGNALED) ? 0 : run + 1;
    if (run > q->caps.max_send_wr / 2) {
      if (c.Repeated(core::CheckId::kUnsignaledRun)) return;
      c.Emit(core::CheckId::kUnsignaledRun,
             absl::StrFormat("%s: %d unsignaled WRs in a row pass half the SQ depth (max_send_wr=%d); signal at "
                             "least every %d",
                             QpName(c.s, c.e.obj), run, q->caps.max_send_wr, q->caps.max_send_wr / 2),
             {{"QP created at", q->stack}});
      return;
    }
  }
}

}  // namespace rdmasan::checkers
