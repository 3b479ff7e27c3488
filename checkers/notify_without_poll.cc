// notify-without-poll: after ibv_req_notify_cq the CQ is polled before the
// program blocks for its next event.  A completion that arrived before the
// arming raises no event: only a poll after arming finds it (the pattern of
// ibv_rc_pingpong -e).  Reported when the program enters ibv_get_cq_event on
// the channel while some CQ of it was armed, not polled since, and could
// already hold completions then.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckNotifyWithoutPoll(CheckContext& c) {
  // The CQs of this channel armed and not polled since, lowest id first.
  core::ObjId cq_id = c.s.LowestCqWhere([&](const CqState& cq) {
    return cq.channel == c.e.obj && cq.armed && !cq.polled_since_arm && cq.armed_with_pending;
  });
  if (!cq_id) return;
  c.Emit(core::CheckId::kNotifyWithoutPoll,
         absl::StrFormat("waiting for the next event of CQ 0x%x without polling it after ibv_req_notify_cq; "
                         "completions that arrived before the arming raise no event",
                         cq_id),
         {{core::StackKind::kCreated, "CQ created at", c.s.Cq(cq_id)->stack}});
}

}  // namespace rdmasan::checkers
