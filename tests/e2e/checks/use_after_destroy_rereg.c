/* use-after-destroy: ibv_rereg_mr of an MR already deregistered.  Refused
 * (IBV_REREG_MR_ERR_INPUT, errno EINVAL) and reported. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  int ret = ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0);  // CHECK: use-after-destroy
  printf("rereg_mr of a deregistered MR returned %d (%s)\n", ret, strerror(errno));
  if (ret == 0) DIE("rereg_mr of a deregistered MR succeeded");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
