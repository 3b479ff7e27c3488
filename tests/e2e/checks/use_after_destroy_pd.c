/* use-after-destroy: ibv_dealloc_pd called twice on the same PD. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_pd *pd = ibv_alloc_pd(r.ctx);
  if (!pd) DIE("ibv_alloc_pd failed");
  if (ibv_dealloc_pd(pd)) DIE("ibv_dealloc_pd failed");
  int ret = ibv_dealloc_pd(pd);  // CHECK: use-after-destroy
  printf("second dealloc_pd returned %d\n", ret);
  if (ret == 0) DIE("a second dealloc of the same PD succeeded");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
