/* error_path: a bug only on an error path, for `rdmasan fuzz
 * --faults=wc.error` (tests/e2e/fuzz).
 *
 * The program keeps a few receives posted on its QP (an inbox it never
 * uses in this run) and copies a buffer to its peer in batches of RDMA
 * WRITEs, polling each batch.  When a WRITE completes with an error it
 * gives up at once: it deregisters its MRs and tears everything down
 * without draining the completions the error flushed (the rest of the batch
 * and the inbox's receives stay outstanding until polled): dereg-in-flight.
 * Without an injected error completion that path is never taken, so plain
 * runs are silent.  Other errors end the program with status 3 (DIE), which
 * is not a finding. */
#include "../checks/common.h"

enum { kRounds = 24, kBatch = 4, kInbox = 4 };

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[kBatch * 64], dst[kBatch * 64], inbox[kInbox * 64];
  struct ibv_mr *src_mr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dst_mr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_mr *inbox_mr = rig_reg(&r, inbox, sizeof inbox, IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < kInbox; ++i) {
    struct ibv_sge s = rig_sge(inbox_mr, inbox + 64 * i, 64);
    struct ibv_recv_wr w = {.wr_id = 0x100 + i, .sg_list = &s, .num_sge = 1}, *bad;
    if (ibv_post_recv(r.qp[0], &w, &bad)) DIE("post_recv");
  }
  for (int round = 0; round < kRounds; ++round) {
    memset(src, 'a' + round % 26, sizeof src);
    struct ibv_sge sge[kBatch];
    struct ibv_send_wr wr[kBatch], *bad;
    for (int i = 0; i < kBatch; ++i) {
      sge[i] = rig_sge(src_mr, src + 64 * i, 64);
      wr[i] = rig_write_wr(round * kBatch + i, &sge[i], (uintptr_t)(dst + 64 * i), dst_mr->rkey, 1);
      wr[i].next = i + 1 < kBatch ? &wr[i + 1] : NULL;
    }
    if (ibv_post_send(r.qp[0], wr, &bad)) DIE("post_send");
    for (int done = 0; done < kBatch;) {
      struct ibv_wc wc;
      if (rig_poll_n(r.cq[0], &wc, 1) != 1) DIE("round %d: a WRITE never completed", round);
      if (wc.status != IBV_WC_SUCCESS) {
        fprintf(stderr, "round %d: WRITE %llu failed (%s); giving up\n", round, (unsigned long long)wc.wr_id,
                ibv_wc_status_str(wc.status));
        /* BUG: the flushed WRs are still outstanding until polled. */
        struct ibv_mr *mrs[] = {inbox_mr, src_mr, dst_mr};
        for (int i = 0; i < 3; ++i) ibv_dereg_mr(mrs[i]);  // CHECK: dereg-in-flight
        rig_teardown(&r);
        return 1;
      }
      ++done;
    }
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(inbox_mr);
  ibv_dereg_mr(src_mr);
  ibv_dereg_mr(dst_mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
