/* Control for destroy-in-use: one QP and its CQ are destroyed while the
 * other QP and CQ live on; then MRs, the rest, and finally the PD, each
 * right after the last object that referenced it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (ibv_destroy_qp(r.qp[0])) DIE("destroy_qp failed");
  if (ibv_destroy_cq(r.cq[0])) DIE("destroy_cq failed");
  r.qp[0] = NULL;
  r.cq[0] = NULL;
  if (ibv_dereg_mr(mr)) DIE("dereg failed");
  if (ibv_destroy_qp(r.qp[1])) DIE("destroy_qp failed");
  if (ibv_destroy_cq(r.cq[1])) DIE("destroy_cq failed");
  r.qp[1] = NULL;
  r.cq[1] = NULL;
  if (ibv_dealloc_pd(r.pd)) DIE("dealloc_pd failed");
  r.pd = NULL;
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
