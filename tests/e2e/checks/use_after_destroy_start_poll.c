/* use-after-destroy: ibv_start_poll on a destroyed extended CQ.  Refused
 * (EINVAL, not ENOENT) and reported. */
#include "common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_cq_init_attr_ex ca;
  memset(&ca, 0, sizeof ca);
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  struct ibv_cq_ex *cq = ibv_create_cq_ex(ctx, &ca);
  if (!cq) DIE("ibv_create_cq_ex failed: %s", strerror(errno));
  if (ibv_destroy_cq(ibv_cq_ex_to_cq(cq))) DIE("ibv_destroy_cq failed");
  struct ibv_poll_cq_attr pa = {0};
  int ret = ibv_start_poll(cq, &pa);  // CHECK: use-after-destroy
  printf("start_poll on a destroyed CQ returned %d\n", ret);
  if (ret != EINVAL) DIE("start_poll on a destroyed CQ was not refused");
  ibv_close_device(ctx);
  printf("DONE\n");
  return 0;
}
