/* use-after-destroy: ibv_destroy_qp called twice on the same QP.  The
 * second call must be reported and refused (EINVAL), not crash. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  if (ibv_destroy_qp(r.qp[0])) DIE("ibv_destroy_qp failed");
  int ret = ibv_destroy_qp(r.qp[0]);  // CHECK: use-after-destroy
  printf("second destroy_qp returned %d\n", ret);
  if (ret == 0) DIE("a second destroy of the same QP succeeded");
  r.qp[0] = NULL;
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
