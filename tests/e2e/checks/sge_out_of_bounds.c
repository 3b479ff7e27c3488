/* sge-out-of-bounds: an SGE starts inside its MR and runs 8 bytes past its
 * end. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[128], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, 64, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: sge-out-of-bounds
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src + 56, 16);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: sge-out-of-bounds
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
