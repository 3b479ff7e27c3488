/* rkey-not-bumped near miss: type-1 windows get their next key from
 * ibv_bind_mw itself; binding, unbinding and binding again is fine.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_1);
  for (int io = 0; io < 3; ++io) {
    struct ibv_mw_bind b = {.wr_id = 10 + io, .send_flags = IBV_SEND_SIGNALED};
    b.bind_info.mr = mr;
    b.bind_info.addr = (uintptr_t)buf + io * 512;
    b.bind_info.length = 512;
    b.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    if (ibv_bind_mw(r.qp[0], mw, &b)) DIE("ibv_bind_mw failed");
    rig_poll_ok(r.cq[0], 1);
  }
  struct ibv_mw_bind unbind = {.wr_id = 20, .send_flags = IBV_SEND_SIGNALED};
  unbind.bind_info.mr = mr;
  if (ibv_bind_mw(r.qp[0], mw, &unbind)) DIE("unbind failed");
  rig_poll_ok(r.cq[0], 1);
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed: %s", strerror(errno));
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
