/* invalidate-in-flight through the ibv_wr_* API: ibv_wr_local_inv, then
 * ibv_wr_bind_mw of the same window in the next batch, before the
 * invalidation's completion was polled; the report is made at the
 * ibv_wr_complete that posts the rebind.
 * REQUIRES: windows */
#include "qp_ex.h"
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp_ex *x = make_qp_ex_ops(&r, 0, IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  struct ibv_mw_bind_info info = {
      .mr = mr, .addr = (uintptr_t)buf, .length = 512, .mw_access_flags = IBV_ACCESS_REMOTE_WRITE};
  uint32_t key = ibv_inc_rkey(mw->rkey);
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, key, &info);
  if (ibv_wr_complete(x)) DIE("bind batch failed");
  rig_poll_ok(r.cq[0], 1);

  ibv_wr_start(x);
  x->wr_id = 2;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(x, key);
  if (ibv_wr_complete(x)) DIE("invalidate batch failed");  // POSTED-AT: invalidate-in-flight

  key = ibv_inc_rkey(key);
  info.addr = (uintptr_t)buf + 1024;
  ibv_wr_start(x);
  x->wr_id = 3;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_bind_mw(x, mw, key, &info);
  int rc = ibv_wr_complete(x);  // CHECK: invalidate-in-flight
  if (rc) DIE("rebind batch failed: %s", strerror(rc));
  struct ibv_wc wc[2];
  rig_poll_n(r.cq[0], wc, 2);

  ibv_wr_start(x);
  x->wr_id = 4;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_local_inv(x, key);
  if (ibv_wr_complete(x)) DIE("invalidate batch failed");
  rig_poll_ok(r.cq[0], 1);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
