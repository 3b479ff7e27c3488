/* use-after-destroy: an ibv_wr_* batch on a destroyed extended QP.
 * ibv_wr_complete is refused with EINVAL and reported; the provider never
 * sees the batch. */
#include "qp_ex.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp_ex *x = make_qp_ex(&r, 0);
  static char src[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  if (ibv_destroy_qp(r.qp[0])) DIE("ibv_destroy_qp failed");
  r.qp[0] = NULL;
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, smr->lkey, (uintptr_t)src, 8);
  int ret = ibv_wr_complete(x);  // CHECK: use-after-destroy
  printf("wr_complete on a destroyed QP returned %d\n", ret);
  if (ret != EINVAL) DIE("a batch on a destroyed QP was not refused");
  ibv_dereg_mr(smr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
