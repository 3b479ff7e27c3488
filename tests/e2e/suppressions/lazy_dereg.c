/* A registration cache's lazy deregistration: the application frees a
 * buffer that libtoy_rcache.so registered for it; the cache deregisters
 * the MR only later, when it is destroyed.  rdmasan reports free-registered
 * at the application's free (without a suppression); a suppression that
 * names the registering stack (registered=toy_rcache_*) silences it, one
 * that names the main stack cannot: the free is the application's own. */
#include "../checks/common.h"
#include "toy_rcache.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct toy_rcache *cache = toy_rcache_create(r.pd);
  if (!cache) DIE("toy_rcache_create failed");
  char *buf = malloc(4096);
  if (!buf) DIE("malloc failed");
  if (!toy_rcache_get(cache, buf, 4096)) DIE("toy_rcache_get failed");
  free(buf);  // CHECK: free-registered
  toy_rcache_destroy(cache);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
