/* robust_control: the control of the campaigns in tests/e2e/fuzz: the same
 * traffic as the planted programs (request/reply SENDs, batches of RDMA
 * WRITEs) written to survive every fault rdmasan injects and every legal
 * completion order, so `rdmasan fuzz` must find nothing in it.
 *
 * Every verb's result is checked.  A failed setup step, post or
 * registration, an error completion, an IBV_EVENT_CQ_ERR on one of its CQs,
 * or a completion that does not come within a bound ends the exchange:
 * the program then tears down in the legal order (QPs to ERR; every
 * outstanding WR's completion, flushes included, drained, up to a bound,
 * unless the CQ already missed one;
 * QPs destroyed before their MRs, CQs and PD) and exits 1.  A buffer is
 * reused only after the completion of every WR that uses it, whatever
 * order the completions come in.  Exits 0 after a clean run.  Waits are
 * bounded well below any hang timeout.
 *
 * As a robust program does, it watches its context's asynchronous events
 * (ibv_get_async_event(3)): the async fd is made non-blocking at setup, and
 * a wait for a completion that finds the CQ empty looks at it without
 * blocking (poll(2), then at most every millisecond), acknowledging every
 * event it takes.  IBV_EVENT_CQ_ERR (async.cq_err: the CQ overran and gives
 * no more completions) ends the wait at once; the bound stays as the
 * fallback for a CQ that stops without saying so. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

enum { kRounds = 8, kBatch = 4, kMsg = 48, kCqe = 64, kMaxWr = 16 };
#define WAIT_SECONDS 0.3

struct peer {
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  int outstanding; /* posted WRs (all signaled) whose completion was not polled */
  int stalled;     /* a completion did not come in time, or the CQ reported
                      IBV_EVENT_CQ_ERR: the CQ is not drained again */
};

struct world {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct peer p[2];
  struct ibv_mr *req_mr, *rep_mr, *in_mr, *src_mr, *dst_mr;
  uint16_t lid;
};

static char request[kMsg], reply[kMsg], inbox[kMsg], src[kBatch * 64], dst[kBatch * 64];

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Reports a failed step (err: its error number) and returns -1. */
static int fail_with(const char *what, int err) {
  fprintf(stderr, "robust_control: %s failed (%s)\n", what, strerror(err));
  return -1;
}

static int fail(const char *what) { return fail_with(what, errno); }

static int connect_qp(struct world *w, struct ibv_qp *qp, uint32_t remote) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return fail("modify_qp INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = w->lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return fail("modify_qp RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    return fail("modify_qp RTS");
  return 0;
}

static struct ibv_mr *reg(struct world *w, void *buf, size_t len, int access) {
  struct ibv_mr *mr = ibv_reg_mr(w->pd, buf, len, access);
  if (!mr) fail("ibv_reg_mr");
  return mr;
}

static int setup(struct world *w) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list) return fail("ibv_get_device_list");
  if (n > 0) w->ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  if (!w->ctx) return fail("ibv_open_device");
  int fl = fcntl(w->ctx->async_fd, F_GETFL);
  if (fl < 0 || fcntl(w->ctx->async_fd, F_SETFL, fl | O_NONBLOCK) < 0)
    return fail("fcntl(async_fd, O_NONBLOCK)");
  struct ibv_port_attr pa;
  if (ibv_query_port(w->ctx, 1, &pa)) return fail("ibv_query_port");
  w->lid = pa.lid;
  if (!(w->pd = ibv_alloc_pd(w->ctx))) return fail("ibv_alloc_pd");
  for (int i = 0; i < 2; ++i)
    if (!(w->p[i].cq = ibv_create_cq(w->ctx, kCqe, NULL, NULL, 0))) return fail("ibv_create_cq");
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = ia.recv_cq = w->p[i].cq;
    ia.qp_type = IBV_QPT_RC;
    ia.cap.max_send_wr = ia.cap.max_recv_wr = kMaxWr;
    ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
    if (!(w->p[i].qp = ibv_create_qp(w->pd, &ia))) return fail("ibv_create_qp");
  }
  for (int i = 0; i < 2; ++i)
    if (connect_qp(w, w->p[i].qp, w->p[1 - i].qp->qp_num)) return -1;
  if (!(w->req_mr = reg(w, request, sizeof request, IBV_ACCESS_LOCAL_WRITE))) return -1;
  if (!(w->rep_mr = reg(w, reply, sizeof reply, IBV_ACCESS_LOCAL_WRITE))) return -1;
  if (!(w->in_mr = reg(w, inbox, sizeof inbox, IBV_ACCESS_LOCAL_WRITE))) return -1;
  if (!(w->src_mr = reg(w, src, sizeof src, IBV_ACCESS_LOCAL_WRITE))) return -1;
  if (!(w->dst_mr = reg(w, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE))) return -1;
  return 0;
}

/* Takes the context's pending asynchronous events without blocking and
 * acknowledges each; a CQ_ERR marks its peer's CQ stalled. */
static void take_async_events(struct world *w) {
  struct pollfd pfd = {.fd = w->ctx->async_fd, .events = POLLIN};
  while (poll(&pfd, 1, 0) == 1 && (pfd.revents & POLLIN)) {
    struct ibv_async_event ev;
    if (ibv_get_async_event(w->ctx, &ev)) return; /* EAGAIN: nothing for us after all */
    if (ev.event_type == IBV_EVENT_CQ_ERR) {
      for (int k = 0; k < 2; ++k)
        if (ev.element.cq == w->p[k].cq && !w->p[k].stalled) {
          fprintf(stderr, "robust_control: CQ %d reported IBV_EVENT_CQ_ERR\n", k);
          w->p[k].stalled = 1;
        }
    }
    ibv_ack_async_event(&ev);
  }
}

/* One completion of peer i into *wc: 1, or 0 when none came in time or
 * its CQ reported an error, or -1 when polling failed. */
static int next_completion(struct world *w, int i, struct ibv_wc *wc) {
  double t = now(), end = t + WAIT_SECONDS, next_look = t;
  while (!w->p[i].stalled && t < end) {
    int n = ibv_poll_cq(w->p[i].cq, 1, wc);
    if (n < 0) return -1;
    if (n == 1) {
      --w->p[i].outstanding;
      return 1;
    }
    t = now();
    if (t >= next_look) {
      next_look = t + 0.001;
      take_async_events(w);
    }
  }
  errno = w->p[i].stalled ? EIO : ETIMEDOUT; /* what a failure report then says */
  w->p[i].stalled = 1;
  return 0;
}

static int post_recv(struct world *w, int i, struct ibv_mr *mr, void *buf, uint32_t len, uint64_t id) {
  struct ibv_sge s = {.addr = (uintptr_t)buf, .length = len, .lkey = mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = id, .sg_list = &s, .num_sge = 1}, *bad;
  int rc = ibv_post_recv(w->p[i].qp, &wr, &bad);
  if (rc) return fail_with("ibv_post_recv", rc);
  ++w->p[i].outstanding;
  return 0;
}

static int post_send(struct world *w, int i, struct ibv_send_wr *wr) {
  struct ibv_send_wr *bad = NULL;
  int rc = ibv_post_send(w->p[i].qp, wr, &bad);
  /* The WRs before *bad were posted: they count as outstanding. */
  for (struct ibv_send_wr *p = wr; p && p != bad; p = p->next) ++w->p[i].outstanding;
  if (rc) return fail_with("ibv_post_send", rc);
  return 0;
}

/* Request/reply: reuses a buffer only after every completion that
 * concerns it, in whatever order they come. */
static int request_reply(struct world *w, int round) {
  snprintf(request, sizeof request, "GET /item/%d", round);
  if (post_recv(w, 0, w->rep_mr, reply, sizeof reply, 0x1000 + round)) return -1;
  if (post_recv(w, 1, w->in_mr, inbox, sizeof inbox, 0x2000 + round)) return -1;
  struct ibv_sge s = {.addr = (uintptr_t)request, .length = sizeof request, .lkey = w->req_mr->lkey};
  struct ibv_send_wr wr = {
      .wr_id = round, .sg_list = &s, .num_sge = 1, .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED};
  if (post_send(w, 0, &wr)) return -1;
  struct ibv_wc wc;
  if (next_completion(w, 1, &wc) != 1 || wc.status != IBV_WC_SUCCESS) return fail("server receive");
  struct ibv_sge o = {.addr = (uintptr_t)inbox, .length = 16, .lkey = w->in_mr->lkey};
  struct ibv_send_wr out = {.wr_id = 0x3000 + round,
                            .sg_list = &o,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED};
  if (post_send(w, 1, &out)) return -1;
  if (next_completion(w, 1, &wc) != 1 || wc.status != IBV_WC_SUCCESS) return fail("server send");
  int sent = 0, answered = 0;
  while (!sent || !answered) {
    if (next_completion(w, 0, &wc) != 1 || wc.status != IBV_WC_SUCCESS) return fail("client completion");
    if (wc.opcode & IBV_WC_RECV)
      answered = 1;
    else
      sent = 1;
  }
  return 0;
}

/* A batch of WRITEs: src is rewritten only after all of them completed. */
static int write_batch(struct world *w, int round) {
  memset(src, 'a' + round % 26, sizeof src);
  struct ibv_sge s[kBatch];
  struct ibv_send_wr wr[kBatch];
  memset(wr, 0, sizeof wr);
  for (int i = 0; i < kBatch; ++i) {
    s[i] = (struct ibv_sge){.addr = (uintptr_t)(src + 64 * i), .length = 64, .lkey = w->src_mr->lkey};
    wr[i].wr_id = 0x4000 + round * kBatch + i;
    wr[i].sg_list = &s[i];
    wr[i].num_sge = 1;
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].send_flags = IBV_SEND_SIGNALED;
    wr[i].wr.rdma.remote_addr = (uintptr_t)(dst + 64 * i);
    wr[i].wr.rdma.rkey = w->dst_mr->rkey;
    wr[i].next = i + 1 < kBatch ? &wr[i + 1] : NULL;
  }
  if (post_send(w, 0, wr)) return -1;
  for (int i = 0; i < kBatch; ++i) {
    struct ibv_wc wc;
    if (next_completion(w, 0, &wc) != 1 || wc.status != IBV_WC_SUCCESS) return fail("WRITE completion");
  }
  return 0;
}

/* The legal order, from whatever state setup or the exchange left. */
static void teardown(struct world *w) {
  for (int i = 0; i < 2; ++i) {
    if (!w->p[i].qp) continue;
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_ERR};
    if (ibv_modify_qp(w->p[i].qp, &a, IBV_QP_STATE)) fail("modify_qp ERR");
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_wc wc;
    while (w->p[i].cq && !w->p[i].stalled && w->p[i].outstanding > 0 && next_completion(w, i, &wc) == 1) {}
    if (w->p[i].outstanding > 0)
      fprintf(stderr, "robust_control: %d completion(s) never came on CQ %d\n", w->p[i].outstanding, i);
  }
  for (int i = 0; i < 2; ++i)
    if (w->p[i].qp && ibv_destroy_qp(w->p[i].qp)) fail("ibv_destroy_qp");
  struct ibv_mr *mrs[] = {w->req_mr, w->rep_mr, w->in_mr, w->src_mr, w->dst_mr};
  for (size_t i = 0; i < sizeof mrs / sizeof *mrs; ++i)
    if (mrs[i] && ibv_dereg_mr(mrs[i])) fail("ibv_dereg_mr");
  for (int i = 0; i < 2; ++i)
    if (w->p[i].cq && ibv_destroy_cq(w->p[i].cq)) fail("ibv_destroy_cq");
  if (w->pd && ibv_dealloc_pd(w->pd)) fail("ibv_dealloc_pd");
  if (w->ctx && ibv_close_device(w->ctx)) fail("ibv_close_device");
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct world w;
  memset(&w, 0, sizeof w);
  int rc = setup(&w);
  for (int round = 0; rc == 0 && round < kRounds; ++round) {
    rc = request_reply(&w, round);
    if (rc == 0) rc = write_batch(&w, round);
  }
  teardown(&w);
  printf(rc == 0 ? "DONE\n" : "robust_control: gave up cleanly\n");
  return rc == 0 ? 0 : 1;
}
