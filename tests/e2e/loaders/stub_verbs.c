/* stub_verbs.c: a stand-in for the real libibverbs (soname libibverbs.so.1,
 * the real version names), with one device, "stub0", whose provider is a
 * few lines of C: posts complete at once into the CQ, modify_qp only
 * records the state.  The loader tests open it by path, so the shim meets
 * a real (non-softnic) library and provider loaded RTLD_LOCAL, on a
 * machine with no RDMA hardware.  Only what those tests call is here. */
#define _GNU_SOURCE
#include <errno.h>
#include <infiniband/verbs.h>
#include <stdlib.h>
#include <string.h>

#undef ibv_get_device_list
#undef ibv_reg_mr

#define EXPORT __attribute__((visibility("default")))

static struct ibv_device stub_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "stub0",
    .dev_name = "uverbs-stub0",
};

#define CQ_RING 256
struct stub_cq {
  struct ibv_cq cq;
  struct ibv_wc ring[CQ_RING];
  unsigned head, tail;
};

static int stub_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad) {
  struct stub_cq *cq = (struct stub_cq *)qp->send_cq;
  for (; wr; wr = wr->next) {
    if (qp->state != IBV_QPS_RTS) {
      *bad = wr;
      return EINVAL;
    }
    if (!(wr->send_flags & IBV_SEND_SIGNALED)) continue;
    if (cq->tail - cq->head == CQ_RING) {
      *bad = wr;
      return ENOMEM;
    }
    struct ibv_wc *wc = &cq->ring[cq->tail++ % CQ_RING];
    memset(wc, 0, sizeof *wc);
    wc->wr_id = wr->wr_id;
    wc->status = IBV_WC_SUCCESS;
    wc->opcode = wr->opcode == IBV_WR_RDMA_WRITE ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
    wc->qp_num = qp->qp_num;
  }
  return 0;
}

static int stub_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad) {
  (void)qp;
  (void)wr;
  (void)bad;
  return 0;
}

static int stub_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc) {
  struct stub_cq *cq = (struct stub_cq *)ibcq;
  int i = 0;
  for (; i < n && cq->head != cq->tail; ++i) wc[i] = cq->ring[cq->head++ % CQ_RING];
  return i;
}

static int stub_req_notify_cq(struct ibv_cq *cq, int solicited) {
  (void)cq;
  (void)solicited;
  return 0;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num) {
  struct ibv_device **l = calloc(2, sizeof *l);
  if (!l) return NULL;
  l[0] = &stub_device;
  if (num) *num = 1;
  return l;
}
EXPORT void ibv_free_device_list(struct ibv_device **l) { free(l); }
EXPORT const char *ibv_get_device_name(struct ibv_device *d) { return d->name; }

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *d) {
  struct ibv_context *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  c->device = d;
  c->cmd_fd = c->async_fd = -1;
  c->num_comp_vectors = 1;
  c->ops.post_send = stub_post_send;
  c->ops.post_recv = stub_post_recv;
  c->ops.poll_cq = stub_poll_cq;
  c->ops.req_notify_cq = stub_req_notify_cq;
  return c;
}
EXPORT int ibv_close_device(struct ibv_context *c) {
  free(c);
  return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *c) {
  struct ibv_pd *pd = calloc(1, sizeof *pd);
  if (pd) pd->context = c;
  return pd;
}
EXPORT int ibv_dealloc_pd(struct ibv_pd *pd) {
  free(pd);
  return 0;
}

static uint32_t next_key = 0x100;
EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t length, int access) {
  (void)access;
  struct ibv_mr *mr = calloc(1, sizeof *mr);
  if (!mr) return NULL;
  mr->context = pd->context;
  mr->pd = pd;
  mr->addr = addr;
  mr->length = length;
  mr->lkey = mr->rkey = next_key++;
  return mr;
}
EXPORT int ibv_dereg_mr(struct ibv_mr *mr) {
  free(mr);
  return 0;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *c, int cqe, void *cq_context,
                                    struct ibv_comp_channel *ch, int vec) {
  (void)vec;
  if (cqe < 1 || cqe > CQ_RING) {
    errno = EINVAL;
    return NULL;
  }
  struct stub_cq *cq = calloc(1, sizeof *cq);
  if (!cq) return NULL;
  cq->cq.context = c;
  cq->cq.channel = ch;
  cq->cq.cq_context = cq_context;
  cq->cq.cqe = cqe;
  return &cq->cq;
}
EXPORT int ibv_destroy_cq(struct ibv_cq *cq) {
  free(cq);
  return 0;
}

static uint32_t next_qpn = 0x40;
EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *a) {
  struct ibv_qp *qp = calloc(1, sizeof *qp);
  if (!qp) return NULL;
  qp->context = pd->context;
  qp->pd = pd;
  qp->send_cq = a->send_cq;
  qp->recv_cq = a->recv_cq;
  qp->srq = a->srq;
  qp->qp_type = a->qp_type;
  qp->qp_num = next_qpn++;
  qp->state = IBV_QPS_RESET;
  return qp; /* a->cap: granted as asked */
}
EXPORT int ibv_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask) {
  if (mask & IBV_QP_STATE) qp->state = attr->qp_state;
  return 0;
}
EXPORT int ibv_destroy_qp(struct ibv_qp *qp) {
  free(qp);
  return 0;
}

EXPORT int ibv_fork_init(void) { return 0; }
EXPORT enum ibv_fork_status ibv_is_fork_initialized(void) { return IBV_FORK_UNNEEDED; }
