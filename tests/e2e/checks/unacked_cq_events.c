/* unacked-cq-events: a CQ event is taken with ibv_get_cq_event and never
 * acknowledged before the CQ is destroyed. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.channel = 1});  // CREATED-AT: unacked-cq-events
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
  if (ev_cq != r.cq[0]) DIE("event for the wrong CQ");
  rig_poll_ok(r.cq[0], 1);
  /* no ibv_ack_cq_events */
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  for (int i = 0; i < 2; ++i) ibv_destroy_qp(r.qp[i]);
  r.qp[0] = r.qp[1] = NULL;
  int ret = ibv_destroy_cq(r.cq[0]);  // CHECK: unacked-cq-events
  printf("destroy_cq returned %d\n", ret);
  if (ret == 0) r.cq[0] = NULL;
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
