/* post-after-error: a WRITE with a bad rkey fails with REM_ACCESS_ERR (the
 * error-completion warning comes first), the program polls that error and
 * then posts to the same QP, now in ERR. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey + 0x100000, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  struct ibv_wc wc;
  if (rig_poll_n(r.cq[0], &wc, 1) != 1) DIE("no completion");
  printf("first completion: %s\n", ibv_wc_status_str(wc.status));
  if (wc.status == IBV_WC_SUCCESS) DIE("a bad rkey succeeded");
  wr = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1);
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: post-after-error
  if (ret == 0 && rig_poll_n(r.cq[0], &wc, 1) == 1)
    printf("second completion: %s\n", ibv_wc_status_str(wc.status));
  rig_drain(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
