/* Bug only under a spurious completion event: a sender waits for its
 * SEND with ibv_get_cq_event and takes the event for the SEND's
 * completion.  ibv_get_cq_event(3) allows an event with nothing to poll
 * behind it.  The receiver posts its receive late (slow_receiver.h), so
 * the SEND completes only then.  Plain softnic raises an event only for a
 * completion: the one poll after it finds the SEND's, and plain `rdmasan
 * run` is silent.  Under --chaos=cq_event the first wait may wake at once,
 * the poll finds nothing, and the send buffer's MR is deregistered under
 * the outstanding SEND: dereg-in-flight at the marked line. */
// CHECK-NOT: buffer-modified-in-flight
#include "slow_receiver.h"

int main(void) {
  struct rig r;
  struct rig_opts o = {.channel = 1};
  rig_setup(&r, &o);
  static char msg[64], in[64];
  struct ibv_mr *mmsg =
      rig_reg(&r, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: dereg-in-flight
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
  if (ibv_post_send(r.qp[0], &w, &bad)) DIE("post_send");  // POSTED-AT: dereg-in-flight
  struct ibv_cq *cq;
  void *cq_context;
  if (ibv_get_cq_event(r.ch, &cq, &cq_context)) DIE("get_cq_event");
  ibv_ack_cq_events(cq, 1);
  /* BUG: the event is taken for the SEND's completion: one poll, whatever
   * it finds, and the buffer is given back. */
  struct ibv_wc wc;
  if (ibv_poll_cq(r.cq[0], 1, &wc) < 0) DIE("poll_cq");
  if (ibv_dereg_mr(mmsg)) DIE("dereg_mr");  // CHECK: dereg-in-flight
  slow_receiver_join(&rx);
  printf("receiver %s\n", slow_receiver_got(&rx, 0.2) ? "got the message" : "got nothing");
  rig_destroy_qps(&r);
  ibv_dereg_mr(min);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
