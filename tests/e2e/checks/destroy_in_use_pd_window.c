/* destroy-in-use: a PD is deallocated while a memory window still belongs
 * to it.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  rig_destroy_qps(&r);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_1);
  int rc = ibv_dealloc_pd(r.pd);  // CHECK: destroy-in-use
  printf("ibv_dealloc_pd with a window returned %d\n", rc);
  if (rc == 0) {
    printf("DONE\n");
    return 0;
  }
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
