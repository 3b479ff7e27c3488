/* destroy-in-use near miss: the window is invalidated (LOCAL_INV, its
 * completion polled) before its MR is deregistered, and deallocated before
 * the PD.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = ibv_inc_rkey(mw->rkey);
  win_bind(&r, mw, mr, buf, 512, key);
  win_local_inv(&r, key);
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed: %s", strerror(errno));
  free(buf);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
