/* free-registered: a heap buffer inside a live MR is freed without
 * deregistering it first (no WR ever used it). */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = malloc(4096);
  if (!buf) DIE("malloc failed");
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  free(buf);  // CHECK: free-registered
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
