/* order_dependent: a bug that only a legal completion order exposes, for
 * `rdmasan fuzz --reorder=random|pct` (tests/e2e/fuzz).
 *
 * A client QP sends requests to a server QP in the same process and waits
 * for the reply.  When the reply's RECV completion arrives the client takes
 * it as proof that its request SEND is done and writes the next request
 * into the send buffer at once.  On one QP the SEND completion (send queue)
 * and the reply's RECV completion (receive queue) are independent streams:
 * a NIC may deliver the RECV first.  In the natural order on softnic the
 * SEND always completes first, so plain runs are silent; a reordered run
 * changes the request while its SEND is outstanding and
 * buffer-modified-in-flight is reported where the SEND retires.
 * Every other error ends the program with status 3 (DIE), which is not a
 * finding. */
#include "../checks/common.h"

enum { kRounds = 24 };

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char request[48], reply[48], inbox[48];
  struct ibv_mr *req_mr = rig_reg(&r, request, sizeof request, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *rep_mr = rig_reg(&r, reply, sizeof reply, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *in_mr = rig_reg(&r, inbox, sizeof inbox, IBV_ACCESS_LOCAL_WRITE);
  snprintf(request, sizeof request, "GET /item/%d", 0);
  for (int round = 0; round < kRounds; ++round) {
    /* Both receives first: no SEND ever meets an empty receive queue. */
    struct ibv_sge rep_sge = rig_sge(rep_mr, reply, sizeof reply);
    struct ibv_sge in_sge = rig_sge(in_mr, inbox, sizeof inbox);
    struct ibv_recv_wr rep_wr = {.wr_id = 0x1000 + round, .sg_list = &rep_sge, .num_sge = 1};
    struct ibv_recv_wr in_wr = {.wr_id = 0x2000 + round, .sg_list = &in_sge, .num_sge = 1};
    struct ibv_recv_wr *rbad;
    if (ibv_post_recv(r.qp[0], &rep_wr, &rbad)) DIE("client post_recv");
    if (ibv_post_recv(r.qp[1], &in_wr, &rbad)) DIE("server post_recv");

    struct ibv_sge req_sge = rig_sge(req_mr, request, sizeof request);
    struct ibv_send_wr req_wr = {.wr_id = round,
                                 .sg_list = &req_sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED};
    struct ibv_send_wr *bad;
    if (ibv_post_send(r.qp[0], &req_wr, &bad)) DIE("client post_send");

    /* The server answers: the request in, the reply out and completed. */
    struct ibv_wc wc;
    if (rig_poll_n(r.cq[1], &wc, 1) != 1 || wc.status != IBV_WC_SUCCESS) DIE("server recv");
    struct ibv_sge out_sge = rig_sge(in_mr, inbox, 16);
    struct ibv_send_wr out_wr = {.wr_id = 0x3000 + round,
                                 .sg_list = &out_sge,
                                 .num_sge = 1,
                                 .opcode = IBV_WR_SEND,
                                 .send_flags = IBV_SEND_SIGNALED};
    if (ibv_post_send(r.qp[1], &out_wr, &bad)) DIE("server post_send");
    if (rig_poll_n(r.cq[1], &wc, 1) != 1 || wc.status != IBV_WC_SUCCESS) DIE("server send");

    /* The client takes its two completions in whatever order they come. */
    int sent = 0, answered = 0;
    double end = rig_now() + 5.0;
    while ((!sent || !answered) && rig_now() < end) {
      int n = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: buffer-modified-in-flight
      if (n < 0) DIE("client poll");
      if (n == 0) continue;
      if (wc.status != IBV_WC_SUCCESS) DIE("client completion: %s", ibv_wc_status_str(wc.status));
      if (wc.opcode & IBV_WC_RECV) {
        answered = 1;
        /* BUG: the reply does not mean the request's SEND completed; the
         * next request overwrites a buffer the NIC may still read. */
        snprintf(request, sizeof request, "GET /item/%d", round + 1);
      } else {
        sent = 1;
      }
    }
    if (!sent || !answered) DIE("round %d: a completion never came", round);
  }
  ibv_dereg_mr(req_mr);
  ibv_dereg_mr(rep_mr);
  ibv_dereg_mr(in_mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
