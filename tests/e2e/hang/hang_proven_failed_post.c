/* hang, proven by the books: the program ignores a failed ibv_post_send
 * and polls, with no deadline, for the completion of a WR that was never
 * posted.  Nothing is outstanding on its CQ, no receive is posted there
 * and the program has no other thread: nothing can ever complete.  The
 * watchdog reports it a quarter second into the wait, long before
 * hang_timeout=10, and halt_on_error=1 ends the program at the report. */
// RUN-OPTS: --hang_timeout=10 --halt_on_error=1 --faults=post_send:nth=1
// EXPECT: hang: no verbs progress for [0-9.]+ s while 1 thread waits: thread [0-9]+ polls CQ 0x[0-9a-f]+ with
// EXPECT: proven by the books: CQ 0x[0-9a-f]+ has nothing outstanding that can complete on it
// EXPECT: ; after injected post_send fails with
// EXPECT: QP 0x[0-9a-f]+ \(qpn 0x[0-9a-f]+, RTS\): 0 signaled sends, 0 unsignaled sends, 0 receives outst
// WITHIN: 3
// NO-DONE
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
  while (!got) {
    got = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: hang
    if (got < 0) DIE("poll failed");
  }
  printf("DONE\n");
  return 0;
}
