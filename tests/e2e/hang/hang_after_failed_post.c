/* hang (only under a fault): the program ignores the return value of
 * ibv_post_send and polls for the completion of a WR that was never
 * posted.  Under plain `rdmasan run` the post succeeds and the program
 * ends cleanly; under --faults=post_send:nth=1 the post fails and the
 * program polls a CQ on which nothing outstanding can complete. */
// RUN-OPTS: --hang_timeout=1 --faults=post_send:nth=1
// EXPECT: hang: no verbs progress for [0-9.]+ s while 1 thread waits: .*; after injected post_send
// EXPECT: nothing outstanding can ever complete on CQ 0x[0-9a-f]+
// STATUS: 66
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  (void)ibv_post_send(r.qp[0], &wr, &bad); /* the bug: a failed post is not noticed */
  struct ibv_wc wc;
  int got = 0;
  double end = rig_now() + 6.0;
  while (!got && rig_now() < end) {
    got = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: hang
    if (got < 0) DIE("poll failed");
  }
  printf("completion %s\n", got ? "arrived" : "never came");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
