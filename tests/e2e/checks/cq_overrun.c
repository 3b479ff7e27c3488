/* cq-overrun: receives and signaled sends outstanding on QPs bound to one CQ
 * add up to one more than the CQ's cqe. */
#include "common.h"

int main(void) {
  struct rig r;
  struct rig_opts opts = {.cqe = 4, .max_send_wr = 32, .max_recv_wr = 32};
  rig_setup(&r, &opts);  // CREATED-AT: cq-overrun
  const int cqe = r.cq[0]->cqe;
  if (cqe < 2 || cqe > (int)r.cap[0].max_recv_wr) DIE("cqe %d does not fit the test", cqe);
  static char buf[64], src[64], dst[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(mr, buf, 16);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  for (int i = 0; i < cqe - 1; ++i)
    if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("receive %d failed", i);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("first write failed");   /* cqe pending: full */
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("second write failed");  // CHECK: cq-overrun
  rig_poll_ok(r.cq[0], 2);
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
