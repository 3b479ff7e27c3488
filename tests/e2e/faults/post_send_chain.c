/* A failed chain post is not an all-or-nothing failure: ibv_post_send(3)
 * posts every WR before *bad_wr.  This program posts a chain of two RDMA
 * WRITEs from two MRs and, when the post fails, assumes nothing of the
 * chain was posted and deregisters both MRs at once: the first WR is in
 * flight, so its MR is deregistered under it.  A healthy run never takes
 * that path; an injected failure at the chain's second WR does.
 */
// FAULT-OPTS: --faults=post_send:once:wr=1:errno=ENOMEM
// CHECK-NOT: buffer-modified-in-flight
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char a[64], b[64], dst[128];
  struct ibv_mr *amr = rig_reg(&r, a, sizeof a, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: dereg-in-flight
  struct ibv_mr *bmr = rig_reg(&r, b, sizeof b, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sa = rig_sge(amr, a, 8), sb = rig_sge(bmr, b, 8);
  struct ibv_send_wr w0 = rig_write_wr(1, &sa, (uintptr_t)dst, dmr->rkey, 0);
  struct ibv_send_wr w1 = rig_write_wr(2, &sb, (uintptr_t)dst + 64, dmr->rkey, 1);
  w0.next = &w1;
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(r.qp[0], &w0, &bad);  // POSTED-AT: dereg-in-flight
  if (rc) {
    fprintf(stderr, "post failed (%s) at wr_id %llu: giving up on the chain\n", strerror(rc),
            bad ? (unsigned long long)bad->wr_id : 0ULL);
    ibv_dereg_mr(amr);  // CHECK: dereg-in-flight
    ibv_dereg_mr(bmr);
    struct ibv_wc wc;
    rig_poll_n(r.cq[0], &wc, 1);
  } else {
    rig_poll_ok(r.cq[0], 1);
    ibv_dereg_mr(amr);
    ibv_dereg_mr(bmr);
  }
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
