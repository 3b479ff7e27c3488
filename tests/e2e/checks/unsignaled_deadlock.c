/* unsignaled-deadlock: the SQ is filled to max_send_wr with unsignaled WRs
 * only: no completion can ever come to free a slot. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_wr = 4});  // CREATED-AT: unsignaled-deadlock
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
  const int depth = (int)r.cap[0].max_send_wr;
  for (int i = 0; i < depth - 1; ++i)
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post %d failed", i);
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("the last post failed");  // CHECK: unsignaled-deadlock
  usleep(10000);
  rig_destroy_qps(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
