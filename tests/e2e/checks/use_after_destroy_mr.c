/* use-after-destroy: ibv_dereg_mr called twice on the same MR. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  int ret = ibv_dereg_mr(mr);  // CHECK: use-after-destroy
  printf("second dereg_mr returned %d\n", ret);
  if (ret == 0) DIE("a second dereg of the same MR succeeded");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
