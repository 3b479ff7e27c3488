/* cq-overrun near miss: a CQ grown with ibv_resize_cq takes posts that its
 * first size could not have held. */
#include "common.h"

int main(void) {
  struct rig r;
  struct rig_opts opts = {.cqe = 4, .max_send_wr = 16, .max_recv_wr = 16};
  rig_setup(&r, &opts);
  if (ibv_resize_cq(r.cq[0], 12)) DIE("resize failed");
  if (r.cq[0]->cqe < 12) DIE("cqe %d after resize", r.cq[0]->cqe);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge rsge = rig_sge(mr, buf, 16);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  for (int i = 0; i < 10; ++i)
    if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("receive %d failed", i);
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
