/* destroy-in-use: a CQ is destroyed while a QP still uses it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);                // CREATED-AT: destroy-in-use
  int ret = ibv_destroy_cq(r.cq[0]);  // CHECK: destroy-in-use
  printf("destroy_cq of a CQ in use returned %d\n", ret);
  if (ret == 0) {
    /* a device that allowed it: the QP's CQ is gone, leave the rest alone */
    printf("DONE\n");
    return 0;
  }
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
