/* use-after-destroy: ibv_poll_cq on a CQ already destroyed.  Refused (a
 * negative return) and reported, not a crash in the shim. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  rig_destroy_qps(&r);
  struct ibv_cq *cq = r.cq[0];
  if (ibv_destroy_cq(cq)) DIE("ibv_destroy_cq failed");
  r.cq[0] = NULL;
  struct ibv_wc wc[4];
  int ret = ibv_poll_cq(cq, 4, wc);  // CHECK: use-after-destroy
  printf("poll_cq of a destroyed CQ returned %d\n", ret);
  if (ret >= 0) DIE("the poll of a destroyed CQ was not refused");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
