/* sge-out-of-bounds through the ibv_wr_* API (issue 10 item 2): an RDMA
 * WRITE built with ibv_wr_rdma_write / ibv_wr_set_sge whose SGE runs 8
 * bytes past its MR.  On softnic the batch reaches the shim from inside
 * librdmasan (softnic's wr_complete posts it): the report's frame and
 * SUMMARY must still be the application's ibv_wr_complete line, never a
 * frame of rdmasan's own. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp *qp[2];
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_init_attr_ex ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = r.cq[i];
    ia.recv_cq = r.cq[i];
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = 16;
    ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = 2;
    ia.cap.max_recv_sge = 2;
    ia.pd = r.pd;
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    qp[i] = ibv_create_qp_ex(r.ctx, &ia);
    if (!qp[i]) DIE("ibv_create_qp_ex failed: %s", strerror(errno));
  }
  rig_connect_qp(&r, qp[0], qp[1]->qp_num, 0);
  rig_connect_qp(&r, qp[1], qp[0]->qp_num, 0);
  static char src[128], dst[64];
  struct ibv_mr *smr = ibv_reg_mr(r.pd, src, 64, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: sge-out-of-bounds
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  if (!smr) DIE("ibv_reg_mr failed");
  struct ibv_qp_ex *qpx = ibv_qp_to_qp_ex(qp[0]);
  if (!qpx) DIE("ibv_qp_to_qp_ex failed");
  ibv_wr_start(qpx);
  qpx->wr_id = 1;
  qpx->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(qpx, dmr->rkey, (uintptr_t)dst);
  ibv_wr_set_sge(qpx, smr->lkey, (uintptr_t)(src + 56), 16);
  int ret = ibv_wr_complete(qpx);  // CHECK: sge-out-of-bounds
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  for (int i = 0; i < 2; ++i) ibv_destroy_qp(qp[i]);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
