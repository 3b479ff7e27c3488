/* use-after-destroy: ibv_destroy_cq called twice on the same CQ. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  rig_destroy_qps(&r);
  if (ibv_destroy_cq(r.cq[0])) DIE("ibv_destroy_cq failed");
  int ret = ibv_destroy_cq(r.cq[0]);  // CHECK: use-after-destroy
  printf("second destroy_cq returned %d\n", ret);
  if (ret == 0) DIE("a second destroy of the same CQ succeeded");
  r.cq[0] = NULL;
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
