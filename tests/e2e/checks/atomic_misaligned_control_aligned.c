/* Control for atomic-misaligned: FETCH_AND_ADD and CMP_AND_SWP on an
 * 8-aligned remote word that is not the first of its MR, 8-byte local SGE. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t result[2], remote[4] = {0, 40, 0, 0};
  struct ibv_mr *lmr = rig_reg(&r, result, sizeof result, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *rmr = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(lmr, &result[1], 8);
  struct ibv_send_wr wr = {.wr_id = 1,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_ATOMIC_FETCH_AND_ADD,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.atomic.remote_addr = (uintptr_t)&remote[1];
  wr.wr.atomic.rkey = rmr->rkey;
  wr.wr.atomic.compare_add = 2;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("fetch_add failed");
  rig_poll_ok(r.cq[0], 1);
  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 7;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("cmp_swp failed");
  rig_poll_ok(r.cq[0], 1);
  if (remote[1] != 7) DIE("remote word is %llu, wanted 7", (unsigned long long)remote[1]);
  ibv_dereg_mr(lmr);
  ibv_dereg_mr(rmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
