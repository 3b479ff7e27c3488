/* Control for cq-overrun: receives plus signaled sends outstanding on one CQ
 * stay exactly at its cqe; each further signaled write is posted only after
 * the previous one's completion was polled, and unsignaled writes (which
 * produce no completion on success) come on top. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.cqe = 4, .max_send_wr = 32, .max_recv_wr = 32});
  const int cqe = r.cq[0]->cqe;
  if (cqe < 2 || cqe > (int)r.cap[0].max_recv_wr) DIE("cqe %d does not fit the test", cqe);
  static char buf[64], src[64], dst[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge rsge = rig_sge(mr, buf, 16);
  struct ibv_recv_wr rwr = {.wr_id = 1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  for (int i = 0; i < cqe - 1; ++i)
    if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("receive %d failed", i);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(2, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  for (int i = 0; i < 4; ++i) {
    wr.send_flags = 0;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("unsignaled write failed");
    wr.send_flags = IBV_SEND_SIGNALED;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("signaled write failed");
    rig_poll_ok(r.cq[0], 1);
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mr);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
