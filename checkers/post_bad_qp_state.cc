// post-bad-qp-state: sends only in RTS or SQD, receives not in RESET (shadow
// state from modify_qp and error completions).  A QP in ERR is
// post-after-error's case.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckPostBadQpState(CheckContext& c) {
  const auto& e = c.e;
  const bool send = e.kind == core::EventKind::kPostSend;
  const QpState* q = c.qp;
  if (!q || q->state == IBV_QPS_ERR) return;
  const char* verb = send ? "post_send" : "post_recv";
  bool bad = send ? (q->state != IBV_QPS_RTS && q->state != IBV_QPS_SQD) : q->state == IBV_QPS_RESET;
  if (bad)
    c.Emit(core::CheckId::kPostBadQpState,
           absl::StrFormat("%s to %s in state %s (%s)", verb, QpName(c.s, e.obj), QpStateName(q->state),
                           send ? "sends need RTS or SQD" : "receives need INIT or later"),
           {{core::StackKind::kCreated, "QP created at", q->stack}});
}

}  // namespace rdmasan::checkers
