/* use-after-destroy: a post to a QP whose device context was closed (with
 * the QP still alive).  Refused with EINVAL, reported as a use of the
 * closed context, not a silent success. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad = NULL;
  if (ibv_close_device(r.ctx)) DIE("ibv_close_device failed");
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: use-after-destroy
  printf("post_send after close_device returned %d\n", ret);
  if (ret != EINVAL || bad != &wr) DIE("a post after close_device was not refused");
  struct ibv_wc wc;
  if (ibv_poll_cq(r.cq[0], 1, &wc) != -1) DIE("a poll after close_device was not refused");
  struct ibv_qp_attr a;
  struct ibv_qp_init_attr ia;
  if (ibv_query_qp(r.qp[0], &a, IBV_QP_STATE, &ia) != EINVAL) DIE("query_qp after close_device accepted");
  printf("DONE\n");
  return 0;
}
