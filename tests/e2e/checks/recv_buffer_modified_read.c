// RUN-OPTS: --checks=+recv-buffer-modified
/* recv-buffer-modified, an RDMA READ's destination: the READ waits behind
 * a SEND that the peer is not ready for (no receive posted: RNR), and
 * meanwhile the program writes into `local`, where the READ's data will
 * land.  The NIC owns a READ's destination from the post until its
 * completion; the program's write is lost.  softnic sees it when the READ
 * places its data, and the poll that returns the READ's completion
 * reports it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char local[64], remote[64] = "the READ's data", msg[16] = "hello", inbox[16];
  struct ibv_mr *lmr = rig_reg(&r, local, sizeof local, RIG_ALL_ACCESS);
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msg, sizeof msg, RIG_ALL_ACCESS);
  struct ibv_mr *imr = rig_reg(&r, inbox, sizeof inbox, RIG_ALL_ACCESS);
  struct ibv_sge ssge = rig_sge(mmr, msg, sizeof msg);
  struct ibv_send_wr send = rig_write_wr(1, &ssge, 0, 0, 1), *bad;
  send.opcode = IBV_WR_SEND;
  if (ibv_post_send(r.qp[0], &send, &bad)) DIE("SEND post failed"); /* RNR: no receive yet */
  struct ibv_sge lsge = rig_sge(lmr, local, sizeof local);
  struct ibv_send_wr read = rig_write_wr(2, &lsge, (uintptr_t)remote, rmr->rkey, 1);
  read.opcode = IBV_WR_RDMA_READ;
  if (ibv_post_send(r.qp[0], &read, &bad)) DIE("READ post failed");  // POSTED-AT: recv-buffer-modified
  memset(local, 'x', sizeof local); /* the bug: the READ's data has not landed */
  struct ibv_sge rsge = rig_sge(imr, inbox, sizeof inbox);
  struct ibv_recv_wr recv = {.wr_id = 9, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &recv, &rbad)) DIE("post_recv failed");
  struct ibv_wc wc[2];
  int got = 0;
  double end = rig_now() + 10;
  while (got < 2 && rig_now() < end)
    got += ibv_poll_cq(r.cq[0], 2 - got, wc + got);  // CHECK: recv-buffer-modified
  if (got != 2 || wc[0].status != IBV_WC_SUCCESS || wc[1].status != IBV_WC_SUCCESS) DIE("completions failed");
  rig_poll_ok(r.cq[1], 1);
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(mmr);
  ibv_dereg_mr(imr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
