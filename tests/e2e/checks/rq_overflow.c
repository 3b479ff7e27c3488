/* rq-overflow: one receive past the returned max_recv_wr while none of the
 * earlier ones has completed. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_recv_wr = 4});  // CREATED-AT: rq-overflow
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge sge = rig_sge(mr, buf, 16);
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
  const int depth = (int)r.cap[1].max_recv_wr;
  for (int i = 0; i < depth; ++i)
    if (ibv_post_recv(r.qp[1], &wr, &bad)) DIE("receive %d of %d failed", i, depth);
  int ret = ibv_post_recv(r.qp[1], &wr, &bad);  // CHECK: rq-overflow
  printf("receive past max_recv_wr=%d returned %d\n", depth, ret);
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
