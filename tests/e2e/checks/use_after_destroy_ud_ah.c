/* use-after-destroy: a UD send through an address handle already
 * destroyed.  The post is refused (EINVAL, bad_wr the first WR) and
 * reported, instead of succeeding. */
#include "common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  if (!pd || !cq) DIE("setup failed");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_UD;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  struct ibv_qp *qp = ibv_create_qp(pd, &ia);
  if (!qp) DIE("ibv_create_qp(UD) failed: %s", strerror(errno));
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1, .qkey = 0x11};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) DIE("INIT failed");
  a.qp_state = IBV_QPS_RTR;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) DIE("RTR failed");
  a.qp_state = IBV_QPS_RTS;
  a.sq_psn = 0;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) DIE("RTS failed");
  struct ibv_port_attr pa;
  if (ibv_query_port(ctx, 1, &pa)) DIE("query_port failed");
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof aa);
  aa.dlid = pa.lid;
  aa.port_num = 1;
  struct ibv_ah *ah = ibv_create_ah(pd, &aa);
  if (!ah) DIE("ibv_create_ah failed: %s", strerror(errno));
  if (ibv_destroy_ah(ah)) DIE("ibv_destroy_ah failed");
  static char buf[64];
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = 0};
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_INLINE | IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qp->qp_num;
  wr.wr.ud.remote_qkey = 0x11;
  int ret = ibv_post_send(qp, &wr, &bad);  // CHECK: use-after-destroy
  printf("UD send through a destroyed AH returned %d\n", ret);
  if (ret != EINVAL || bad != &wr) DIE("a send through a destroyed AH was not refused");
  ibv_destroy_qp(qp);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("DONE\n");
  return 0;
}
