/* Control for post-bad-qp-state: a receive posted while the QP is in INIT
 * (receives need only INIT), then the QP is brought to RTS and a SEND
 * consumes it. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.qp0_init_only = 1});
  static char rbuf[64], msg[16] = "hello";
  struct ibv_mr *rmr = rig_reg(&r, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = rig_reg(&r, msg, sizeof msg, 0);
  struct ibv_sge rsge = rig_sge(rmr, rbuf, sizeof rbuf);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("post_recv in INIT failed");
  /* INIT -> RTR -> RTS: rig_connect_qp starts with RESET -> INIT, so do the
   * rest by hand. */
  struct ibv_qp_attr a = {.qp_state = IBV_QPS_RTR,
                          .path_mtu = IBV_MTU_1024,
                          .dest_qp_num = r.qp[1]->qp_num,
                          .max_dest_rd_atomic = 1,
                          .min_rnr_timer = 12};
  a.ah_attr.dlid = r.lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(r.qp[0], &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    DIE("RTR failed");
  struct ibv_qp_attr b = {
      .qp_state = IBV_QPS_RTS, .timeout = 14, .retry_cnt = 7, .rnr_retry = 7, .max_rd_atomic = 1};
  if (ibv_modify_qp(r.qp[0], &b,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    DIE("RTS failed");
  struct ibv_sge ssge = rig_sge(smr, msg, sizeof msg);
  struct ibv_send_wr swr = {.wr_id = 2,
                            .sg_list = &ssge,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  if (ibv_post_send(r.qp[1], &swr, &sbad)) DIE("send failed");
  rig_poll_ok(r.cq[1], 1);
  rig_poll_ok(r.cq[0], 1);
  if (strcmp(rbuf, "hello")) DIE("received '%s'", rbuf);
  rig_destroy_qps(&r);
  ibv_dereg_mr(rmr);
  ibv_dereg_mr(smr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
