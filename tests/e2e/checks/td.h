/* td.h: thread domains for the thread-domain-race programs.  Two RC QPs
 * connected to each other, each made with a parent domain the test gives
 * (extended: the ibv_wr_* RDMA WRITE), with its own CQ made with that
 * parent domain too (ibv_create_cq_ex).  Like common.h it only builds and
 * tears down; the thread domains, the parent domains and the racing calls
 * stay in the test's .c file. */
#ifndef RDMASAN_E2E_CHECKS_TD_H
#define RDMASAN_E2E_CHECKS_TD_H

#include "common.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>
#include <sched.h>

struct td_rig {
  struct rig r; /* ctx, pd and lid only */
  struct ibv_cq_ex *cq[2];
  struct ibv_qp *qp[2];
  struct ibv_qp_ex *qpx[2];
  struct ibv_mr *mr;
  char buf[2][64];
};

static inline void td_open(struct td_rig *t) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  memset(t, 0, sizeof *t);
  t->r.ctx = rig_open_first_device();
  struct ibv_port_attr pa;
  if (ibv_query_port(t->r.ctx, 1, &pa)) DIE("ibv_query_port failed");
  t->r.lid = pa.lid;
  t->r.pd = ibv_alloc_pd(t->r.ctx);
  if (!t->r.pd) DIE("ibv_alloc_pd failed");
  t->mr = rig_reg(&t->r, t->buf, sizeof t->buf, RIG_ALL_ACCESS);
}

/* qp[i] and cq[i] made with parent domain parent[i], then connected. */
static inline void td_make_queues(struct td_rig *t, struct ibv_pd *parent[2]) {
  for (int i = 0; i < 2; ++i) {
    struct ibv_cq_init_attr_ex ca;
    memset(&ca, 0, sizeof ca);
    ca.cqe = 64;
    ca.wc_flags = IBV_WC_STANDARD_FLAGS;
    ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
    ca.parent_domain = parent[i];
    t->cq[i] = ibv_create_cq_ex(t->r.ctx, &ca);
    if (!t->cq[i]) DIE("ibv_create_cq_ex with a parent domain failed: %s", strerror(errno));
    struct ibv_qp_init_attr_ex ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = ia.recv_cq = ibv_cq_ex_to_cq(t->cq[i]);
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    ia.pd = parent[i];
    ia.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
    t->qp[i] = ibv_create_qp_ex(t->r.ctx, &ia);
    if (!t->qp[i]) DIE("ibv_create_qp_ex with a parent domain failed: %s", strerror(errno));
    t->qpx[i] = ibv_qp_to_qp_ex(t->qp[i]);
    if (!t->qpx[i]) DIE("ibv_qp_to_qp_ex failed");
  }
  rig_connect_qp(&t->r, t->qp[0], t->qp[1]->qp_num, 0);
  rig_connect_qp(&t->r, t->qp[1], t->qp[0]->qp_num, 0);
}

/* A signaled RDMA WRITE of 8 bytes from qp[i]'s buffer to the other's. */
static inline struct ibv_send_wr td_write_wr(struct td_rig *t, int i, uint64_t wr_id, struct ibv_sge *sge) {
  *sge = rig_sge(t->mr, t->buf[i], 8);
  return rig_write_wr(wr_id, sge, (uintptr_t)t->buf[1 - i], t->mr->rkey, 1);
}

/* Polls cq[i] until one successful completion arrived (2 s at most). */
static inline void td_poll_one(struct td_rig *t, int i) {
  struct ibv_wc wc;
  if (rig_poll_n(ibv_cq_ex_to_cq(t->cq[i]), &wc, 1) != 1) DIE("no completion on cq[%d]", i);
  if (wc.status != IBV_WC_SUCCESS) DIE("completion: %s", ibv_wc_status_str(wc.status));
}

/* Destroys the queues, the parent domains and TDs (n of each), the MR, PD
 * and context in the legal order. */
static inline void td_teardown(struct td_rig *t, struct ibv_pd **parents, struct ibv_td **tds, int n) {
  for (int i = 0; i < 2; ++i)
    if (ibv_destroy_qp(t->qp[i])) DIE("ibv_destroy_qp failed");
  for (int i = 0; i < 2; ++i)
    if (ibv_destroy_cq(ibv_cq_ex_to_cq(t->cq[i]))) DIE("ibv_destroy_cq failed");
  for (int i = 0; i < n; ++i)
    if (ibv_dealloc_pd(parents[i])) DIE("ibv_dealloc_pd of a parent domain failed");
  for (int i = 0; i < n; ++i)
    if (ibv_dealloc_td(tds[i])) DIE("ibv_dealloc_td failed");
  if (ibv_dereg_mr(t->mr)) DIE("ibv_dereg_mr failed");
  if (ibv_dealloc_pd(t->r.pd)) DIE("ibv_dealloc_pd failed");
  if (ibv_close_device(t->r.ctx)) DIE("ibv_close_device failed");
}

/* One thread's step, another waits for it. */
static inline void td_wait_stage(int *stage, int want) {
  while (__atomic_load_n(stage, __ATOMIC_ACQUIRE) != want) sched_yield();
}
static inline void td_set_stage(int *stage, int to) { __atomic_store_n(stage, to, __ATOMIC_RELEASE); }

#endif
