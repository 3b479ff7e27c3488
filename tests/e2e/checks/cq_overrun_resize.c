/* cq-overrun at ibv_resize_cq: a CQ made smaller than the completions that
 * can still land in it (receives posted, not yet completed). */
#include "common.h"

int main(void) {
  struct rig r;
  struct rig_opts opts = {.cqe = 16, .max_send_wr = 16, .max_recv_wr = 16};
  rig_setup(&r, &opts);  // CREATED-AT: cq-overrun
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge rsge = rig_sge(mr, buf, 16);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  for (int i = 0; i < 8; ++i)
    if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("receive %d failed", i);
  /* Nothing has completed yet, so softnic accepts the new size: only the
   * books know that eight receives can still complete here. */
  if (ibv_resize_cq(r.cq[0], 4)) DIE("resize failed");  // CHECK: cq-overrun
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
