/* hang, control: completions that a peer process brings late.  The
 * program forks a peer before any verbs call; each side opens the device
 * and connects one RC QP to the other's (numbers through a pipe).  The
 * parent waits twice for a message the peer sends a second after it is
 * asked (hang_timeout=10):
 *  1. it polls its CQ: a receive is posted there, so a peer may complete
 *     it at any time -- not a hang the books prove;
 *  2. it blocks in ibv_get_cq_event on a channel shared by two CQs: one has
 *     no QP at all (nothing can ever complete on it), the other a posted
 *     receive: the channel's wait can still end.
 * No report: a proof must look at every CQ of the channel, and never take
 * a posted receive for dead. */
// RUN-OPTS: --hang_timeout=10
// SILENT
// STATUS: 0
#include "../checks/common.h"

struct end {
  uint32_t qpn;
  uint16_t lid;
};

static struct ibv_qp *make_qp(struct ibv_pd *pd, struct ibv_cq *cq) {
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  struct ibv_qp *qp = ibv_create_qp(pd, &ia);
  if (!qp) DIE("ibv_create_qp: %s", strerror(errno));
  return qp;
}

/* Tells the other side this QP and connects it to the other side's. */
static void connect_to_peer(struct rig *r, struct ibv_qp *qp, int to, int from) {
  struct end me = {qp->qp_num, r->lid}, peer;
  if (write(to, &me, sizeof me) != sizeof me) DIE("write: %s", strerror(errno));
  if (read(from, &peer, sizeof peer) != sizeof peer) DIE("read: %s", strerror(errno));
  r->lid = peer.lid;
  rig_connect_qp(r, qp, peer.qpn, 0);
}

static void open_rig(struct rig *r) {
  memset(r, 0, sizeof *r);
  r->ctx = rig_open_first_device();
  struct ibv_port_attr pa;
  if (ibv_query_port(r->ctx, 1, &pa)) DIE("ibv_query_port failed");
  r->lid = pa.lid;
  r->pd = ibv_alloc_pd(r->ctx);
  if (!r->pd) DIE("ibv_alloc_pd failed");
}

/* The peer: for each byte read from `go`, wait a second, then SEND. */
static int peer(int to, int from, int go) {
  struct rig r;
  open_rig(&r);
  struct ibv_cq *cq = ibv_create_cq(r.ctx, 8, NULL, NULL, 0);
  if (!cq) DIE("peer: ibv_create_cq failed");
  struct ibv_qp *qp = make_qp(r.pd, cq);
  connect_to_peer(&r, qp, to, from);
  static char msg[32] = "late";
  struct ibv_mr *mr = rig_reg(&r, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);
  char c;
  for (int i = 0; i < 2 && read(go, &c, 1) == 1; ++i) {
    sleep(1);
    struct ibv_sge sge = rig_sge(mr, msg, sizeof msg);
    struct ibv_send_wr wr = {.wr_id = (uint64_t)i,
                             .sg_list = &sge,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(qp, &wr, &bad)) DIE("peer: post_send failed");
    rig_poll_ok(cq, 1);
  }
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(r.pd);
  ibv_close_device(r.ctx);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int up[2], down[2], go[2];
  if (pipe(up) || pipe(down) || pipe(go)) DIE("pipe: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) DIE("fork: %s", strerror(errno));
  if (child == 0) _exit(peer(up[1], down[0], go[0]));

  struct rig r;
  open_rig(&r);
  struct ibv_comp_channel *ch = ibv_create_comp_channel(r.ctx);
  if (!ch) DIE("ibv_create_comp_channel failed");
  struct ibv_cq *idle = ibv_create_cq(r.ctx, 8, NULL, ch, 0); /* no QP: nothing completes here */
  struct ibv_cq *cq = ibv_create_cq(r.ctx, 8, NULL, ch, 0);
  if (!idle || !cq) DIE("ibv_create_cq failed");
  struct ibv_qp *qp = make_qp(r.pd, cq);
  connect_to_peer(&r, qp, down[1], up[0]);
  static char inbox[2][32];
  struct ibv_mr *mr = rig_reg(&r, inbox, sizeof inbox, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_wc wc;

  /* 1. Polling, a receive posted. */
  struct ibv_sge s0 = rig_sge(mr, inbox[0], sizeof inbox[0]);
  struct ibv_recv_wr r0 = {.wr_id = 10, .sg_list = &s0, .num_sge = 1}, *rbad;
  if (ibv_post_recv(qp, &r0, &rbad)) DIE("post_recv failed");
  if (write(go[1], "1", 1) != 1) DIE("write failed");
  int got = 0;
  double end = rig_now() + 10.0;
  while (!got && rig_now() < end) got = ibv_poll_cq(cq, 1, &wc);
  if (got != 1 || wc.status != IBV_WC_SUCCESS) DIE("the first message did not arrive");
  printf("polled: %s\n", inbox[0]);

  /* 2. Blocked on the channel of both CQs. */
  struct ibv_sge s1 = rig_sge(mr, inbox[1], sizeof inbox[1]);
  struct ibv_recv_wr r1 = {.wr_id = 11, .sg_list = &s1, .num_sge = 1};
  if (ibv_post_recv(qp, &r1, &rbad)) DIE("post_recv failed");
  if (ibv_req_notify_cq(idle, 0) || ibv_req_notify_cq(cq, 0)) DIE("req_notify failed");
  if (ibv_poll_cq(cq, 1, &wc) != 0) DIE("a completion before the peer was asked");
  if (write(go[1], "2", 1) != 1) DIE("write failed");
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  if (ibv_get_cq_event(ch, &ev_cq, &ev_ctx)) DIE("ibv_get_cq_event failed");
  if (ev_cq != cq) DIE("an event on the idle CQ");
  ibv_ack_cq_events(ev_cq, 1);
  if (rig_poll_n(cq, &wc, 1) != 1 || wc.status != IBV_WC_SUCCESS) DIE("the second message did not arrive");
  printf("woken: %s\n", inbox[1]);

  int status = 0;
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0)
    DIE("the peer failed (status 0x%x)", status);
  ibv_destroy_qp(qp);
  ibv_dereg_mr(mr);
  ibv_destroy_cq(cq);
  ibv_destroy_cq(idle);
  ibv_destroy_comp_channel(ch);
  ibv_dealloc_pd(r.pd);
  ibv_close_device(r.ctx);
  printf("DONE\n");
  return 0;
}
