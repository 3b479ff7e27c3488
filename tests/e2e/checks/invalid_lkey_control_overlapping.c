/* Control for invalid-lkey: two MRs of the QP's PD overlap; the SGE names
 * the second (inner) one, and another SGE the lkey of an MR registered
 * after a third one was deregistered (keys reused or not, both are live). */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[256], dst[256];
  struct ibv_mr *outer = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *inner = rig_reg(&r, src + 64, 64, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *gone = rig_reg(&r, src + 128, 64, IBV_ACCESS_LOCAL_WRITE);
  if (ibv_dereg_mr(gone)) DIE("dereg failed");
  struct ibv_mr *fresh = rig_reg(&r, src + 128, 64, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge[2] = {rig_sge(inner, src + 64, 64), rig_sge(fresh, src + 128, 64)};
  struct ibv_send_wr wr = rig_write_wr(1, sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  wr.num_sge = 2;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(inner);
  ibv_dereg_mr(outer);
  ibv_dereg_mr(fresh);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
