/* Control for sge-out-of-bounds: SGEs that end exactly at the MR's last
 * byte and start exactly at its first, for an MR in the middle of a larger
 * buffer; a receive SGE the same way. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[192], dst[64], rbuf[64];
  struct ibv_mr *smr = rig_reg(&r, src + 64, 64, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_mr *rmr = rig_reg(&r, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge sge[2] = {rig_sge(smr, src + 64 + 48, 16), rig_sge(smr, src + 64, 16)};
  struct ibv_send_wr wr = rig_write_wr(1, sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  wr.num_sge = 2;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  rig_poll_ok(r.cq[0], 1);
  struct ibv_sge rsge = rig_sge(rmr, rbuf, sizeof rbuf);
  struct ibv_recv_wr rwr = {.wr_id = 2, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &rwr, &rbad)) DIE("post_recv failed");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_destroy_qps(&r);
  ibv_dereg_mr(rmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
