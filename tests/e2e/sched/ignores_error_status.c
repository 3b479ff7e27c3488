/* Bug only under an injected error completion: a writer that never looks
 * at wc.status and keeps posting.  With every WRITE succeeding (plain
 * `rdmasan run`) it is silent; with --faults=wc.error:nth=1 the first
 * WRITE completes with RETRY_EXC_ERR, the QP goes to ERR (later WRs flush)
 * and the next post goes to a QP in ERR: post-after-error. */
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  unsigned long total = 0;
  for (int i = 0; i < 4; ++i) {
    struct ibv_send_wr wr = rig_write_wr(i + 1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");  // CHECK: post-after-error
    struct ibv_wc wc;
    if (rig_poll_n(r.cq[0], &wc, 1) != 1) DIE("no completion");
    total += wc.byte_len; /* BUG: status unchecked */
  }
  printf("total %lu\n", total);
  rig_drain(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
