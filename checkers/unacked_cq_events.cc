// unacked-cq-events: every event returned by ibv_get_cq_event is acked,
// once, before ibv_destroy_cq: rdma-core's destroy_cq waits until the acked
// count equals the received count, so both too few acks (reported at the
// destroy) and too many (reported at the ibv_ack_cq_events that passes the
// received count) make it wait forever.  One id for both: the rule is the
// balance of events and acks.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckUnackedCqEvents(CheckContext& c) {
  if (c.e.kind == core::EventKind::kAckCqEvents) {
    const CqState* cq = c.s.Cq(c.e.obj);
    if (!cq || cq->events_acked + c.e.count <= cq->events_got) return;
    c.Emit(core::CheckId::kUnackedCqEvents,
           absl::StrFormat(
               "ibv_ack_cq_events acks %d events of CQ 0x%x, but only %d of its %d completion events "
               "are not yet acked (ibv_destroy_cq then waits forever)",
               c.e.count, c.e.obj, cq->events_got - cq->events_acked, cq->events_got),
           {{core::StackKind::kCreated, "CQ created at", cq->stack}});
    return;
  }
  // ibv_destroy_cq.
  const CqState* cq = c.s.Cq(c.e.obj);
  if (!cq || cq->events_got <= cq->events_acked) return;
  c.Emit(
      core::CheckId::kUnackedCqEvents,
      absl::StrFormat("CQ 0x%x destroyed with %d of its %d completion events not acked (ibv_ack_cq_events)",
                      c.e.obj, cq->events_got - cq->events_acked, cq->events_got),
      {{core::StackKind::kCreated, "CQ created at", cq->stack}});
}

}  // namespace rdmasan::checkers
