/* dereg-in-flight: the MR of a posted RDMA WRITE is deregistered before the
 * WR's completion is polled.  The source bytes are never written, so
 * buffer-modified-in-flight must not ride along: the hash at retirement
 * cannot be taken once the range is unregistered, and "not hashed" is not
 * "changed". */
// CHECK-NOT: buffer-modified-in-flight
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr =
      rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: dereg-in-flight
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0x2a, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");  // POSTED-AT: dereg-in-flight
  if (ibv_dereg_mr(smr)) DIE("dereg failed");                 // CHECK: dereg-in-flight
  struct ibv_wc wc;
  rig_poll_n(r.cq[0], &wc, 1); /* success or LOC_PROT_ERR: either is fine here */
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
