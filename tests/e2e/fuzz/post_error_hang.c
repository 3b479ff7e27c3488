/* post_error_hang: a failed post the program never checks, for
 * `rdmasan fuzz --faults=post_send` (tests/e2e/fuzz).
 *
 * The program posts one RDMA WRITE at a time, ignores ibv_post_send's
 * result and polls, with no deadline, for the WRITE's completion.  Posts
 * never fail on softnic by themselves, so plain runs end; when an injected
 * fault fails one, nothing outstanding can ever complete and the program
 * polls forever: hang (the hang_timeout watchdog, or the campaign's per-run
 * timeout ending it). */
#include "../checks/common.h"

enum { kRounds = 32 };

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *src_mr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dst_mr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  for (int round = 0; round < kRounds; ++round) {
    snprintf(src, sizeof src, "block %d", round);
    struct ibv_sge sge = rig_sge(src_mr, src, sizeof src);
    struct ibv_send_wr wr = rig_write_wr(round, &sge, (uintptr_t)dst, dst_mr->rkey, 1), *bad;
    (void)ibv_post_send(r.qp[0], &wr, &bad); /* BUG: a failed post goes unnoticed */
    struct ibv_wc wc;
    int got = 0;
    while (!got) {
      got = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: hang
      if (got < 0) DIE("poll failed");
    }
    if (wc.status != IBV_WC_SUCCESS) DIE("WRITE failed: %s", ibv_wc_status_str(wc.status));
  }
  ibv_dereg_mr(src_mr);
  ibv_dereg_mr(dst_mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
