// unacked-cq-events: every event returned by ibv_get_cq_event is acked
// before ibv_destroy_cq (which otherwise waits for it forever).
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckUnackedCqEvents(CheckContext& c) {
  if (c.e.kind != core::EventKind::kDestroyCq) return;
  const CqState* cq = c.s.Cq(c.e.obj);
  if (!cq || cq->events_got <= cq->events_acked) return;
  c.Emit(
      core::CheckId::kUnackedCqEvents,
      absl::StrFormat("CQ 0x%x destroyed with %d of its %d completion events not acked (ibv_ack_cq_events)",
                      c.e.obj, cq->events_got - cq->events_acked, cq->events_got),
      {{"CQ created at", cq->stack}});
}

}  // namespace rdmasan::checkers
