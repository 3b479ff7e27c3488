/* unfenced-read-use, near miss: the READ's completion is polled before the
 * WRITE that sends its result is posted (on the other QP, which no fence
 * would order): the result has landed. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char local[64], remote[64] = "the READ's result", dst[64];
  struct ibv_mr *lmr = rig_reg(&r, local, sizeof local, RIG_ALL_ACCESS);
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(lmr, local, sizeof local);
  struct ibv_send_wr read = rig_write_wr(1, &sge, (uintptr_t)remote, rmr->rkey, 1), *bad;
  read.opcode = IBV_WR_RDMA_READ;
  struct ibv_send_wr write = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1);
  if (ibv_post_send(r.qp[0], &read, &bad)) DIE("READ post failed");
  rig_poll_ok(r.cq[0], 1);
  if (ibv_post_send(r.qp[1], &write, &bad)) DIE("WRITE post failed");
  rig_poll_ok(r.cq[1], 1);
  if (memcmp(dst, remote, sizeof dst)) DIE("the WRITE did not carry the READ's result");
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
