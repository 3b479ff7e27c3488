/* error-completion with softnic's reason: the peer writes through a window
 * key its owner has invalidated; the report says why the NIC refused it
 * and where that key was invalidated.
 * REPORT-HAS: was invalidated by LOCAL_INV
 * REPORT-HAS: invalidated (LOCAL_INV) at
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  char *peer = calloc(1, 64);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mr *pmr = rig_reg(&r, peer, 64, RIG_ALL_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = ibv_inc_rkey(mw->rkey);
  win_bind(&r, mw, mr, buf, 512, key);
  if (!win_peer_write(&r, pmr, peer, buf, key)) DIE("the first write failed");
  win_local_inv(&r, key);

  /* The peer's stale key: refused (REM_ACCESS_ERR), memory untouched. */
  struct ibv_sge sge = rig_sge(pmr, peer, 8);
  struct ibv_send_wr wr = rig_write_wr(0x99, &sge, (uintptr_t)buf, key, 1), *bad;
  if (ibv_post_send(r.qp[1], &wr, &bad)) DIE("post failed");  // POSTED-AT: error-completion
  struct ibv_wc wc;
  int n;
  double end = rig_now() + 2.0;
  while ((n = ibv_poll_cq(r.cq[1], 1, &wc)) == 0 && rig_now() < end) {}  // CHECK: error-completion
  if (n != 1) DIE("no completion");
  printf("completion: %s\n", ibv_wc_status_str(wc.status));
  if (wc.status != IBV_WC_REM_ACCESS_ERR) DIE("wanted REM_ACCESS_ERR");
  rig_drain(&r);
  rig_destroy_qps(&r);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  if (ibv_dereg_mr(pmr)) DIE("ibv_dereg_mr failed");
  free(buf);
  free(peer);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
