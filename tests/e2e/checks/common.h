/* common.h: setup shared by the per-check programs in tests/e2e/checks.
 *
 * Each program opens the first device (softnic0 under `rdmasan run`, on a
 * machine without an RDMA device), makes one PD, one CQ per QP and two RC QPs connected to
 * each other in the same process.  The call a test is about is never made
 * here: it stays in the test's own .c file, on a line marked
 * `// CHECK: <check-id>`, so the report's frame and SUMMARY can be matched
 * against that line.  Helpers here only build, poll and tear down.
 *
 * Any unexpected failure of the setup exits with status 3 and a message, so a
 * broken device can never pass as a silent control. */
#ifndef RDMASAN_E2E_CHECKS_COMMON_H
#define RDMASAN_E2E_CHECKS_COMMON_H

#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define DIE(...)                                          \
  do {                                                    \
    fprintf(stderr, "FATAL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                         \
    fputc('\n', stderr);                                  \
    exit(3);                                              \
  } while (0)

/* Access every MR and QP in these tests may need. */
#define RIG_ALL_ACCESS \
  (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)

struct rig_opts {
  int cqe;                   /* CQ size requested for each QP's CQ (default 64) */
  int max_send_wr;           /* default 16 */
  int max_recv_wr;           /* default 16 */
  int max_send_sge;          /* default 2 */
  int max_recv_sge;          /* default 2 */
  int max_inline;            /* default 0 */
  int sq_sig_all;            /* default 0 */
  int channel;               /* give the CQs a completion channel */
  int qp0_init_only;         /* leave qp[0] in INIT (qp[1] still goes to RTS) */
  int block_buffered_stdout; /* keep stdio's default buffering of stdout */
};

struct rig {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *ch; /* NULL unless opts.channel */
  struct ibv_cq *cq[2];        /* cq[i]: send and receive CQ of qp[i] */
  struct ibv_qp *qp[2];
  struct ibv_qp_cap cap[2]; /* the capabilities create_qp returned */
  uint16_t lid;
};

static inline struct ibv_context *rig_open_first_device(void) {
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) DIE("no RDMA device (run under rdmasan run)");
  struct ibv_context *ctx = ibv_open_device(list[0]);
  if (!ctx) DIE("ibv_open_device(%s): %s", ibv_get_device_name(list[0]), strerror(errno));
  ibv_free_device_list(list);
  return ctx;
}

/* RESET -> INIT -> RTR -> RTS (or only INIT), connected to remote_qpn. */
static inline void rig_connect_qp(struct rig *r, struct ibv_qp *qp, uint32_t remote_qpn, int init_only) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.pkey_index = 0;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    DIE("modify_qp INIT failed");
  if (init_only) return;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote_qpn;
  a.rq_psn = 0;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.ah_attr.dlid = r->lid;
  a.ah_attr.port_num = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    DIE("modify_qp RTR failed");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = 0;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    DIE("modify_qp RTS failed");
}

/* Back to RESET and up again: how a program recovers a QP from ERR. */
static inline void rig_reconnect(struct rig *r) {
  struct ibv_qp_attr a;
  for (int i = 0; i < 2; ++i) {
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RESET;
    if (ibv_modify_qp(r->qp[i], &a, IBV_QP_STATE)) DIE("modify_qp RESET failed");
  }
  for (int i = 0; i < 2; ++i) rig_connect_qp(r, r->qp[i], r->qp[1 - i]->qp_num, 0);
}

static inline void rig_setup(struct rig *r, const struct rig_opts *o_in) {
  struct rig_opts o = o_in ? *o_in : (struct rig_opts){0};
  if (!o.cqe) o.cqe = 64;
  if (!o.max_send_wr) o.max_send_wr = 16;
  if (!o.max_recv_wr) o.max_recv_wr = 16;
  if (!o.max_send_sge) o.max_send_sge = 2;
  if (!o.max_recv_sge) o.max_recv_sge = 2;
  /* Line-buffered, so DONE reaches a pipe even when the shim ends the
   * process with _exit (stdout_kept.c covers the default buffering). */
  if (!o.block_buffered_stdout) setvbuf(stdout, NULL, _IOLBF, 0);
  memset(r, 0, sizeof *r);
  r->ctx = rig_open_first_device();
  struct ibv_port_attr pa;
  if (ibv_query_port(r->ctx, 1, &pa)) DIE("ibv_query_port failed");
  r->lid = pa.lid;
  r->pd = ibv_alloc_pd(r->ctx);
  if (!r->pd) DIE("ibv_alloc_pd failed");
  if (o.channel) {
    r->ch = ibv_create_comp_channel(r->ctx);
    if (!r->ch) DIE("ibv_create_comp_channel failed");
  }
  for (int i = 0; i < 2; ++i) {
    r->cq[i] = ibv_create_cq(r->ctx, o.cqe, NULL, r->ch, 0);
    if (!r->cq[i]) DIE("ibv_create_cq(%d) failed", o.cqe);
  }
  for (int i = 0; i < 2; ++i) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = r->cq[i];
    ia.recv_cq = r->cq[i];
    ia.qp_type = IBV_QPT_RC;
    ia.sq_sig_all = o.sq_sig_all;
    ia.cap.max_send_wr = o.max_send_wr;
    ia.cap.max_recv_wr = o.max_recv_wr;
    ia.cap.max_send_sge = o.max_send_sge;
    ia.cap.max_recv_sge = o.max_recv_sge;
    ia.cap.max_inline_data = o.max_inline;
    r->qp[i] = ibv_create_qp(r->pd, &ia);
    if (!r->qp[i]) DIE("ibv_create_qp failed: %s", strerror(errno));
    r->cap[i] = ia.cap;
  }
  rig_connect_qp(r, r->qp[0], r->qp[1]->qp_num, o.qp0_init_only);
  rig_connect_qp(r, r->qp[1], r->qp[0]->qp_num, 0);
}

static inline struct ibv_mr *rig_reg(struct rig *r, void *buf, size_t len, int access) {
  struct ibv_mr *mr = ibv_reg_mr(r->pd, buf, len, access);
  if (!mr) DIE("ibv_reg_mr(%zu bytes) failed: %s", len, strerror(errno));
  return mr;
}

static inline struct ibv_sge rig_sge(const struct ibv_mr *mr, const void *addr, uint32_t len) {
  struct ibv_sge s = {.addr = (uintptr_t)addr, .length = len, .lkey = mr->lkey};
  return s;
}

/* An RDMA WRITE of one SGE to (raddr, rkey); the caller posts it. */
static inline struct ibv_send_wr rig_write_wr(uint64_t wr_id, struct ibv_sge *sge, uint64_t raddr,
                                              uint32_t rkey, int signaled) {
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.sg_list = sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = signaled ? IBV_SEND_SIGNALED : 0;
  wr.wr.rdma.remote_addr = raddr;
  wr.wr.rdma.rkey = rkey;
  return wr;
}

static inline double rig_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + ts.tv_nsec / 1e9;
}

/* Polls until n completions arrived (into wc, which holds n) or 2 s passed;
 * returns how many arrived. */
static inline int rig_poll_n(struct ibv_cq *cq, struct ibv_wc *wc, int n) {
  int got = 0;
  double end = rig_now() + 2.0;
  while (got < n && rig_now() < end) {
    int k = ibv_poll_cq(cq, n - got, wc + got);
    if (k < 0) DIE("ibv_poll_cq failed");
    got += k;
  }
  return got;
}

/* Like rig_poll_n, but every completion must be successful. */
static inline void rig_poll_ok(struct ibv_cq *cq, int n) {
  struct ibv_wc wc[64];
  if (n > 64) DIE("rig_poll_ok: n too large");
  int got = rig_poll_n(cq, wc, n);
  if (got != n) DIE("expected %d completions, got %d", n, got);
  for (int i = 0; i < n; ++i)
    if (wc[i].status != IBV_WC_SUCCESS)
      DIE("completion wr_id=%llu: %s", (unsigned long long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
}

/* Drops whatever completions are left, e.g. flushes before teardown. */
static inline void rig_drain(struct rig *r) {
  struct ibv_wc wc[16];
  for (int i = 0; i < 2; ++i)
    while (ibv_poll_cq(r->cq[i], 16, wc) > 0) {}
}

/* Destroys the QPs only, e.g. so that MRs their receives still use can be
 * deregistered before rig_teardown deallocates the PD. */
static inline void rig_destroy_qps(struct rig *r) {
  for (int i = 0; i < 2; ++i) {
    if (r->qp[i] && ibv_destroy_qp(r->qp[i])) DIE("ibv_destroy_qp failed");
    r->qp[i] = NULL;
  }
}

/* Destroys QPs, CQs, channel, PD and context in the legal order.  MRs are
 * the caller's. */
static inline void rig_teardown(struct rig *r) {
  for (int i = 0; i < 2; ++i)
    if (r->qp[i] && ibv_destroy_qp(r->qp[i])) DIE("ibv_destroy_qp failed");
  for (int i = 0; i < 2; ++i)
    if (r->cq[i] && ibv_destroy_cq(r->cq[i])) DIE("ibv_destroy_cq failed");
  if (r->ch && ibv_destroy_comp_channel(r->ch)) DIE("ibv_destroy_comp_channel failed");
  if (r->pd && ibv_dealloc_pd(r->pd)) DIE("ibv_dealloc_pd failed");
  if (ibv_close_device(r->ctx)) DIE("ibv_close_device failed");
}

#endif
