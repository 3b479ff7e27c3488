/* notify-without-poll: an event is taken and acked, the CQ re-armed while
 * its completion is still unpolled, and the program waits for the next
 * event without polling; that completion raises no event, so a blocking
 * wait would hang forever.  The channel fd is made non-blocking so the
 * wait returns EAGAIN instead. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.channel = 1});  // CREATED-AT: notify-without-poll
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  if (ibv_req_notify_cq(r.cq[0], 0)) DIE("req_notify failed");
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  if (ibv_get_cq_event(r.ch, &ev_cq, &ev_ctx)) DIE("get_cq_event failed");
  ibv_ack_cq_events(ev_cq, 1);
  if (ibv_req_notify_cq(r.cq[0], 0)) DIE("re-arm failed");
  int flags = fcntl(r.ch->fd, F_GETFL);
  if (flags < 0 || fcntl(r.ch->fd, F_SETFL, flags | O_NONBLOCK) < 0) DIE("fcntl failed");
  int ret = ibv_get_cq_event(r.ch, &ev_cq, &ev_ctx);  // CHECK: notify-without-poll
  printf("second get_cq_event returned %d (%s)\n", ret, ret ? strerror(errno) : "an event");
  if (ret == 0) ibv_ack_cq_events(ev_cq, 1);
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
