// RUN-OPTS: --checks=+overlapping-destinations
/* overlapping-destinations (off by default, hence the RUN-OPTS line): two
 * receives outstanding into one buffer.  Two messages arrive; the NIC may
 * place them in either order (or interleaved), so what `buf` holds when
 * both completions are in is undefined. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64], msg[2][64] = {"first", "second"};
  struct ibv_mr *bmr = rig_reg(&r, buf, sizeof buf, RIG_ALL_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msg, sizeof msg, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(bmr, buf, sizeof buf);
  struct ibv_recv_wr recv = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &recv, &rbad)) DIE("recv post failed");  // POSTED-AT: overlapping-destinations
  recv.wr_id = 2;
  if (ibv_post_recv(r.qp[1], &recv, &rbad)) DIE("recv post failed");  // CHECK: overlapping-destinations
  for (int i = 0; i < 2; ++i) {
    struct ibv_sge sge = rig_sge(mmr, msg[i], sizeof msg[i]);
    struct ibv_send_wr send = rig_write_wr(10 + i, &sge, 0, 0, 1), *bad;
    send.opcode = IBV_WR_SEND;
    if (ibv_post_send(r.qp[0], &send, &bad)) DIE("send post failed");
  }
  rig_poll_ok(r.cq[0], 2);
  rig_poll_ok(r.cq[1], 2);
  ibv_dereg_mr(bmr);
  ibv_dereg_mr(mmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
