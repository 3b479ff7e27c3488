/* Control for sq-overflow (and the ibv_wr_* shadow): a batch of 16 RDMA
 * WRITEs on a 16-deep SQ, one report-free event, not two (softnic posts the
 * batch through post_send inside ibv_wr_complete). */
#include "qp_ex.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp_ex *x = make_qp_ex(&r, 0);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  for (int round = 0; round < 2; ++round) {
    ibv_wr_start(x);
    for (int i = 0; i < 16; ++i) {
      x->wr_id = (uint64_t)i;
      x->wr_flags = i % 8 == 7 ? IBV_SEND_SIGNALED : 0;
      ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
      ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 8);
    }
    if (ibv_wr_complete(x)) DIE("ibv_wr_complete of 16 WRs failed");
    rig_poll_ok(r.cq[0], 2);
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
