/* lean_common.c: see lean_common.h. */
#define _GNU_SOURCE
#include "lean_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

void lean_fail(const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  fprintf(stderr, "lean: FAILED: ");
  vfprintf(stderr, fmt, ap);
  fprintf(stderr, "\n");
  va_end(ap);
  exit(1);
}

void lean_check(int rc, const char *what) {
  if (rc) lean_fail("%s: %s (%d)", what, strerror(rc > 0 ? rc : errno), rc);
}

uint64_t lean_now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static char deadline_msg[160];

static void on_alarm(int sig) {
  (void)sig;
  /* async-signal-safe: write and _exit only */
  ssize_t n = write(2, deadline_msg, strlen(deadline_msg));
  (void)n;
  _exit(1);
}

void lean_deadline(unsigned seconds, const char *phase) {
  snprintf(deadline_msg, sizeof(deadline_msg),
           "lean: FAILED: timed out in %s after %u s: a message or a completion was lost\n", phase, seconds);
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sigaction(SIGALRM, &sa, NULL);
  alarm(seconds);
}

void lean_open(struct lean_conn *c, const struct lean_qp_opts *o) {
  const int sock = c->sock;
  memset(c, 0, sizeof(*c));
  c->sock = sock;
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) lean_fail("no RDMA device (run under `rdmasan run` to get softnic0)");
  struct ibv_device *dev = NULL;
  for (int i = 0; i < n && !dev; i++)
    if (!o->dev || strcmp(ibv_get_device_name(list[i]), o->dev) == 0) dev = list[i];
  if (!dev) lean_fail("device %s not found", o->dev);
  c->ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!c->ctx) lean_fail("ibv_open_device: %s", strerror(errno));

  struct ibv_port_attr pa;
  lean_check(ibv_query_port(c->ctx, 1, &pa), "ibv_query_port");
  c->lid = pa.lid;
  if (ibv_query_gid(c->ctx, 1, 0, &c->gid)) memset(&c->gid, 0, sizeof(c->gid));

  c->pd = ibv_alloc_pd(c->ctx);
  if (!c->pd) lean_fail("ibv_alloc_pd: %s", strerror(errno));
  if (o->channel) {
    c->channel = ibv_create_comp_channel(c->ctx);
    if (!c->channel) lean_fail("ibv_create_comp_channel: %s", strerror(errno));
  }
  c->scq = ibv_create_cq(c->ctx, o->scq_cqe, NULL, NULL, 0);
  if (!c->scq) lean_fail("ibv_create_cq (send): %s", strerror(errno));
  c->rcq = ibv_create_cq(c->ctx, o->rcq_cqe, NULL, c->channel, 0);
  if (!c->rcq) lean_fail("ibv_create_cq (receive): %s", strerror(errno));

  struct ibv_qp_init_attr ia = {
      .send_cq = c->scq,
      .recv_cq = c->rcq,
      .qp_type = IBV_QPT_RC,
      .sq_sig_all = 0,
      .cap = {.max_send_wr = o->sq_depth,
              .max_recv_wr = o->rq_depth,
              .max_send_sge = 1,
              .max_recv_sge = 1,
              .max_inline_data = o->max_inline},
  };
  c->qp = ibv_create_qp(c->pd, &ia);
  if (!c->qp) lean_fail("ibv_create_qp: %s", strerror(errno));
  c->cap = ia.cap;

  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .pkey_index = 0,
      .port_num = 1,
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE,
  };
  lean_check(ibv_modify_qp(c->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS),
             "ibv_modify_qp INIT");
  srand48((long)getpid() * 7919 + (long)time(NULL));
  c->psn = (uint32_t)lrand48() & 0xffffff;
}

void lean_local_info(const struct lean_conn *c, struct lean_info *out) {
  out->qpn = c->qp->qp_num;
  out->psn = c->psn;
  out->lid = c->lid;
  out->gid = c->gid;
}

static void write_all(int fd, const void *p, size_t n) {
  const char *b = p;
  while (n) {
    ssize_t k = write(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) lean_fail("TCP write: %s", k < 0 ? strerror(errno) : "closed");
    b += k;
    n -= (size_t)k;
  }
}

static void read_all(int fd, void *p, size_t n) {
  char *b = p;
  while (n) {
    ssize_t k = read(fd, b, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) lean_fail("TCP read: %s", k < 0 ? strerror(errno) : "the peer closed the connection");
    b += k;
    n -= (size_t)k;
  }
}

void lean_tcp_connect(struct lean_conn *c, const char *host, int port) {
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  if (inet_pton(AF_INET, host ? host : "127.0.0.1", &sa.sin_addr) != 1)
    lean_fail("bad IPv4 address %s", host);
  if (!host) {
    int ls = socket(AF_INET, SOCK_STREAM, 0);
    if (ls < 0) lean_fail("socket: %s", strerror(errno));
    int one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(ls, (struct sockaddr *)&sa, sizeof(sa)) || listen(ls, 1))
      lean_fail("listen on port %d: %s", port, strerror(errno));
    c->sock = accept(ls, NULL, NULL);
    if (c->sock < 0) lean_fail("accept: %s", strerror(errno));
    close(ls);
  } else {
    uint64_t give_up = lean_now_ns() + 10000000000ull;
    for (;;) {
      c->sock = socket(AF_INET, SOCK_STREAM, 0);
      if (c->sock < 0) lean_fail("socket: %s", strerror(errno));
      if (connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)) == 0) break;
      if (errno != ECONNREFUSED || lean_now_ns() > give_up)
        lean_fail("connect to %s:%d: %s", host, port, strerror(errno));
      close(c->sock);
      usleep(20000);
    }
  }
  int one = 1;
  setsockopt(c->sock, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

void lean_swap(struct lean_conn *c, const struct lean_info *mine, struct lean_info *peer) {
  write_all(c->sock, mine, sizeof(*mine));
  read_all(c->sock, peer, sizeof(*peer));
}

void lean_connect(struct lean_conn *c, const struct lean_info *peer) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = IBV_MTU_4096,
      .dest_qp_num = peer->qpn,
      .rq_psn = peer->psn,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 1,
      .ah_attr = {.dlid = peer->lid, .port_num = 1},
  };
  if (peer->lid == 0) { /* no LID (RoCE): route by GID */
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = peer->gid;
    a.ah_attr.grh.hop_limit = 1;
  }
  lean_check(ibv_modify_qp(c->qp, &a,
                           IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
             "ibv_modify_qp RTR");
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7; /* a receiver that falls behind stalls the sender, never fails it */
  a.sq_psn = c->psn;
  a.max_rd_atomic = 1;
  lean_check(ibv_modify_qp(c->qp, &a,
                           IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                               IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC),
             "ibv_modify_qp RTS");
}

void lean_sync(struct lean_conn *c) {
  char b = 's';
  write_all(c->sock, &b, 1);
  read_all(c->sock, &b, 1);
  if (b != 's') lean_fail("TCP sync: unexpected byte 0x%02x", (unsigned char)b);
}

void lean_send_u64(struct lean_conn *c, uint64_t v) { write_all(c->sock, &v, sizeof(v)); }

uint64_t lean_recv_u64(struct lean_conn *c) {
  uint64_t v;
  read_all(c->sock, &v, sizeof(v));
  return v;
}

void lean_destroy_qp(struct lean_conn *c) {
  lean_check(ibv_destroy_qp(c->qp), "ibv_destroy_qp");
  c->qp = NULL;
}

void lean_close(struct lean_conn *c, unsigned unacked) {
  if (c->qp) lean_destroy_qp(c);
  if (unacked) ibv_ack_cq_events(c->rcq, unacked);
  lean_check(ibv_destroy_cq(c->rcq), "ibv_destroy_cq");
  lean_check(ibv_destroy_cq(c->scq), "ibv_destroy_cq");
  if (c->channel) lean_check(ibv_destroy_comp_channel(c->channel), "ibv_destroy_comp_channel");
  lean_check(ibv_dealloc_pd(c->pd), "ibv_dealloc_pd");
  lean_check(ibv_close_device(c->ctx), "ibv_close_device");
  if (c->sock >= 0) close(c->sock);
}

void lean_expect_wc(const struct ibv_wc *wc, enum ibv_wc_opcode opcode, const char *what) {
  if (wc->status != IBV_WC_SUCCESS)
    lean_fail("%s: completion of wr_id %llu: %s", what, (unsigned long long)wc->wr_id,
              ibv_wc_status_str(wc->status));
  if (wc->opcode != opcode)
    lean_fail("%s: completion of wr_id %llu has opcode %d, expected %d", what, (unsigned long long)wc->wr_id,
              wc->opcode, opcode);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

double lean_median(double *v, size_t n) {
  if (n == 0) return 0;
  qsort(v, n, sizeof(*v), cmp_double);
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

uint64_t lean_parse_u64(const char *s, const char *what) {
  char *end;
  errno = 0;
  unsigned long long v = strtoull(s, &end, 0);
  if (errno || end == s || *end) lean_fail("bad %s '%s'", what, s);
  return v;
}
