/* rkey-not-bumped: a type-2 window is bound again with the key of its
 * previous binding, so the key the peer got for the last I/O is valid
 * for the next one.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);

  /* I/O 1: a new key, used, invalidated. */
  uint32_t key = ibv_inc_rkey(mw->rkey);
  struct ibv_send_wr bind = win_bind_wr(1, mw, mr, buf, 512, key);
  win_post(r.qp[0], &bind);  // POSTED-AT: rkey-not-bumped
  rig_poll_ok(r.cq[0], 1);
  win_local_inv(&r, key);

  /* I/O 2: the same key again. */
  struct ibv_send_wr again = win_bind_wr(2, mw, mr, buf + 1024, 512, key);
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(r.qp[0], &again, &bad);  // CHECK: rkey-not-bumped
  if (rc) DIE("bind: %s", strerror(rc));
  rig_poll_ok(r.cq[0], 1);
  win_local_inv(&r, key);

  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
