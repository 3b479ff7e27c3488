/* unsignaled-run: half the SQ depth plus one unsignaled WRs in a row (the SQ
 * is not full, so no deadlock), then a signaled one that retires them. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_wr = 8});  // CREATED-AT: unsignaled-run
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
  const int half = (int)r.cap[0].max_send_wr / 2;
  for (int i = 0; i <= half; ++i)
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post %d failed", i);  // CHECK: unsignaled-run
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("signaled post failed");
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
