/* destroy-in-use: an MR is deregistered while a window bound to it is
 * still valid (the peer still holds its key).  A NIC refuses it (EBUSY).
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);  // REGISTERED-AT: destroy-in-use
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = ibv_inc_rkey(mw->rkey);
  win_bind(&r, mw, mr, buf, 512, key);

  int rc = ibv_dereg_mr(mr);  // CHECK: destroy-in-use
  printf("ibv_dereg_mr with a bound window returned %d\n", rc);
  if (rc == 0) {
    printf("DONE\n");
    return 0;
  }
  win_local_inv(&r, key);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
