/* qp_ex.h: an extended QP for the ibv_wr_* check programs.  Like
 * common.h it only builds; the calls a test is about stay in its .c file. */
#ifndef RDMASAN_E2E_CHECKS_QP_EX_H
#define RDMASAN_E2E_CHECKS_QP_EX_H

#include "common.h"

/* qp[0] replaced by an extended QP with the ibv_wr_* operations `ops`
 * (IBV_QP_EX_WITH_*). */
static inline struct ibv_qp_ex *make_qp_ex_ops(struct rig *r, int max_inline, uint64_t ops) {
  if (ibv_destroy_qp(r->qp[0])) DIE("ibv_destroy_qp failed");
  struct ibv_qp_init_attr_ex ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = r->cq[0];
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
  ia.cap.max_inline_data = max_inline;
  ia.pd = r->pd;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  ia.send_ops_flags = ops;
  r->qp[0] = ibv_create_qp_ex(r->ctx, &ia);
  if (!r->qp[0]) DIE("ibv_create_qp_ex failed: %s", strerror(errno));
  r->cap[0] = ia.cap;
  struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
  if (ibv_modify_qp(r->qp[1], &reset, IBV_QP_STATE)) DIE("modify_qp RESET failed");
  rig_connect_qp(r, r->qp[0], r->qp[1]->qp_num, 0);
  rig_connect_qp(r, r->qp[1], r->qp[0]->qp_num, 0);
  struct ibv_qp_ex *x = ibv_qp_to_qp_ex(r->qp[0]);
  if (!x) DIE("ibv_qp_to_qp_ex failed");
  return x;
}

/* qp[0] replaced by an extended QP with the ibv_wr_* send operations. */
static inline struct ibv_qp_ex *make_qp_ex(struct rig *r, int max_inline) {
  return make_qp_ex_ops(r, max_inline, IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND);
}

#endif
