/* use-after-destroy: ibv_post_send to a QP already destroyed.  Refused
 * (EINVAL, bad_wr set) and reported, not a crash in the shim. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_qp *qp = r.qp[0];
  if (ibv_destroy_qp(qp)) DIE("ibv_destroy_qp failed");
  r.qp[0] = NULL;
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad = NULL;
  int ret = ibv_post_send(qp, &wr, &bad);  // CHECK: use-after-destroy
  printf("post_send to a destroyed QP returned %d\n", ret);
  if (ret == 0 || bad != &wr) DIE("the post to a destroyed QP was not refused with bad_wr set");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
