/* hang: the program means to post a send and wait for its completion, but
 * the post is skipped (its condition is wrong); it polls a CQ on which
 * nothing outstanding can ever complete.  The watchdog reports it while it
 * polls (the books prove it: before hang_timeout=1); the program gives up
 * after 6 s and exits, with rdmasan's exit status for an Error finding. */
// RUN-OPTS: --hang_timeout=1
// EXPECT: hang: no verbs progress for [0-9.]+ s while 1 thread waits: thread [0-9]+ polls CQ 0x[0-9a-f]+ with
// EXPECT: nothing outstanding can ever complete on CQ 0x[0-9a-f]+
// EXPECT: QP 0x[0-9a-f]+ \(qpn 0x[0-9a-f]+, RTS\): 0 signaled sends, 0 unsignaled sends, 0 receives outst
// EXPECT: ^  CQ 0x[0-9a-f]+ created at:$
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
  int ready = getenv("HANG_POLL_NEVER_SET") != NULL; /* the bug: never true */
  if (ready && ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
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
