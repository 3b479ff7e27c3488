/* The same lazy deregistration as lazy_dereg.c (suppressed), and a true
 * application bug beside it: the application registers a buffer itself
 * and frees it while its MR is live.  With registered=toy_rcache_*
 * suppressed, that one is still reported, at its own line. */
#include "../checks/common.h"
#include "toy_rcache.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct toy_rcache *cache = toy_rcache_create(r.pd);
  if (!cache) DIE("toy_rcache_create failed");
  char *cached = malloc(4096);
  char *mine = malloc(4096);
  if (!cached || !mine) DIE("malloc failed");
  if (!toy_rcache_get(cache, cached, 4096)) DIE("toy_rcache_get failed");
  free(cached);                                                              // the cache's MR: suppressed
  struct ibv_mr *mr = ibv_reg_mr(r.pd, mine, 4096, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: free-registered
  if (!mr) DIE("ibv_reg_mr failed");
  free(mine);  // CHECK: free-registered
  ibv_dereg_mr(mr);
  toy_rcache_destroy(cache);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
