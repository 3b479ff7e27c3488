// post-after-error: no posting to a QP known to be in ERR (an error
// completion was polled, or modify_qp moved it there): its WRs are only
// flushed.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckPostAfterError(CheckContext& c) {
  const auto& e = c.e;
  const bool send = e.kind == core::EventKind::kPostSend;
  const QpState* q = c.qp;
  if (!q || q->state != IBV_QPS_ERR || c.Repeated(core::CheckId::kPostAfterError)) return;
  c.Emit(core::CheckId::kPostAfterError,
         absl::StrFormat("%s to %s, which is in ERR: the WRs will only be flushed",
                         send ? "post_send" : "post_recv", QpName(c.s, e.obj)));
}

}  // namespace rdmasan::checkers
