// RUN-OPTS: --checks=+recv-buffer-modified
/* recv-buffer-modified, near-miss: the program prepares `inbox` before it
 * posts the receive, reads it only after the completion, and posts a
 * second receive on the same buffer (as ibv_rc_pingpong does) that the
 * first message's landing changes: the NIC's own writes are no finding. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char inbox[64], msg[64] = "the peer's message";
  struct ibv_mr *imr = rig_reg(&r, inbox, sizeof inbox, RIG_ALL_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msg, sizeof msg, RIG_ALL_ACCESS);
  strcpy(inbox, "no answer yet"); /* before the post: the program's own */
  struct ibv_sge rsge = rig_sge(imr, inbox, sizeof inbox);
  struct ibv_recv_wr recv[2] = {{.wr_id = 7, .sg_list = &rsge, .num_sge = 1},
                                {.wr_id = 8, .sg_list = &rsge, .num_sge = 1}},
                     *rbad;
  recv[0].next = &recv[1];
  if (ibv_post_recv(r.qp[1], recv, &rbad)) DIE("post_recv failed");
  struct ibv_sge ssge = rig_sge(mmr, msg, sizeof msg);
  for (int i = 0; i < 2; ++i) {
    msg[0] = (char)('a' + i);
    struct ibv_send_wr send = rig_write_wr(1 + i, &ssge, 0, 0, 1), *sbad;
    send.opcode = IBV_WR_SEND;
    if (ibv_post_send(r.qp[0], &send, &sbad)) DIE("SEND post failed");
    rig_poll_ok(r.cq[0], 1);
    rig_poll_ok(r.cq[1], 1);
    if (inbox[0] != 'a' + i) DIE("message %d did not land", i);
  }
  strcpy(inbox, "read, now reused"); /* after the completions: the program's again */
  ibv_dereg_mr(imr);
  ibv_dereg_mr(mmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
