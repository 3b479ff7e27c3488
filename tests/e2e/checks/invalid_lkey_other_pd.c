/* invalid-lkey, other-PD flavour: the SGE names a live MR that covers the
 * buffer, but the MR belongs to another PD than the QP's. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_pd *pd2 = ibv_alloc_pd(r.ctx);
  if (!pd2) DIE("ibv_alloc_pd failed");
  static char src[64], dst[64];
  struct ibv_mr *smr =
      ibv_reg_mr(pd2, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: invalid-lkey
  if (!smr) DIE("ibv_reg_mr failed");
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: invalid-lkey
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  ibv_dealloc_pd(pd2);  // before the device is closed: its context goes with it
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
