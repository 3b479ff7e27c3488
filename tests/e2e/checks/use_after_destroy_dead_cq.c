/* use-after-destroy: ibv_ack_cq_events, ibv_resize_cq and ibv_req_notify_cq
 * of a destroyed CQ: refused and reported, not a crash. */
#include "common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!cq) DIE("ibv_create_cq failed");
  if (ibv_destroy_cq(cq)) DIE("ibv_destroy_cq failed");
  ibv_ack_cq_events(cq, 1);  // CHECK: use-after-destroy
  if (ibv_resize_cq(cq, 32) != EINVAL) DIE("resize_cq of a destroyed CQ was not refused");
  if (ibv_req_notify_cq(cq, 0) != EINVAL) DIE("req_notify_cq of a destroyed CQ was not refused");
  printf("the destroyed CQ was refused\n");
  ibv_close_device(ctx);
  printf("DONE\n");
  return 0;
}
