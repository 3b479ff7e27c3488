/* atomic-misaligned: a FETCH_AND_ADD whose remote address is 4 bytes off
 * an 8-byte boundary. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t result, remote[4];
  struct ibv_mr *lmr = rig_reg(&r, &result, sizeof result, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(lmr, &result, 8);
  struct ibv_send_wr wr = {.wr_id = 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.atomic.remote_addr = (uintptr_t)remote + 4;
  wr.wr.atomic.rkey = rmr->rkey;
  wr.wr.atomic.compare_add = 1;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: atomic-misaligned
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
