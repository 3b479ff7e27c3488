/* Bug only under a legal reordering: a request/reply loop that takes the
 * reply's receive completion as proof that its request SEND is done, and
 * writes the next request into the send buffer at once.  On one queue pair
 * the SEND completion and the reply's RECV completion belong to different
 * queues: a NIC may deliver the RECV first.  Plain softnic never does (the
 * SEND completes before the peer can even answer), so plain `rdmasan run`
 * is silent; under --reorder=random the RECV comes first, the request
 * buffer changes while its SEND is outstanding, and buffer-modified-in-
 * flight is reported where the SEND retires. */
#include "../checks/common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char req[64], reply[64], srv_in[64];
  struct ibv_mr *mreq = rig_reg(&r, req, sizeof req, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mrep = rig_reg(&r, reply, sizeof reply, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *msrv = rig_reg(&r, srv_in, sizeof srv_in, IBV_ACCESS_LOCAL_WRITE);
  snprintf(req, sizeof req, "request %d", 0);
  for (int iter = 0; iter < 32; ++iter) {
    struct ibv_sge rs = rig_sge(mrep, reply, sizeof reply), ss = rig_sge(msrv, srv_in, sizeof srv_in);
    struct ibv_recv_wr rw = {.wr_id = 100 + iter, .sg_list = &rs, .num_sge = 1}, *rbad;
    struct ibv_recv_wr sw = {.wr_id = 200 + iter, .sg_list = &ss, .num_sge = 1};
    if (ibv_post_recv(r.qp[0], &rw, &rbad) || ibv_post_recv(r.qp[1], &sw, &rbad)) DIE("post_recv");
    struct ibv_sge qs = rig_sge(mreq, req, sizeof req);
    struct ibv_send_wr w = {.wr_id = iter,
                            .sg_list = &qs,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(r.qp[0], &w, &bad)) DIE("post_send");  // POSTED-AT: buffer-modified-in-flight
    /* The server: the request in, the reply out. */
    struct ibv_wc wc;
    if (rig_poll_n(r.cq[1], &wc, 1) != 1 || wc.status) DIE("server recv");
    struct ibv_sge ps = rig_sge(msrv, srv_in, 16);
    struct ibv_send_wr pw = {.wr_id = 300 + iter,
                             .sg_list = &ps,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};
    if (ibv_post_send(r.qp[1], &pw, &bad)) DIE("server post_send");
    if (rig_poll_n(r.cq[1], &wc, 1) != 1 || wc.status) DIE("server send");
    /* The client: both completions, in whatever order they come. */
    int send_done = 0, reply_in = 0;
    double end = rig_now() + 5.0;
    while ((!send_done || !reply_in) && rig_now() < end) {
      int n = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: buffer-modified-in-flight
      if (n < 0) DIE("poll");
      if (n == 0) continue;
      if (wc.status) DIE("client completion %s", ibv_wc_status_str(wc.status));
      if (wc.opcode == IBV_WC_RECV) {
        reply_in = 1;
        /* BUG: the reply does not mean the request's SEND completed. */
        snprintf(req, sizeof req, "request %d", iter + 1);
      } else {
        send_done = 1;
      }
    }
    if (!send_done || !reply_in) DIE("lost a completion");
  }
  ibv_dereg_mr(mreq);
  ibv_dereg_mr(mrep);
  ibv_dereg_mr(msrv);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
