/* use-after-destroy: a PD allocated on a device context already closed.
 * Refused (NULL, EINVAL) and reported, not a crash. */
#include "common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  if (ibv_close_device(ctx)) DIE("ibv_close_device failed");
  struct ibv_pd *pd = ibv_alloc_pd(ctx);  // CHECK: use-after-destroy
  printf("alloc_pd on a closed device returned %s (%s)\n", pd ? "a PD" : "NULL", strerror(errno));
  if (pd) DIE("a PD was made on a closed device");
  if (ibv_create_comp_channel(ctx)) DIE("a completion channel was made on a closed device");
  printf("DONE\n");
  return 0;
}
