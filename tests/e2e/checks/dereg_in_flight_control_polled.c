/* Control for dereg-in-flight: the MR is deregistered right after the
 * completion that retires its last WR is polled; the unsignaled WR before
 * it is retired by the same completion. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0x2a, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("unsignaled post failed");
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("signaled post failed");
  rig_poll_ok(r.cq[0], 1);
  if (ibv_dereg_mr(smr)) DIE("dereg failed");
  if (ibv_dereg_mr(dmr)) DIE("dereg failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
