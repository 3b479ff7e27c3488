// RUN-OPTS: --checks=+wr-id-duplicate
/* Control for wr-id-duplicate (enabled by the RUN-OPTS line): a wr_id
 * is reused only after the completion of its first WR was polled; the same
 * wr_id on another QP and on unsignaled WRs is allowed at any time. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(7, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  if (ibv_post_send(r.qp[1], &wr, &bad)) DIE("post on the other QP failed");
  rig_poll_ok(r.cq[0], 1);
  rig_poll_ok(r.cq[1], 1);
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("reuse after the poll failed");
  wr.send_flags = 0;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("unsignaled post failed");
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr_id = 8;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  rig_poll_ok(r.cq[0], 2);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
