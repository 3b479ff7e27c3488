// post-bad-qp-state and post-after-error: sends only in RTS or SQD,
// receives not in RESET (shadow state from modify_qp and error
// completions); posting to a QP known to be in ERR only produces flushes.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckPostState(CheckContext& c) {
  const auto& e = c.e;
  const bool send = e.kind == core::EventKind::kPostSend;
  if (!send && e.kind != core::EventKind::kPostRecv) return;
  const QpState* q = c.qp;
  if (!q) return;
  const char* verb = send ? "post_send" : "post_recv";
  if (q->state == IBV_QPS_ERR) {
    if (c.Repeated(core::CheckId::kPostAfterError)) return;
    c.Emit(core::CheckId::kPostAfterError,
           absl::StrFormat("%s to %s, which is in ERR: the WRs will only be flushed", verb, QpName(c.s, e.obj)));
    return;
  }
  bool bad = send ? (q->state != IBV_QPS_RTS && q->state != IBV_QPS_SQD) : q->state == IBV_QPS_RESET;
  if (bad)
    c.Emit(core::CheckId::kPostBadQpState,
           absl::StrFormat("%s to %s in state %s (%s)", verb, QpName(c.s, e.obj), QpStateName(q->state),
                           send ? "sends need RTS or SQD" : "receives need INIT or later"),
           {{"QP created at", q->stack}});
}

}  // namespace rdmasan::checkers
