/* sge-count: a WR with one SGE more than the QP's returned max_send_sge. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_sge = 2});
  const int max = (int)r.cap[0].max_send_sge;
  static char src[8 * 65], dst[8 * 65];
  if (max + 1 > 65) DIE("max_send_sge %d is larger than the test expects", max);
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge[65];
  for (int i = 0; i <= max; ++i) sge[i] = rig_sge(smr, src + 8 * i, 8);
  struct ibv_send_wr wr = rig_write_wr(1, sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  wr.num_sge = max + 1;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: sge-count
  printf("post with %d SGEs (max %d) returned %d\n", max + 1, max, ret);
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
