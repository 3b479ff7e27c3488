/* Control for cq_event_as_completion.c: the same sender, correct.  An
 * event only says "poll": after each one it acks, re-arms, polls until
 * the CQ is empty, and waits again until the SEND's own completion came.
 * Silent under --chaos=cq_event:p=1, where every wait that may wake
 * spuriously does. */
#include "slow_receiver.h"

int main(void) {
  struct rig r;
  struct rig_opts o = {.channel = 1};
  rig_setup(&r, &o);
  static char msg[64], in[64];
  struct ibv_mr *mmsg = rig_reg(&r, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *min = rig_reg(&r, in, sizeof in, IBV_ACCESS_LOCAL_WRITE);
  snprintf(msg, sizeof msg, "hello");
  struct slow_receiver rx = {.r = &r, .mr = min, .buf = in, .len = sizeof in};
  slow_receiver_start(&rx);
  if (ibv_req_notify_cq(r.cq[0], 0)) DIE("req_notify_cq");
  struct ibv_sge s = rig_sge(mmsg, msg, sizeof msg);
  struct ibv_send_wr w = {.wr_id = 1,
                          .sg_list = &s,
                          .num_sge = 1,
                          .opcode = IBV_WR_SEND,
                          .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  if (ibv_post_send(r.qp[0], &w, &bad)) DIE("post_send");
  int done = 0, events = 0;
  while (!done) {
    struct ibv_cq *cq;
    void *cq_context;
    if (ibv_get_cq_event(r.ch, &cq, &cq_context)) DIE("get_cq_event");
    ibv_ack_cq_events(cq, 1);
    ++events;
    if (ibv_req_notify_cq(cq, 0)) DIE("req_notify_cq");
    struct ibv_wc wc;
    int n;
    while ((n = ibv_poll_cq(cq, 1, &wc)) == 1) {
      if (wc.status != IBV_WC_SUCCESS) DIE("completion %s", ibv_wc_status_str(wc.status));
      if (wc.wr_id == 1) done = 1;
    }
    if (n < 0) DIE("poll_cq");
    if (events > 100) DIE("woken 100 times without the SEND's completion");
  }
  if (ibv_dereg_mr(mmsg)) DIE("dereg_mr");
  slow_receiver_join(&rx);
  if (!slow_receiver_got(&rx, 2.0)) DIE("the receiver got nothing");
  printf("events %d\n", events);
  if (ibv_dereg_mr(min)) DIE("dereg_mr");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
