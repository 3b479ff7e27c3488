/* mr-access, RDMA READ flavour: the local destination of an RDMA READ is an
 * MR without IBV_ACCESS_LOCAL_WRITE. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char local[64], remote[64] = "remote bytes";
  struct ibv_mr *lmr = rig_reg(&r, local, sizeof local, 0);  // REGISTERED-AT: mr-access
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(lmr, local, 16);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)remote, rmr->rkey, 1), *bad;
  wr.opcode = IBV_WR_RDMA_READ;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: mr-access
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
