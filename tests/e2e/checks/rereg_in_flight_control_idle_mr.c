/* Control for rereg-in-flight: while a SEND from one MR is outstanding,
 * another MR that no outstanding WR uses is re-registered (a new
 * translation, then a new PD and access): an idle MR may change. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], idle[64], moved[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *imr = rig_reg(&r, idle, sizeof idle, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_pd *pd2 = ibv_alloc_pd(r.ctx);
  if (!pd2) DIE("ibv_alloc_pd failed");
  struct ibv_sge rsge = rig_sge(dmr, dst, sizeof dst);
  struct ibv_recv_wr rwr = {.wr_id = 0x1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &rwr, &rbad)) DIE("post_recv failed");
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = {.wr_id = 0x2a,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post_send failed");
  if (ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, moved, sizeof moved, 0))
    DIE("ibv_rereg_mr failed");
  if (ibv_rereg_mr(imr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0, 0))
    DIE("ibv_rereg_mr failed");
  rig_poll_ok(r.cq[0], 1);
  rig_poll_ok(r.cq[1], 1);
  if (ibv_dereg_mr(smr)) DIE("dereg failed");
  if (ibv_dereg_mr(imr)) DIE("dereg failed");
  if (ibv_dereg_mr(dmr)) DIE("dereg failed");
  if (ibv_dealloc_pd(pd2)) DIE("dealloc_pd failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
