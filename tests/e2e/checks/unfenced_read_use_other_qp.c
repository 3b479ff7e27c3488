/* unfenced-read-use across QPs: the READ is on one QP, the WRITE that sends
 * its result on another.  IBV_SEND_FENCE orders only the WRs of one QP: the
 * fenced WRITE may still start before the READ has landed. */
// CHECK-NOT: buffer-modified-in-flight
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
  write.send_flags |= IBV_SEND_FENCE;
  if (ibv_post_send(r.qp[0], &read, &bad)) DIE("READ post failed");    // POSTED-AT: unfenced-read-use
  if (ibv_post_send(r.qp[1], &write, &bad)) DIE("WRITE post failed");  // CHECK: unfenced-read-use
  rig_poll_ok(r.cq[0], 1);
  rig_poll_ok(r.cq[1], 1);
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
