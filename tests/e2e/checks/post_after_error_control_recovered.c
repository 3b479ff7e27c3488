// RUN-OPTS: --checks=-error-completion
/* Control for post-after-error: after the REM_ACCESS_ERR completion the
 * program takes both QPs through RESET back to RTS before posting again.
 * (Run with checks=-error-completion: the error itself is the point of that
 * other check, not of this control.) */
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
  if (wc.status == IBV_WC_SUCCESS) DIE("a bad rkey succeeded");
  rig_drain(&r);
  rig_reconnect(&r);
  wr = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1);
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post after recovery failed");
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
