/* Control for unsignaled-run (and sq-overflow, unsignaled-deadlock): groups
 * of (half depth - 1) unsignaled WRs closed by a signaled one keep the SQ
 * exactly full; each polled completion must retire its whole group,
 * unsignaled WRs included, or the next group would overflow the SQ. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_wr = 8});
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
  const int depth = (int)r.cap[0].max_send_wr, group = depth / 2;
  if (depth % group) DIE("max_send_wr %d is odd", depth);
  const int groups = 8;
  for (int g = 0; g < groups; ++g) {
    if (g >= depth / group) rig_poll_ok(r.cq[0], 1); /* the SQ is full: retire the oldest group */
    for (int i = 0; i < group; ++i) {
      wr.wr_id = g * 100 + i;
      wr.send_flags = i == group - 1 ? IBV_SEND_SIGNALED : 0;
      if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("group %d post %d failed", g, i);
    }
  }
  rig_poll_ok(r.cq[0], depth / group);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
