// RUN-OPTS: --checks=+recv-buffer-modified
/* recv-buffer-modified: a receive is posted on `inbox`, then the program
 * writes a default answer into `inbox` before the peer's message has come
 * (a buffer "prepared" while the NIC owns it).  The message overwrites it,
 * or, on a NIC that places in pieces, mixes with it; the program's bytes
 * are lost either way.  softnic sees the write when it places the message,
 * and the poll that returns the receive's completion reports it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char inbox[64], msg[64] = "the peer's message";
  struct ibv_mr *imr = rig_reg(&r, inbox, sizeof inbox, RIG_ALL_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msg, sizeof msg, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(imr, inbox, sizeof inbox);
  struct ibv_recv_wr recv = {.wr_id = 7, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &recv, &rbad)) DIE("post_recv failed");  // POSTED-AT: recv-buffer-modified
  strcpy(inbox, "no answer yet");                                     /* the bug: the NIC owns inbox now */
  struct ibv_sge ssge = rig_sge(mmr, msg, sizeof msg);
  struct ibv_send_wr send = rig_write_wr(1, &ssge, 0, 0, 1), *sbad;
  send.opcode = IBV_WR_SEND;
  if (ibv_post_send(r.qp[0], &send, &sbad)) DIE("SEND post failed");
  rig_poll_ok(r.cq[0], 1);
  struct ibv_wc wc;
  int n;
  double end = rig_now() + 10;
  while ((n = ibv_poll_cq(r.cq[1], 1, &wc)) == 0 && rig_now() < end) {}  // CHECK: recv-buffer-modified
  if (n != 1 || wc.status != IBV_WC_SUCCESS) DIE("no receive completion");
  ibv_dereg_mr(imr);
  ibv_dereg_mr(mmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
