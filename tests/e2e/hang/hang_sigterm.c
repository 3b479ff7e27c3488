/* hang: the program posts a receive, arms the CQ and blocks in
 * ibv_get_cq_event for a message the peer never sends; the job's time
 * limit ends it with SIGTERM.  With hang_timeout set (longer than the
 * wait), the report comes from the SIGTERM, and the program still dies of
 * SIGTERM.  The receive is on the books: it could still complete.  The
 * signal comes 3 s after "waiting" is printed, not after the start: under
 * load the setup alone may take that long, and a SIGTERM before the wait
 * proves nothing. */
// RUN-OPTS: --hang_timeout=60
// SIGNAL: TERM 3
// EXPECT: hang: no verbs progress for [0-9]+ s while 1 thread waits when SIGTERM ended it: thread [0-9]+
// EXPECT: blocks in ibv_get_cq_event
// EXPECT: CQ 0x[0-9a-f]+, armed: 1 outstanding WR could still complete
// EXPECT: 0 signaled sends, 0 unsignaled sends, 1 receive outstanding
// NO-DONE
// STATUS: 143
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.channel = 1});
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge sge = rig_sge(mr, buf, sizeof buf);
  struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(r.qp[0], &rwr, &bad)) DIE("post_recv failed");
  if (ibv_req_notify_cq(r.cq[0], 0)) DIE("req_notify failed");
  struct ibv_wc wc;
  if (ibv_poll_cq(r.cq[0], 1, &wc) != 0) DIE("a completion before the message was sent");
  printf("waiting\n");
  fflush(stdout);
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  if (ibv_get_cq_event(r.ch, &ev_cq, &ev_ctx) == 0)  // CHECK: hang
    ibv_ack_cq_events(ev_cq, 1);
  printf("DONE\n");
  return 0;
}
