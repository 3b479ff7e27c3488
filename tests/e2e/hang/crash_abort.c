/* crash: the program finds a completion it did not expect and calls
 * abort().  rdmasan reports the SIGABRT with the stack through libc (walked
 * by the unwinder: libc has no frame pointers) down to the abort() call,
 * and the program still dies of SIGABRT. */
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// EXPECT: ^    #[0-9]+ 0x[0-9a-f]+ in (__GI_)?abort
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(7, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  struct ibv_wc wc;
  if (rig_poll_n(r.cq[0], &wc, 1) != 1) DIE("no completion");
  if (wc.wr_id != 8) abort();  // CHECK: crash
  printf("DONE\n");
  return 0;
}
