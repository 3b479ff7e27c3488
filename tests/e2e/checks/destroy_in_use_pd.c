/* destroy-in-use, PD flavour: a PD is deallocated while an MR still belongs
 * to it (its QPs are already gone). */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: destroy-in-use
  for (int i = 0; i < 2; ++i) {
    if (ibv_destroy_qp(r.qp[i])) DIE("destroy_qp failed");
    r.qp[i] = NULL;
  }
  int ret = ibv_dealloc_pd(r.pd);  // CHECK: destroy-in-use
  printf("dealloc_pd with a live MR returned %d\n", ret);
  if (ret == 0) r.pd = NULL;
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
