/* invalidate-in-flight: the window is bound again right after its
 * LOCAL_INV was posted, before the LOCAL_INV's completion was polled.
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
  /* No poll: the next I/O starts at once. */
  key = ibv_inc_rkey(key);
  struct ibv_send_wr rebind = win_bind_wr(3, mw, mr, buf + 1024, 512, key);
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(r.qp[0], &rebind, &bad);  // CHECK: invalidate-in-flight
  if (rc) DIE("bind: %s", strerror(rc));
  struct ibv_wc wc[2];
  rig_poll_n(r.cq[0], wc, 2);
  win_local_inv(&r, key);

  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
