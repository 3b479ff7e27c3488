/* Control for unsignaled-run: runs of exactly half the SQ depth unsignaled
 * WRs, each closed by a signaled one (the boundary: a run may reach half the
 * depth, not pass it), for several rounds. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_wr = 8});
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
  const int half = (int)r.cap[0].max_send_wr / 2;
  for (int round = 0; round < 4; ++round) {
    for (int i = 0; i <= half; ++i) {
      wr.wr_id = round * 100 + i;
      wr.send_flags = i == half ? IBV_SEND_SIGNALED : 0;
      if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("round %d post %d failed", round, i);
    }
    rig_poll_ok(r.cq[0], 1);
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
