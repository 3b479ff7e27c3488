/* invalidate-in-flight: the window's memory is freed while its LOCAL_INV
 * has not completed.  (The MR still registers it: free-registered too.)
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
  struct ibv_send_wr inv = win_local_inv_wr(2, key);
  win_post(r.qp[0], &inv);  // POSTED-AT: invalidate-in-flight
  free(buf);                // CHECK: invalidate-in-flight
  rig_poll_ok(r.cq[0], 1);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
