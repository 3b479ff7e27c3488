/* invalidate-in-flight: the window is deallocated while its LOCAL_INV is
 * still in flight (posted unsignaled, its completion never polled).
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
  inv.send_flags = 0;           /* "nobody waits for it" */
  win_post(r.qp[0], &inv);      // POSTED-AT: invalidate-in-flight
  int rc = ibv_dealloc_mw(mw);  // CHECK: invalidate-in-flight
  if (rc) DIE("ibv_dealloc_mw: %s", strerror(rc));
  rig_drain(&r);

  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
