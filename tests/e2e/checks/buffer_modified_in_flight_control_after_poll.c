/* Control for buffer-modified-in-flight: the send buffer is rewritten right
 * after polling the completion that retires the WR (the earliest legal
 * moment), and then sent again.  An unsignaled WR retired by a later
 * signaled one is rewritten only after that later completion. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64] = "payload", src2[64] = "second", dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr2 = rig_reg(&r, src2, sizeof src2, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, sizeof src);
  struct ibv_sge sge2 = rig_sge(smr2, src2, sizeof src2);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  struct ibv_send_wr wr2 = rig_write_wr(2, &sge2, (uintptr_t)dst, dmr->rkey, 1);
  for (int i = 0; i < 3; ++i) {
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
    rig_poll_ok(r.cq[0], 1);
    snprintf(src, sizeof src, "payload %d", i); /* retired: free to reuse */
  }
  wr.send_flags = 0; /* unsignaled, retired by wr2's completion */
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("unsignaled post failed");
  if (ibv_post_send(r.qp[0], &wr2, &bad)) DIE("signaled post failed");
  rig_poll_ok(r.cq[0], 1);
  memcpy(src, "rewritten", 10);
  memcpy(src2, "rewritten", 10);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(smr2);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
