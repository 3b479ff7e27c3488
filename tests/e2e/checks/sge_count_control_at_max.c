/* Control for sge-count: a send with exactly max_send_sge SGEs and a receive
 * with exactly max_recv_sge. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_sge = 2, .max_recv_sge = 2});
  const int max = (int)r.cap[0].max_send_sge, rmax = (int)r.cap[1].max_recv_sge;
  static char src[8 * 64], dst[8 * 64];
  if (max > 64 || rmax > 64) DIE("max SGE %d/%d larger than the test expects", max, rmax);
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge[64], rsge[64];
  for (int i = 0; i < max; ++i) sge[i] = rig_sge(smr, src + 8 * i, 8);
  for (int i = 0; i < rmax; ++i) rsge[i] = rig_sge(dmr, dst + 8 * i, 8);
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = rsge, .num_sge = rmax}, *rbad;
  if (ibv_post_recv(r.qp[1], &rwr, &rbad)) DIE("post_recv failed");
  struct ibv_send_wr wr = rig_write_wr(1, sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  wr.num_sge = max;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  rig_poll_ok(r.cq[0], 1);
  rig_destroy_qps(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
