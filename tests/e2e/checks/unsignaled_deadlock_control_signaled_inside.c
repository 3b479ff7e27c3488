/* Control for unsignaled-deadlock: the SQ becomes exactly full and the last
 * WR posted is unsignaled, but a signaled WR sits inside the run, so its
 * completion frees slots.  Runs stay within half the SQ depth, so
 * unsignaled-run stays quiet too. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_wr = 4});
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
  const int depth = (int)r.cap[0].max_send_wr, half = depth / 2;
  const int sig = depth - half - 1; /* index of the one signaled WR */
  for (int i = 0; i < depth; ++i) {
    wr.wr_id = i;
    wr.send_flags = i == sig ? IBV_SEND_SIGNALED : 0;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post %d failed", i);
  }
  rig_poll_ok(r.cq[0], 1); /* retires WRs 0..sig */
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post after the poll failed");
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
