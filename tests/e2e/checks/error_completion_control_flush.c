/* Control for error-completion: receives flushed with WR_FLUSH_ERR because
 * the program itself moved their QP to ERR (flushes are not errors of
 * their own), then recovery through RESET and a good WRITE. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char rbuf[64], src[64], dst[64];
  struct ibv_mr *rmr = rig_reg(&r, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(rmr, rbuf, sizeof rbuf);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  for (int i = 0; i < 3; ++i)
    if (ibv_post_recv(r.qp[1], &rwr, &rbad)) DIE("post_recv failed");
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
  if (ibv_modify_qp(r.qp[1], &a, IBV_QP_STATE)) DIE("modify to ERR failed");
  struct ibv_wc wc[3];
  if (rig_poll_n(r.cq[1], wc, 3) != 3) DIE("wanted 3 flushed receives");
  for (int i = 0; i < 3; ++i)
    if (wc[i].status != IBV_WC_WR_FLUSH_ERR) DIE("receive %d: %s", i, ibv_wc_status_str(wc[i].status));
  rig_reconnect(&r);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  rig_poll_ok(r.cq[0], 1);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
