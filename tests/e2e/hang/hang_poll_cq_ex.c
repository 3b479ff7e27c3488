/* hang, extended CQ API: the program posts a batch of unsignaled RDMA
 * WRITEs (none asks for a completion) and waits for a completion with
 * ibv_start_poll, which keeps returning ENOENT: the unsignaled sends can
 * complete only after a signaled one, or in a flush. */
// RUN-OPTS: --hang_timeout=1
// EXPECT: hang: no verbs progress for [0-9]+ s while 1 thread waits: thread [0-9]+ polls CQ 0x[0-9a-f]+ with
// EXPECT: nothing outstanding can ever complete on CQ 0x[0-9a-f]+
// EXPECT: 0 signaled sends, 3 unsignaled sends, 0 receives outstanding \(unsignaled sends complete only
// STATUS: 66
#include "../checks/common.h"

int main(void) {
  struct rig r;
  memset(&r, 0, sizeof r);
  setvbuf(stdout, NULL, _IOLBF, 0);
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
    a.cap.max_send_wr = 8;
    a.cap.max_recv_wr = 4;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    qp[i] = ibv_create_qp(r.pd, &a);
    if (!qp[i]) DIE("create_qp failed");
  }
  for (int i = 0; i < 2; ++i) rig_connect_qp(&r, qp[i], qp[1 - i]->qp_num, 0);
  static char src[64], dst[64];
  struct ibv_mr *smr = ibv_reg_mr(r.pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = ibv_reg_mr(r.pd, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = {(uintptr_t)src, 8, smr->lkey};
  for (int i = 0; i < 3; ++i) {
    struct ibv_send_wr wr = rig_write_wr((uint64_t)i, &sge, (uintptr_t)dst, dmr->rkey, 0), *bad;
    if (ibv_post_send(qp[0], &wr, &bad)) DIE("post %d failed", i);
  }
  struct ibv_poll_cq_attr attr = {0};
  int got = 0;
  double end = rig_now() + 6.0;
  while (!got && rig_now() < end) {
    if (ibv_start_poll(cq, &attr) == 0) {  // CHECK: hang
      got = 1;
      ibv_end_poll(cq);
    }
  }
  printf("completion %s\n", got ? "arrived" : "never came");
  for (int i = 0; i < 2; ++i) ibv_destroy_qp(qp[i]);
  ibv_destroy_cq(ibv_cq_ex_to_cq(cq));
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  ibv_dealloc_pd(r.pd);
  ibv_close_device(r.ctx);
  printf("DONE\n");
  return 0;
}
