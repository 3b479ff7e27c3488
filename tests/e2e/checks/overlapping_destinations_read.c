// RUN-OPTS: --checks=+overlapping-destinations
/* overlapping-destinations, READ flavour: an RDMA READ's result lands in a
 * buffer a posted receive still owns; the READ's response and the message
 * may land in either order. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64], remote[64] = "the READ's result", msg[64] = "a message";
  struct ibv_mr *bmr = rig_reg(&r, buf, sizeof buf, RIG_ALL_ACCESS);
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msg, sizeof msg, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(bmr, buf, sizeof buf);
  struct ibv_recv_wr recv = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[0], &recv, &rbad)) DIE("recv post failed");  // POSTED-AT: overlapping-destinations
  struct ibv_sge sge = rig_sge(bmr, buf + 16, 16);
  struct ibv_send_wr read = rig_write_wr(2, &sge, (uintptr_t)remote, rmr->rkey, 1), *bad;
  read.opcode = IBV_WR_RDMA_READ;
  if (ibv_post_send(r.qp[0], &read, &bad)) DIE("READ post failed");  // CHECK: overlapping-destinations
  rig_poll_ok(r.cq[0], 1);
  struct ibv_sge msge = rig_sge(mmr, msg, sizeof msg);
  struct ibv_send_wr send = rig_write_wr(3, &msge, 0, 0, 1);
  send.opcode = IBV_WR_SEND;
  if (ibv_post_send(r.qp[1], &send, &bad)) DIE("send post failed");
  rig_poll_ok(r.cq[1], 1);
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(bmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(mmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
