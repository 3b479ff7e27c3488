/* hang: the program arms its CQ and blocks in ibv_get_cq_event, but posted
 * nothing whose completion could raise the event: it would wait forever.
 * The watchdog reports it (the books prove it: before hang_timeout=1), and
 * halt_on_error=1 ends the program with rdmasan's exit status. */
// RUN-OPTS: --hang_timeout=1 --halt_on_error=1
// EXPECT: hang: no verbs progress for [0-9.]+ s while 1 thread waits: thread [0-9]+ blocks in ibv_get_cq
// EXPECT: on channel 0x[0-9a-f]+ \(CQ 0x[0-9a-f]+, CQ 0x[0-9a-f]+\) for
// EXPECT: CQ 0x[0-9a-f]+, armed: nothing outstanding can ever complete on CQ 0x[0-9a-f]+
// EXPECT: CQ 0x[0-9a-f]+, not armed: nothing outstanding can ever complete on CQ 0x[0-9a-f]+
// NO-DONE
// STATUS: 66
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.channel = 1});
  if (ibv_req_notify_cq(r.cq[0], 0)) DIE("req_notify failed");
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  if (ibv_get_cq_event(r.ch, &ev_cq, &ev_ctx) == 0)  // CHECK: hang
    ibv_ack_cq_events(ev_cq, 1);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
