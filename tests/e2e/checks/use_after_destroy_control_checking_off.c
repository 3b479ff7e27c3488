/* Control for use-after-destroy with --checking=false: the dead handles
 * of the use_after_destroy_* programs are still refused (EINVAL), without
 * a report, and nothing crashes. */
// RUN-OPTS: --checking=false
#include "qp_ex.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp_ex *x = make_qp_ex(&r, 0);
  struct ibv_pd *pd = ibv_alloc_pd(r.ctx);
  if (!pd || ibv_dealloc_pd(pd)) DIE("alloc/dealloc_pd failed");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = r.cq[1];
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  static char buf[64];
  errno = 0;
  if (ibv_create_qp(pd, &ia) || errno != EINVAL) DIE("create_qp on a deallocated PD accepted");
  if (ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE)) DIE("reg_mr on a deallocated PD accepted");
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  if (ibv_dereg_mr(mr)) DIE("dereg_mr failed");
  if (ibv_rereg_mr(mr, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, 0) == 0)
    DIE("rereg_mr after dereg accepted");
  struct ibv_qp *qp = r.qp[0];
  if (ibv_destroy_qp(qp)) DIE("destroy_qp failed");
  r.qp[0] = NULL;
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE) != EINVAL) DIE("modify_qp of a destroyed QP accepted");
  ibv_wr_start(x);
  x->wr_id = 1;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, 0, (uintptr_t)buf, 8);
  if (ibv_wr_complete(x) == 0) DIE("wr_complete on a destroyed QP accepted");
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = 8, .lkey = 0};
  struct ibv_send_wr wr = rig_write_wr(1, &sge, 0, 0, 1), *bad = NULL;
  if (ibv_post_send(qp, &wr, &bad) != EINVAL) DIE("post to a destroyed QP accepted");
  struct ibv_cq *cq = r.cq[0];
  if (ibv_destroy_cq(cq)) DIE("destroy_cq failed");
  r.cq[0] = NULL;
  ibv_ack_cq_events(cq, 1);
  if (ibv_resize_cq(cq, 32) != EINVAL) DIE("resize_cq of a destroyed CQ accepted");
  struct ibv_wc wc;
  if (ibv_poll_cq(cq, 1, &wc) != -1) DIE("poll of a destroyed CQ accepted");
  struct ibv_cq_init_attr_ex ca;
  memset(&ca, 0, sizeof ca);
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_STANDARD_FLAGS;
  struct ibv_cq_ex *cqx = ibv_create_cq_ex(r.ctx, &ca);
  if (!cqx || ibv_destroy_cq(ibv_cq_ex_to_cq(cqx))) DIE("create/destroy_cq_ex failed");
  struct ibv_poll_cq_attr pa = {0};
  if (ibv_start_poll(cqx, &pa) != EINVAL) DIE("start_poll of a destroyed CQ accepted");
  struct ibv_qp *live = r.qp[1];
  if (ibv_close_device(r.ctx)) DIE("close_device failed");
  if (ibv_post_send(live, &wr, &bad) != EINVAL) DIE("post after close_device accepted");
  printf("DONE\n");
  return 0;
}
