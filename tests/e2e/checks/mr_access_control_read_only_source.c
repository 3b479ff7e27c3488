/* Control for mr-access: SEND and RDMA WRITE from an MR registered with no
 * access flags at all (local read is always allowed), a receive and an RDMA
 * READ into MRs with exactly IBV_ACCESS_LOCAL_WRITE. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64] = "hello", rbuf[64], rd[64], remote[64] = "remote";
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, 0);
  struct ibv_mr *rmr = rig_reg(&r, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *rdmr = rig_reg(&r, rd, sizeof rd, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *remr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(rmr, rbuf, sizeof rbuf);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &rwr, &rbad)) DIE("post_recv failed");
  struct ibv_sge sge = rig_sge(smr, src, 16);
  struct ibv_send_wr wr = rig_write_wr(2, &sge, 0, 0, 1), *bad;
  wr.opcode = IBV_WR_SEND;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("send failed");
  rig_poll_ok(r.cq[0], 1);
  rig_poll_ok(r.cq[1], 1);
  wr = rig_write_wr(3, &sge, (uintptr_t)remote, remr->rkey, 1);
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("write failed");
  rig_poll_ok(r.cq[0], 1);
  struct ibv_sge rdsge = rig_sge(rdmr, rd, 16);
  wr = rig_write_wr(4, &rdsge, (uintptr_t)remote, remr->rkey, 1);
  wr.opcode = IBV_WR_RDMA_READ;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("read failed");
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(rdmr);
  ibv_dereg_mr(remr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
