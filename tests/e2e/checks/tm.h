/* tm.h: tag-matching helpers for the programs in tests/e2e/checks that use
 * a TM SRQ (softnic's tag matching).
 *
 * A sender RC QP (its own CQ) is connected to a receiver RC QP attached to
 * a TM SRQ; the receiver's completions and the SRQ's list operations land
 * on one CQ, rcq.  As in common.h, the call a test is about stays in the
 * test's own file (ibv_post_srq_ops, ibv_dereg_mr, ...); these helpers only
 * build, send and poll. */
#ifndef RDMASAN_E2E_CHECKS_TM_H
#define RDMASAN_E2E_CHECKS_TM_H

#include "common.h" /* first: it defines _GNU_SOURCE */

#include <endian.h>
#include <infiniband/tm_types.h>

struct tm_rig {
  struct rig r; /* ctx, pd, lid; its QPs and CQs unused */
  struct ibv_cq *scq, *rcq;
  struct ibv_srq *srq;
  struct ibv_qp *sqp, *rqp;
  struct ibv_mr *smr; /* the sender's buffer */
  char sbuf[256];
};

static inline void tm_setup(struct tm_rig *t) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  memset(t, 0, sizeof *t);
  struct rig *r = &t->r;
  r->ctx = rig_open_first_device();
  struct ibv_port_attr pa;
  if (ibv_query_port(r->ctx, 1, &pa)) DIE("ibv_query_port failed");
  r->lid = pa.lid;
  r->pd = ibv_alloc_pd(r->ctx);
  if (!r->pd) DIE("ibv_alloc_pd failed");
  t->scq = ibv_create_cq(r->ctx, 64, NULL, NULL, 0);
  t->rcq = ibv_create_cq(r->ctx, 64, NULL, NULL, 0);
  if (!t->scq || !t->rcq) DIE("ibv_create_cq failed");
  struct ibv_srq_init_attr_ex sa;
  memset(&sa, 0, sizeof sa);
  sa.comp_mask = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  sa.srq_type = IBV_SRQT_TM;
  sa.pd = r->pd;
  sa.cq = t->rcq;
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  sa.tm_cap.max_num_tags = 4;
  sa.tm_cap.max_ops = 4;
  t->srq = ibv_create_srq_ex(r->ctx, &sa);
  if (!t->srq) DIE("ibv_create_srq_ex(TM) failed: %s", strerror(errno));
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = 8;
  ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = 1;
  ia.cap.max_recv_sge = 1;
  ia.send_cq = ia.recv_cq = t->scq;
  t->sqp = ibv_create_qp(r->pd, &ia);
  ia.send_cq = ia.recv_cq = t->rcq;
  ia.srq = t->srq;
  ia.cap.max_recv_wr = 0;
  t->rqp = ibv_create_qp(r->pd, &ia);
  if (!t->sqp || !t->rqp) DIE("ibv_create_qp failed: %s", strerror(errno));
  rig_connect_qp(r, t->sqp, t->rqp->qp_num, 0);
  rig_connect_qp(r, t->rqp, t->sqp->qp_num, 0);
  t->smr = rig_reg(r, t->sbuf, sizeof t->sbuf, IBV_ACCESS_LOCAL_WRITE);
}

/* A TAG_ADD of [buf, +len) of mr for `tag`, completing as recv_wr_id; the
 * caller posts it (ibv_post_srq_ops) and reads the handle back. */
static inline struct ibv_ops_wr tm_add_wr(uint64_t wr_id, struct ibv_sge *sge, uint64_t tag,
                                          uint64_t recv_wr_id, int signaled) {
  struct ibv_ops_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_TAG_ADD;
  wr.flags = signaled ? IBV_OPS_SIGNALED : 0;
  wr.tm.add.recv_wr_id = recv_wr_id;
  wr.tm.add.sg_list = sge;
  wr.tm.add.num_sge = 1;
  wr.tm.add.tag = tag;
  wr.tm.add.mask = ~0ull;
  return wr;
}

/* The next completion of the receive CQ (status success required unless
 * any_status). */
static inline struct ibv_wc tm_poll(struct tm_rig *t, int any_status) {
  struct ibv_wc wc;
  if (rig_poll_n(t->rcq, &wc, 1) != 1) DIE("no completion on the receive CQ");
  if (!any_status && wc.status != IBV_WC_SUCCESS) DIE("completion: %s", ibv_wc_status_str(wc.status));
  return wc;
}

/* Sends a message of TMH op `op` (IBV_TMH_EAGER, IBV_TMH_NO_TAG) for `tag`
 * with `body`, and waits for the send's completion. */
static inline void tm_send(struct tm_rig *t, uint8_t op, uint64_t tag, const char *body) {
  struct ibv_tmh h;
  memset(&h, 0, sizeof h);
  h.opcode = op;
  h.tag = htobe64(tag);
  memcpy(t->sbuf, &h, sizeof h);
  size_t len = sizeof h + strlen(body);
  if (len > sizeof t->sbuf) DIE("message too long");
  memcpy(t->sbuf + sizeof h, body, strlen(body));
  struct ibv_sge sge = rig_sge(t->smr, t->sbuf, (uint32_t)len);
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 0x5e;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(t->sqp, &wr, &bad)) DIE("post_send failed");
  rig_poll_ok(t->scq, 1);
}

static inline void tm_teardown(struct tm_rig *t) {
  struct ibv_wc wc[8];
  while (ibv_poll_cq(t->rcq, 8, wc) > 0) {}
  if (ibv_destroy_qp(t->rqp) || ibv_destroy_qp(t->sqp)) DIE("ibv_destroy_qp failed");
  if (ibv_destroy_srq(t->srq)) DIE("ibv_destroy_srq failed");
  if (ibv_dereg_mr(t->smr)) DIE("ibv_dereg_mr failed");
  if (ibv_destroy_cq(t->rcq) || ibv_destroy_cq(t->scq)) DIE("ibv_destroy_cq failed");
  if (ibv_dealloc_pd(t->r.pd)) DIE("ibv_dealloc_pd failed");
  if (ibv_close_device(t->r.ctx)) DIE("ibv_close_device failed");
}

#endif
