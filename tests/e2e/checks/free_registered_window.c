/* free-registered: memory is freed while a valid window still grants the
 * peer remote access to it; the report names the window's key.
 * REPORT-HAS: still grants remote access to it
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);  // REGISTERED-AT: free-registered
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = ibv_inc_rkey(mw->rkey);
  win_bind(&r, mw, mr, buf, 512, key);

  free(buf);  // CHECK: free-registered
  win_local_inv(&r, key);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
