/* rereg-in-flight: an MR is re-registered while a window bound to it is
 * still valid (the peer still holds its key).  A NIC refuses it (softnic:
 * IBV_REREG_MR_ERR_CMD, EBUSY); the program meant to re-protect memory the
 * peer can still reach.
 * REQUIRES: windows
 * REPORT-HAS: while memory window MW 0x
 */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);  // REGISTERED-AT: rereg-in-flight
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = ibv_inc_rkey(mw->rkey);
  win_bind(&r, mw, mr, buf, 512, key);

  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND;
  int rc = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, access);  // CHECK: rereg-in-flight
  printf("ibv_rereg_mr with a bound window returned %d\n", rc);
  win_local_inv(&r, key);
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  free(buf);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
