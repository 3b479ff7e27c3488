/* sq-overflow: one post past the returned max_send_wr with every earlier WR
 * still outstanding (none of their completions polled). */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_wr = 4});  // CREATED-AT: sq-overflow
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  const int depth = (int)r.cap[0].max_send_wr;
  for (int i = 0; i < depth; ++i)
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post %d of %d failed", i, depth);  // POSTED-AT: sq-overflow
  int ret = ibv_post_send(r.qp[0], &wr, &bad);                                     // CHECK: sq-overflow
  printf("post past max_send_wr=%d returned %d\n", depth, ret);
  rig_poll_ok(r.cq[0], depth + (ret == 0));
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
