/* error-completion: a WRITE with a bad rkey completes with REM_ACCESS_ERR;
 * the report is made where the error is polled and carries the stack of
 * the post that made the failed WR. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0x33, &sge, (uintptr_t)dst, dmr->rkey + 0x100000, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");  // POSTED-AT: error-completion
  struct ibv_wc wc;
  int n;
  double end = rig_now() + 2.0;
  while ((n = ibv_poll_cq(r.cq[0], 1, &wc)) == 0 && rig_now() < end) {}  // CHECK: error-completion
  if (n != 1) DIE("no completion");
  printf("completion: %s\n", ibv_wc_status_str(wc.status));
  if (wc.status != IBV_WC_REM_ACCESS_ERR) DIE("wanted REM_ACCESS_ERR");
  rig_drain(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
