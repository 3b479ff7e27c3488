/* rq-overflow: a receive chain whose last WR points back to its first (here
 * a chain of one, wr.next = &wr).  The provider posts until the 16-deep RQ
 * is full and refuses the next; the shim must stop walking the chain and
 * count what was accepted (16), not 65535 phantom receives (which used to
 * raise a bogus cq-overrun). */
#include "common.h"

// CHECK-NOT: cq-overrun
int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char dst[64];
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(dmr, dst, 8);
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = &sge, .num_sge = 1}, *bad = NULL;
  wr.next = &wr;
  int ret = ibv_post_recv(r.qp[1], &wr, &bad);  // CHECK: rq-overflow
  printf("post_recv of a cyclic chain returned %d\n", ret);
  rig_destroy_qps(&r);
  rig_drain(&r);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
