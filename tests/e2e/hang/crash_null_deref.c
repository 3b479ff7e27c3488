/* crash: the program reads a completion's context through a pointer it
 * never set, after a verbs call: a NULL dereference.  rdmasan reports the
 * crash at the faulting line, and the program still dies of SIGSEGV. */
// EXPECT: crash: SIGSEGV on address 0x0 \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); a WRITE
// EXPECT-NOT: rdmasan: [0-9]+ finding
// NO-DONE
// STATUS: 139
#include "../checks/common.h"

struct request {
  volatile int done;
};

static struct request *lookup(uint64_t wr_id) {
  (void)wr_id;
  return getenv("CRASH_NEVER_SET") ? malloc(sizeof(struct request)) : NULL; /* the bug: not found */
}

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  struct ibv_wc wc;
  if (rig_poll_n(r.cq[0], &wc, 1) != 1) DIE("no completion");
  struct request *volatile req = lookup(wc.wr_id);
  req->done = 1;  // CHECK: crash
  printf("DONE\n");
  return 0;
}
