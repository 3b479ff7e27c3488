/* unfenced-read-use, near miss (and buffer-modified-in-flight's old false
 * alarm): a READ lands in `local`, and a SEND posted right behind it, in
 * the same chain, with IBV_SEND_FENCE sends `local` on.  The fence makes
 * the SEND wait for the READ, so the peer receives the READ's result; the
 * READ changes `local` between the SEND's post and its completion, as the
 * program means it to. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char local[64] = "old bytes", remote[64] = "the READ's result", got[64];
  struct ibv_mr *lmr = rig_reg(&r, local, sizeof local, RIG_ALL_ACCESS);
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_mr *gmr = rig_reg(&r, got, sizeof got, RIG_ALL_ACCESS);
  struct ibv_sge gsge = rig_sge(gmr, got, sizeof got);
  struct ibv_recv_wr recv = {.wr_id = 9, .sg_list = &gsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &recv, &rbad)) DIE("recv post failed");
  struct ibv_sge sge = rig_sge(lmr, local, sizeof local);
  struct ibv_send_wr read = rig_write_wr(1, &sge, (uintptr_t)remote, rmr->rkey, 1), *bad;
  read.opcode = IBV_WR_RDMA_READ;
  struct ibv_send_wr send = rig_write_wr(2, &sge, 0, 0, 1);
  send.opcode = IBV_WR_SEND;
  send.send_flags |= IBV_SEND_FENCE;
  read.next = &send;
  if (ibv_post_send(r.qp[0], &read, &bad)) DIE("READ+SEND post failed");
  rig_poll_ok(r.cq[0], 2);
  rig_poll_ok(r.cq[1], 1);
  if (memcmp(got, remote, sizeof got)) DIE("the SEND did not carry the READ's result");
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(gmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
