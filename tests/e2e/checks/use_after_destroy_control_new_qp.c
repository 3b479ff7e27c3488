/* Control for use-after-destroy: a QP destroyed, then new QPs created (the
 * allocator may hand out the same address again) and used normally. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  for (int round = 0; round < 3; ++round) {
    rig_destroy_qps(&r);
    for (int i = 0; i < 2; ++i) {
      struct ibv_qp_init_attr ia;
      memset(&ia, 0, sizeof ia);
      ia.send_cq = ia.recv_cq = r.cq[i];
      ia.qp_type = IBV_QPT_RC;
      ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
      ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
      r.qp[i] = ibv_create_qp(r.pd, &ia);
      if (!r.qp[i]) DIE("ibv_create_qp failed");
    }
    rig_connect_qp(&r, r.qp[0], r.qp[1]->qp_num, 0);
    rig_connect_qp(&r, r.qp[1], r.qp[0]->qp_num, 0);
    static char src[64], dst[64];
    struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
    struct ibv_sge sge = rig_sge(smr, src, 8);
    struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
    rig_poll_ok(r.cq[0], 1);
    ibv_dereg_mr(smr);
    ibv_dereg_mr(dmr);
  }
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
