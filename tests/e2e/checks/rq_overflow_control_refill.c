/* Control for rq-overflow: the RQ is filled exactly to max_recv_wr; one
 * receive is consumed by a SEND and polled, then exactly one is posted to
 * refill it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_recv_wr = 4});
  static char buf[64], msg[16] = "hello";
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = rig_reg(&r, msg, sizeof msg, 0);
  struct ibv_sge sge = rig_sge(mr, buf, 16);
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
  const int depth = (int)r.cap[1].max_recv_wr;
  for (int i = 0; i < depth; ++i)
    if (ibv_post_recv(r.qp[1], &wr, &bad)) DIE("receive %d of %d failed", i, depth);
  struct ibv_sge ssge = rig_sge(smr, msg, sizeof msg);
  struct ibv_send_wr swr = {.wr_id = 2,
                            .sg_list = &ssge,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  if (ibv_post_send(r.qp[0], &swr, &sbad)) DIE("send failed");
  rig_poll_ok(r.cq[0], 1);
  rig_poll_ok(r.cq[1], 1);
  if (ibv_post_recv(r.qp[1], &wr, &bad)) DIE("refill failed");
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  ibv_dereg_mr(smr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
