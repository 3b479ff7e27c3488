/* invalidate-in-flight near miss: LOCAL_INV signaled, its completion
 * polled, and only then the window is rebound and finally deallocated.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = mw->rkey;
  for (int io = 0; io < 3; ++io) {
    key = ibv_inc_rkey(key);
    win_bind(&r, mw, mr, buf + io * 1024, 512, key);
    struct ibv_send_wr inv = win_local_inv_wr(10 + io, key);
    win_post(r.qp[0], &inv);
    rig_poll_ok(r.cq[0], 1); /* resume from the invalidation's completion */
  }
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
