/* free-in-flight: the heap buffer of a posted receive is freed after its MR
 * was deregistered (dereg-in-flight, reported too) but while the receive is
 * still outstanding: the NIC may still write it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = malloc(4096);
  if (!buf) DIE("malloc failed");
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge sge = rig_sge(mr, buf, 4096);
  struct ibv_recv_wr wr = {.wr_id = 3, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(r.qp[1], &wr, &bad)) DIE("post_recv failed");  // CHECK-ALSO: free-in-flight
  if (ibv_dereg_mr(mr)) DIE("dereg_mr failed");
  free(buf);  // CHECK: free-in-flight
  rig_destroy_qps(&r);
  rig_drain(&r);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
