/* Control for rereg-in-flight: the MR is moved to another buffer right
 * after the completion that retires its SEND was polled; a SEND from the
 * new buffer, with the key the call gave back, is then as good as any
 * (books follow the new range and key: no invalid-lkey, no
 * sge-out-of-bounds), and the MR's PD and access change while it is idle
 * again. */
#include "common.h"

static void send_one(struct rig *r, struct ibv_mr *smr, void *src, struct ibv_mr *dmr, void *dst) {
  struct ibv_sge rsge = rig_sge(dmr, dst, 64);
  struct ibv_recv_wr rwr = {.wr_id = 0x1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r->qp[1], &rwr, &rbad)) DIE("post_recv failed");
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = {.wr_id = 0x2a,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_SEND,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  if (ibv_post_send(r->qp[0], &wr, &bad)) DIE("post_send failed");
  rig_poll_ok(r->cq[0], 1);
  rig_poll_ok(r->cq[1], 1);
}

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], other[128], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE);
  send_one(&r, smr, src, dmr, dst);
  if (ibv_rereg_mr(smr, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, other, sizeof other, 0))
    DIE("ibv_rereg_mr failed");
  if (smr->addr != other || smr->length != sizeof other) DIE("the MR did not move");
  send_one(&r, smr, other + 64, dmr, dst);
  struct ibv_pd *pd2 = ibv_alloc_pd(r.ctx);
  if (!pd2) DIE("ibv_alloc_pd failed");
  if (ibv_rereg_mr(smr, IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS, pd2, NULL, 0, 0))
    DIE("ibv_rereg_mr failed");
  if (ibv_dereg_mr(smr)) DIE("dereg failed");
  if (ibv_dereg_mr(dmr)) DIE("dereg failed");
  if (ibv_dealloc_pd(pd2)) DIE("dealloc_pd failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
