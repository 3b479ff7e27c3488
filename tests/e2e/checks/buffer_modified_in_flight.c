/* buffer-modified-in-flight: the send buffer of an RDMA WRITE is rewritten
 * after the post and before the completion that retires the WR is polled.
 * A store cannot be intercepted, so the change is found when the WR retires:
 * the report's stack is the retiring ibv_poll_cq, and the WR's posting stack
 * comes with it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64] = "payload that must not change", dst[64];
  struct ibv_mr *smr =
      rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: buffer-modified-in-flight
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, sizeof src);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");  // POSTED-AT: buffer-modified-in-flight
  memcpy(src, "PAYLOAD", 7);                                  /* the WR is still outstanding */
  struct ibv_wc wc;
  int n;
  double end = rig_now() + 2.0;
  while ((n = ibv_poll_cq(r.cq[0], 1, &wc)) == 0 && rig_now() < end) {}  // CHECK: buffer-modified-in-flight
  if (n != 1) DIE("no completion");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
