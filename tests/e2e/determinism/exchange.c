/* exchange.c: request/reply traffic between two QPs of one process, written
 * to survive every fault the harness injects (failed posts, error
 * completions, a QP in ERR), with no clock anywhere: each wait is a fixed
 * number of polls.  Deterministic given its schedule on the in-process
 * softnic fabric, so two runs with one seed, and a run re-applying the
 * first one's decision log, must decide and report exactly alike
 * (run_determinism.sh).  It prints what happened to it. */
#include "../checks/common.h"

enum { kRounds = 40, kPolls = 64 };

static int drain(struct ibv_cq *cq, int *ok, int *err) {
  struct ibv_wc wc[8];
  int got = 0;
  for (int i = 0; i < kPolls; ++i) {
    int k = ibv_poll_cq(cq, 8, wc);
    if (k < 0) DIE("ibv_poll_cq failed");
    for (int j = 0; j < k; ++j) (wc[j].status == IBV_WC_SUCCESS ? ++*ok : ++*err);
    got += k;
  }
  return got;
}

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char a[4096], b[4096];
  struct ibv_mr *amr = rig_reg(&r, a, sizeof a, RIG_ALL_ACCESS);
  struct ibv_mr *bmr = rig_reg(&r, b, sizeof b, RIG_ALL_ACCESS);
  int post_fail = 0, ok = 0, err = 0, resets = 0;
  for (int round = 0; round < kRounds; ++round) {
    struct ibv_sge rs = rig_sge(bmr, b + 64 * (round % 8), 64);
    struct ibv_recv_wr rw = {.wr_id = 1000 + round, .sg_list = &rs, .num_sge = 1}, *rbad;
    if (ibv_post_recv(r.qp[1], &rw, &rbad)) {
      /* No SEND without its receive: an RNR retry waits on the clock,
       * which would make the run depend on more than its schedule. */
      ++post_fail;
      continue;
    }
    struct ibv_sge s0 = rig_sge(amr, a, 32), s1 = rig_sge(amr, a + 64, 32);
    struct ibv_send_wr w1 = {.wr_id = 2 * round + 1,
                             .sg_list = &s1,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr w0 = rig_write_wr(2 * round, &s0, (uintptr_t)b + 2048, bmr->rkey, 1);
    w0.next = &w1;
    struct ibv_send_wr *bad;
    if (ibv_post_send(r.qp[0], &w0, &bad)) ++post_fail;
    drain(r.cq[0], &ok, &err);
    drain(r.cq[1], &ok, &err);
    struct ibv_qp_attr qa;
    struct ibv_qp_init_attr qi;
    int in_error = 0;
    for (int i = 0; i < 2; ++i)
      if (!ibv_query_qp(r.qp[i], &qa, IBV_QP_STATE, &qi) && qa.qp_state == IBV_QPS_ERR) in_error = 1;
    if (in_error) {
      drain(r.cq[0], &ok, &err);
      drain(r.cq[1], &ok, &err);
      rig_reconnect(&r);
      ++resets;
    }
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_attr qa = {.qp_state = IBV_QPS_ERR};
    ibv_modify_qp(r.qp[i], &qa, IBV_QP_STATE);
  }
  drain(r.cq[0], &ok, &err);
  drain(r.cq[1], &ok, &err);
  printf("exchange: %d failed posts, %d good and %d error completions, %d resets\n", post_fail, ok, err,
         resets);
  rig_destroy_qps(&r);
  ibv_dereg_mr(amr);
  ibv_dereg_mr(bmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
