/* use-after-destroy: a CQ made with a destroyed completion channel, and
 * a second destroy of the channel.  Refused and reported. */
#include "common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
  if (!ch) DIE("ibv_create_comp_channel failed");
  if (ibv_destroy_comp_channel(ch)) DIE("ibv_destroy_comp_channel failed");
  errno = 0;
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);  // CHECK: use-after-destroy
  if (cq || errno != EINVAL) DIE("create_cq with a destroyed channel: %p, %s", (void *)cq, strerror(errno));
  if (ibv_destroy_comp_channel(ch) != EINVAL) DIE("a second destroy of the channel was not refused");
  printf("the destroyed channel was refused\n");
  ibv_close_device(ctx);
  printf("DONE\n");
  return 0;
}
