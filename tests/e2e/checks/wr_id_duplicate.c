// RUN-OPTS: --checks=+wr-id-duplicate
/* wr-id-duplicate (off by default, hence the RUN-OPTS line): two
 * signaled WRs with the same wr_id outstanding on one QP. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(7, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("first post failed");   // POSTED-AT: wr-id-duplicate
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("second post failed");  // CHECK: wr-id-duplicate
  rig_poll_ok(r.cq[0], 2);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
