// RUN-OPTS: --checks=+overlapping-destinations
/* overlapping-destinations, near miss: receives into the two adjacent
 * halves of one buffer, and a receive reposted into a half only once the
 * completion of the one before it there was polled. */
#include "common.h"

static void post_recv(struct rig *r, struct ibv_mr *mr, char *at, uint64_t wr_id) {
  struct ibv_sge sge = rig_sge(mr, at, 32);
  struct ibv_recv_wr recv = {.wr_id = wr_id, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(r->qp[1], &recv, &bad)) DIE("recv post failed");
}

static void send_one(struct rig *r, struct ibv_mr *mr, char *msg, uint64_t wr_id) {
  struct ibv_sge sge = rig_sge(mr, msg, 32);
  struct ibv_send_wr send = rig_write_wr(wr_id, &sge, 0, 0, 1), *bad;
  send.opcode = IBV_WR_SEND;
  if (ibv_post_send(r->qp[0], &send, &bad)) DIE("send post failed");
}

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64], msg[32] = "a message";
  struct ibv_mr *bmr = rig_reg(&r, buf, sizeof buf, RIG_ALL_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msg, sizeof msg, RIG_ALL_ACCESS);
  post_recv(&r, bmr, buf, 1);
  post_recv(&r, bmr, buf + 32, 2);
  for (uint64_t i = 0; i < 4; ++i) {
    send_one(&r, mmr, msg, 10 + i);
    rig_poll_ok(r.cq[0], 1);
    rig_poll_ok(r.cq[1], 1);
    post_recv(&r, bmr, i % 2 ? buf + 32 : buf, 3 + i);
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(bmr);
  ibv_dereg_mr(mmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
