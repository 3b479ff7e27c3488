/* chaos fence, planted: a get followed by a put to the same remote word,
 * the put posted without IBV_SEND_FENCE (openucx/ucx#7215: the get
 * returned the value of the put posted after it).  The program READs
 * remote word X into a local buffer, then RDMA WRITEs a new value to X on
 * the same QP, waits for both completions and takes the READ's result for
 * X's value before the put.  IBTA's ordering rules let an unfenced WRITE
 * start before an earlier READ has read its data; only IBV_SEND_FENCE on
 * the WRITE forbids it (ibv_post_send(3)).  softnic without chaos executes
 * in post order, so plain `rdmasan run` is silent; under --chaos=fence the
 * WRITE runs first and the READ returns the new value: abort() at the
 * marked line, a `crash` report.  No check sees this remote
 * write-after-read (unfenced-read-use is about a local buffer), which is
 * why it is planted here.  fence_control_fenced_put.c is the near miss. */
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "../checks/common.h"

#define ROUNDS 4 /* a campaign's run breaks in any one of them */

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t x[8], got[8], put[8]; /* X (the remote word), the get's result, the put's value */
  struct ibv_mr *mx = rig_reg(&r, x, sizeof x, RIG_ALL_ACCESS);
  struct ibv_mr *mgot = rig_reg(&r, got, sizeof got, RIG_ALL_ACCESS);
  struct ibv_mr *mput = rig_reg(&r, put, sizeof put, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    const uint64_t before = 0x1000 + (uint64_t)k, after = 0x2000 + (uint64_t)k;
    x[0] = before; /* the owner of X sets it before the round */
    got[0] = 0;
    put[0] = after;
    struct ibv_sge sget = rig_sge(mgot, got, 8), sput = rig_sge(mput, put, 8);
    struct ibv_send_wr wput = rig_write_wr(2 * (uint64_t)k + 2, &sput, (uintptr_t)x, mx->rkey, 1), *bad;
    struct ibv_send_wr wget = rig_write_wr(2 * (uint64_t)k + 1, &sget, (uintptr_t)x, mx->rkey, 1);
    wget.opcode = IBV_WR_RDMA_READ;
    wget.next = &wput; /* BUG: the put carries no IBV_SEND_FENCE */
    if (ibv_post_send(r.qp[0], &wget, &bad)) DIE("post_send failed");
    rig_poll_ok(r.cq[0], 2);        /* both completed: the get's result is final */
    if (got[0] != before) abort();  // CHECK: crash
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
