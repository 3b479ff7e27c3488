/* invalid-lkey: an SGE names an lkey no MR has. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  sge.lkey = smr->lkey + 0x100000;
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: invalid-lkey
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
