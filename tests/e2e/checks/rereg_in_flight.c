/* rereg-in-flight: a SEND is posted from an MR, then ibv_rereg_mr moves the
 * MR to another buffer (IBV_REREG_MR_CHANGE_TRANSLATION) before the SEND's
 * completion is polled: what the SEND carries is undefined (the
 * dereg-in-flight bug by another verb).  The source bytes are never
 * written, and the MR is deregistered only after the poll.
 * REPORT-HAS: re-registered (translation to [0x
 * REPORT-HAS: with 1 outstanding WR(s) using it, e.g. on QP
 */
// CHECK-NOT: buffer-modified-in-flight
// CHECK-NOT: dereg-in-flight
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], other[64], dst[64];
  struct ibv_mr *smr =
      rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: rereg-in-flight
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge rsge = rig_sge(dmr, dst, sizeof dst);
  struct ibv_recv_wr rwr = {.wr_id = 0x1, .sg_list = &rsge, .num_sge = 1}, *rbad;
  if (ibv_post_recv(r.qp[1], &rwr, &rbad)) DIE("post_recv failed");
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0x2a, &sge, 0, 0, 1), *bad;
  wr.opcode = IBV_WR_SEND;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post_send failed");  // POSTED-AT: rereg-in-flight
  const int move = IBV_REREG_MR_CHANGE_TRANSLATION;
  int rc = ibv_rereg_mr(smr, move, NULL, other, sizeof other, 0);  // CHECK: rereg-in-flight
  if (rc) DIE("ibv_rereg_mr failed: %d", rc);
  struct ibv_wc wc;
  rig_poll_n(r.cq[0], &wc, 1); /* success or LOC_PROT_ERR: either is fine here */
  rig_poll_n(r.cq[1], &wc, 1);
  if (ibv_dereg_mr(smr)) DIE("dereg failed");
  if (ibv_dereg_mr(dmr)) DIE("dereg failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
