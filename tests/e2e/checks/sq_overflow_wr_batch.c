/* sq-overflow through the ibv_wr_* API: a batch of 40 RDMA WRITEs built on
 * a QP whose SQ holds 16.  softnic refuses the batch at ibv_wr_complete
 * (ENOMEM); the check must still see the batch as the program built it,
 * reported at the ibv_wr_complete call. */
#include "qp_ex.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp_ex *x = make_qp_ex(&r, 0);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  ibv_wr_start(x);
  for (int i = 0; i < 40; ++i) {
    x->wr_id = (uint64_t)i;
    x->wr_flags = i == 39 ? IBV_SEND_SIGNALED : 0;
    ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
    ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 8);
  }
  int ret = ibv_wr_complete(x);  // CHECK: sq-overflow
  printf("ibv_wr_complete of 40 WRs on a 16-deep SQ returned %d\n", ret);
  if (ret == 0) rig_drain(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
