/* rereg-in-flight: a receive is posted into an MR, then ibv_rereg_mr moves
 * the MR to another PD (IBV_REREG_MR_CHANGE_PD) while the receive is still
 * outstanding: the NIC's protection check of the SEND that lands there
 * answers differently than when it was posted.
 * REPORT-HAS: outstanding WR wr_id=0x5 RECV posted at
 */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_pd *pd2 = ibv_alloc_pd(r.ctx);
  if (!pd2) DIE("ibv_alloc_pd failed");
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: rereg-in-flight
  struct ibv_sge sge = rig_sge(mr, buf, sizeof buf);
  struct ibv_recv_wr wr = {.wr_id = 0x5, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(r.qp[0], &wr, &bad)) DIE("post_recv failed");      // POSTED-AT: rereg-in-flight
  int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0);  // CHECK: rereg-in-flight
  if (rc) DIE("ibv_rereg_mr failed: %d", rc);
  rig_destroy_qps(&r); /* the receive goes with its QP */
  if (ibv_dereg_mr(mr)) DIE("dereg failed");
  if (ibv_dealloc_pd(pd2)) DIE("dealloc_pd failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
