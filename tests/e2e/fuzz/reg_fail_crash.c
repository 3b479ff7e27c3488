/* reg_fail_crash: a failed registration the program never checks, for
 * `rdmasan fuzz --faults=reg_mr` (tests/e2e/fuzz).
 *
 * The program registers a pool of buffers and uses each MR's lkey without
 * checking ibv_reg_mr's result.  Registration never fails on softnic by
 * itself, so plain runs are silent; when an injected fault makes one return
 * NULL the program dereferences it and dies of SIGSEGV: crash. */
#include "../checks/common.h"

enum { kBufs = 16, kBufSize = 256 };

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char pool[kBufs][kBufSize], dst[kBufSize];
  struct ibv_mr *dst_mr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_mr *mr[kBufs];
  for (int i = 0; i < kBufs; ++i) mr[i] = ibv_reg_mr(r.pd, pool[i], kBufSize, IBV_ACCESS_LOCAL_WRITE);
  /* BUG: mr[i] may be NULL. */
  for (int i = 0; i < kBufs; ++i) {
    memset(pool[i], 'A' + i, kBufSize);
    uint32_t lkey = mr[i]->lkey;  // CHECK: crash
    struct ibv_sge sge = {.addr = (uintptr_t)pool[i], .length = kBufSize, .lkey = lkey};
    struct ibv_send_wr wr = rig_write_wr(i, &sge, (uintptr_t)dst, dst_mr->rkey, 1), *bad;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post_send");
    rig_poll_ok(r.cq[0], 1);
  }
  for (int i = 0; i < kBufs; ++i) ibv_dereg_mr(mr[i]);
  ibv_dereg_mr(dst_mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
