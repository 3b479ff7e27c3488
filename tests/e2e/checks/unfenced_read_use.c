/* unfenced-read-use: an RDMA READ lands in `local`; the next WR on the same
 * QP, an RDMA WRITE posted right behind it without IBV_SEND_FENCE, sends
 * `local` on.  The NIC may start the WRITE before the READ's response has
 * landed, and write the old bytes. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char local[64], remote[64] = "the READ's result", dst[64];
  struct ibv_mr *lmr = rig_reg(&r, local, sizeof local, RIG_ALL_ACCESS);  // REGISTERED-AT: unfenced-read-use
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(lmr, local, sizeof local);
  struct ibv_send_wr read = rig_write_wr(1, &sge, (uintptr_t)remote, rmr->rkey, 1), *bad;
  read.opcode = IBV_WR_RDMA_READ;
  struct ibv_send_wr write = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1);
  if (ibv_post_send(r.qp[0], &read, &bad)) DIE("READ post failed");    // POSTED-AT: unfenced-read-use
  if (ibv_post_send(r.qp[0], &write, &bad)) DIE("WRITE post failed");  // CHECK: unfenced-read-use
  rig_poll_ok(r.cq[0], 2);
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
