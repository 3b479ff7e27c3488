/* rereg-in-flight: an RDMA READ lands in an MR, then ibv_rereg_mr changes
 * the MR's access flags (IBV_REREG_MR_CHANGE_ACCESS) before the READ's
 * completion is polled: the READ may still be writing there, under rights
 * that are being replaced.
 * REPORT-HAS: outstanding WR wr_id=0x7 RDMA_READ posted at
 */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char local[64], remote[64];
  struct ibv_mr *lmr =
      rig_reg(&r, local, sizeof local, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: rereg-in-flight
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(lmr, local, 8);
  struct ibv_send_wr wr = rig_write_wr(0x7, &sge, (uintptr_t)remote, rmr->rkey, 1), *bad;
  wr.opcode = IBV_WR_RDMA_READ;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post_send failed");  // POSTED-AT: rereg-in-flight
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ;
  int rc = ibv_rereg_mr(lmr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, access);  // CHECK: rereg-in-flight
  if (rc) DIE("ibv_rereg_mr failed: %d", rc);
  struct ibv_wc wc;
  rig_poll_n(r.cq[0], &wc, 1);
  if (ibv_dereg_mr(lmr)) DIE("dereg failed");
  if (ibv_dereg_mr(rmr)) DIE("dereg failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
