/* Control for notify-without-poll: the ibv_rc_pingpong -e pattern: wait
 * for an event, ack it, re-arm, then poll the CQ empty before posting the
 * next WR and waiting again. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.channel = 1});
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_req_notify_cq(r.cq[0], 0)) DIE("req_notify failed");
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  for (int iter = 0; iter < 3; ++iter) {
    struct ibv_cq *ev_cq;
    void *ev_ctx;
    if (ibv_get_cq_event(r.ch, &ev_cq, &ev_ctx)) DIE("get_cq_event failed");
    ibv_ack_cq_events(ev_cq, 1);
    if (ibv_req_notify_cq(ev_cq, 0)) DIE("re-arm failed");
    struct ibv_wc wc;
    int n, got = 0;
    while ((n = ibv_poll_cq(ev_cq, 1, &wc)) > 0) {
      if (wc.status != IBV_WC_SUCCESS) DIE("completion: %s", ibv_wc_status_str(wc.status));
      ++got;
    }
    if (n < 0 || got != 1) DIE("iteration %d polled %d completions", iter, got);
    if (iter < 2 && ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
