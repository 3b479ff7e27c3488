/* chaos fence, control: fence_get_then_put.c with IBV_SEND_FENCE on the
 * put, as ibv_post_send(3) asks of a WR that must not start before the
 * READs ahead of it have completed (the fix of openucx/ucx#7215's kind).
 * Under --chaos=fence the READ still waits a step for an overtaker, but
 * the fenced WRITE may not overtake it: the get returns X's value before
 * the put, in every round, and the run is silent. */
#include "../checks/common.h"

#define ROUNDS 4

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t x[8], got[8], put[8];
  struct ibv_mr *mx = rig_reg(&r, x, sizeof x, RIG_ALL_ACCESS);
  struct ibv_mr *mgot = rig_reg(&r, got, sizeof got, RIG_ALL_ACCESS);
  struct ibv_mr *mput = rig_reg(&r, put, sizeof put, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    const uint64_t before = 0x1000 + (uint64_t)k, after = 0x2000 + (uint64_t)k;
    x[0] = before;
    got[0] = 0;
    put[0] = after;
    struct ibv_sge sget = rig_sge(mgot, got, 8), sput = rig_sge(mput, put, 8);
    struct ibv_send_wr wput = rig_write_wr(2 * (uint64_t)k + 2, &sput, (uintptr_t)x, mx->rkey, 1), *bad;
    struct ibv_send_wr wget = rig_write_wr(2 * (uint64_t)k + 1, &sget, (uintptr_t)x, mx->rkey, 1);
    wget.opcode = IBV_WR_RDMA_READ;
    wput.send_flags |= IBV_SEND_FENCE; /* the put waits for the get */
    wget.next = &wput;
    if (ibv_post_send(r.qp[0], &wget, &bad)) DIE("post_send failed");
    rig_poll_ok(r.cq[0], 2);
    if (got[0] != before)
      DIE("round %d: the get returned 0x%llx, not 0x%llx", k, (unsigned long long)got[0],
          (unsigned long long)before);
    if (x[0] != after) DIE("round %d: the put did not land", k);
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mx);
  ibv_dereg_mr(mgot);
  ibv_dereg_mr(mput);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
