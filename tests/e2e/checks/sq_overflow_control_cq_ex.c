/* Control for sq-overflow (and unsignaled-deadlock): completions are polled
 * with the extended CQ API (ibv_start_poll / ibv_next_poll / ibv_end_poll),
 * created without IBV_WC_EX_WITH_QP_NUM.  The SQ is filled to the returned
 * max_send_wr each round, signaled at the half mark and on the WR that fills
 * it; the signaled completions, seen through the extended API, retire the
 * whole round, so the next round fits.  If rdmasan missed extended-API
 * polls, the second round would be an sq-overflow. */
#include "common.h"

static void poll_ex(struct ibv_cq_ex *cq, int want) {
  struct ibv_poll_cq_attr attr = {0};
  int got = 0;
  for (long spins = 0; got < want && spins < 100000000L; ++spins) {
    if (ibv_start_poll(cq, &attr) != 0) continue;
    do {
      if (cq->status != IBV_WC_SUCCESS) DIE("completion status %d", cq->status);
      ++got;
    } while (got < want && ibv_next_poll(cq) == 0);
    ibv_end_poll(cq);
  }
  if (got < want) DIE("polled %d of %d completions", got, want);
}

int main(void) {
  struct rig r;
  memset(&r, 0, sizeof r);
  r.ctx = rig_open_first_device();
  r.pd = ibv_alloc_pd(r.ctx);
  struct ibv_port_attr pa;
  if (ibv_query_port(r.ctx, 1, &pa)) DIE("query_port failed");
  r.lid = pa.lid;
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
  struct ibv_cq_ex *cq = ibv_create_cq_ex(r.ctx, &ca);
  if (!cq) DIE("ibv_create_cq_ex: %s", strerror(errno));
  struct ibv_qp *qp[2];
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_init_attr a = {0};
    a.send_cq = a.recv_cq = ibv_cq_ex_to_cq(cq);
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = 4;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    qp[i] = ibv_create_qp(r.pd, &a);
    if (!qp[i]) DIE("create_qp failed");
    r.cap[i] = a.cap;
  }
  for (int i = 0; i < 2; ++i) rig_connect_qp(&r, qp[i], qp[1 - i]->qp_num, 0);
  static char src[64], dst[64];
  struct ibv_mr *smr = ibv_reg_mr(r.pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = ibv_reg_mr(r.pd, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = {(uintptr_t)src, 8, smr->lkey};
  const int depth = (int)r.cap[0].max_send_wr;
  for (int round = 0; round < 3; ++round) {
    for (int i = 0; i < depth; ++i) {
      const int half = depth / 2;
      struct ibv_send_wr wr = rig_write_wr((uint64_t)(round * depth + i), &sge, (uintptr_t)dst, dmr->rkey,
                                           i % half == half - 1),
                         *bad;
      if (ibv_post_send(qp[0], &wr, &bad)) DIE("post %d of round %d failed", i, round);
    }
    poll_ex(cq, 2);
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  for (int i = 0; i < 2; ++i) ibv_destroy_qp(qp[i]);
  ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  ibv_dealloc_pd(r.pd);
  ibv_close_device(r.ctx);
  printf("DONE\n");
  return 0;
}
