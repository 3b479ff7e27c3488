/* mr-access: a receive into an MR registered without
 * IBV_ACCESS_LOCAL_WRITE. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, 0);  // REGISTERED-AT: mr-access
  struct ibv_sge sge = rig_sge(mr, buf, sizeof buf);
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad;
  int ret = ibv_post_recv(r.qp[1], &wr, &bad);  // CHECK: mr-access
  printf("post_recv returned %d\n", ret);
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
