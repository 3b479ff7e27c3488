/* destroy-in-use near miss, through an extended CQ: the peer invalidates
 * the window with SEND_WITH_INV; the owner reads the invalidation from
 * its ibv_cq_ex (ibv_wc_read_wc_flags, ibv_wc_read_invalidated_rkey), then
 * deregisters the MR while the (now invalid) window still exists, then
 * deallocates the window.  The CQ was created without IBV_WC_EX_WITH_IMM.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  /* qp[0] again, its receives completing on an extended CQ. */
  struct ibv_cq_init_attr_ex ca = {.cqe = 64, .wc_flags = IBV_WC_EX_WITH_BYTE_LEN};
  struct ibv_cq_ex *cqx = ibv_create_cq_ex(r.ctx, &ca);
  if (!cqx) DIE("ibv_create_cq_ex failed: %s", strerror(errno));
  if (ibv_destroy_qp(r.qp[0])) DIE("ibv_destroy_qp failed");
  struct ibv_qp_init_attr ia = {.send_cq = r.cq[0], .recv_cq = ibv_cq_ex_to_cq(cqx), .qp_type = IBV_QPT_RC};
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
  r.qp[0] = ibv_create_qp(r.pd, &ia);
  if (!r.qp[0]) DIE("ibv_create_qp failed");
  struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
  if (ibv_modify_qp(r.qp[1], &reset, IBV_QP_STATE)) DIE("modify_qp RESET failed");
  rig_connect_qp(&r, r.qp[0], r.qp[1]->qp_num, 0);
  rig_connect_qp(&r, r.qp[1], r.qp[0]->qp_num, 0);

  char *buf = calloc(1, 4096);
  char *msgs = calloc(1, 256);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msgs, 256, RIG_ALL_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = ibv_inc_rkey(mw->rkey);
  win_bind(&r, mw, mr, buf, 512, key);
  struct ibv_sge rs = rig_sge(mmr, msgs, 64);
  struct ibv_recv_wr rwr = {.wr_id = 100, .sg_list = &rs, .num_sge = 1};
  struct ibv_recv_wr *rbad = NULL;
  if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("ibv_post_recv failed");
  struct ibv_sge ss = rig_sge(mmr, msgs + 192, 8);
  struct ibv_send_wr swr;
  memset(&swr, 0, sizeof swr);
  swr.wr_id = 200;
  swr.opcode = IBV_WR_SEND_WITH_INV;
  swr.send_flags = IBV_SEND_SIGNALED;
  swr.sg_list = &ss;
  swr.num_sge = 1;
  swr.invalidate_rkey = key;
  win_post(r.qp[1], &swr);
  rig_poll_ok(r.cq[1], 1);

  struct ibv_poll_cq_attr pa = {0};
  double end = rig_now() + 2.0;
  int rc;
  while ((rc = ibv_start_poll(cqx, &pa)) == ENOENT && rig_now() < end) {}
  if (rc) DIE("no receive completion");
  if (cqx->status != IBV_WC_SUCCESS) DIE("receive failed");
  if (!(ibv_wc_read_wc_flags(cqx) & IBV_WC_WITH_INV)) DIE("the receive did not invalidate");
  ibv_end_poll(cqx);

  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed: %s", strerror(errno));
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mmr)) DIE("ibv_dereg_mr failed");
  free(buf);
  free(msgs);
  rig_destroy_qps(&r);
  if (ibv_destroy_cq(ibv_cq_ex_to_cq(cqx))) DIE("ibv_destroy_cq failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
