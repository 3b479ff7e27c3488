/* rpc_common.c: SQE credit accounting and signaling policy (docs/checks.md#sq-overflow), and
 * the connection plumbing shared by rpc_client and rpc_server: open the
 * device, create CQs and an RC QP, exchange LID/QPN/PSN/GID (+ rkey/addr)
 * over TCP, move the QP INIT -> RTR -> RTS, waits with deadlines. */
#define _GNU_SOURCE
#include "rpc_common.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

/* ---- payloads ---------------------------------------------------------- */

uint64_t rpc_hash(const void *p, size_t n) {
  const uint8_t *b = p;
  uint64_t h = 1469598103934665603ull; /* FNV-1a */
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

void rpc_fill(uint8_t *p, size_t n, uint32_t id, int salt) {
  uint32_t x = id * 2654435761u + (uint32_t)salt * 40503u + 1;
  for (size_t i = 0; i < n; i++) {
    x = x * 1103515245u + 12345u;
    p[i] = (uint8_t)(x >> 16);
  }
}

uint32_t rpc_payload_len(uint32_t id) { return 32 + (id * 37u) % (uint32_t)(RPC_PAYLOAD_MAX - 32 + 1); }

uint32_t rpc_write_len(uint32_t id) {
  if (id % RPC_WRITE_EVERY) return 0;
  return 1024 + (id * 389u) % (RPC_WRITE_MAX - 1024 + 1);
}

/* ---- modes ------------------------------------------------------------- */

const char *const rpc_mode_names[MODE_COUNT] = {
    [MODE_CORRECT] = "correct",
    [MODE_SQ_OVERFLOW] = "sq-overflow",
    [MODE_UNSIGNALED_DEADLOCK] = "unsignaled-deadlock",
    [MODE_UNSIGNALED_RUN] = "unsignaled-run",
    [MODE_BUFFER_MODIFIED_IN_FLIGHT] = "buffer-modified-in-flight",
    [MODE_DEREG_IN_FLIGHT] = "dereg-in-flight",
    [MODE_CQ_OVERRUN] = "cq-overrun",
    [MODE_REPLY_BEFORE_SEND] = "reply-before-send",
};

/* BUG(reply-before-send): "the server answered, so our request SEND is
 * done", and the request's buffer is scrubbed for its next user at once.
 * The SEND's completion and the reply's are on different queues of the QP:
 * a NIC may deliver the reply's first (rdmasan --reorder does), and then the
 * SEND is still in flight.  The client's CQ is shared in this mode, so in
 * softnic's natural order the SEND always retires before the reply. */
void rpc_bug_scrub(uint8_t *req_buf) { memset(req_buf, 0, sizeof(struct rpc_req)); }

int rpc_parse_mode(const char *s) {
  for (int m = 0; m < MODE_COUNT; m++)
    if (strcmp(s, rpc_mode_names[m]) == 0) return m;
  return -1;
}

/* ---- SQE credits ------------------------------------------------------- */

bool sq_reserve(struct sq_credits *c) {
  if (sq_free(c) < c->per_rpc) return false;
  c->reserved += c->per_rpc;
  return true;
}

void sq_check_post(const struct sq_credits *c, uint32_t k, uint32_t held) {
  if (c->mode == MODE_SQ_OVERFLOW) return; /* BUG(sq-overflow): no accounting, nothing to check */
  assert(k >= 1 && k <= held && held <= c->reserved);
  assert(sq_used(c) + k <= c->depth);
}

unsigned sq_signal_flag(struct sq_credits *c, uint32_t i, uint32_t held, bool final) {
  bool sig;
  if (c->mode == MODE_REPLY_BEFORE_SEND) {
    sig = true; /* every WR signaled: each SEND's completion retires it alone */
  } else if (c->mode == MODE_UNSIGNALED_DEADLOCK) {
    sig = false; /* BUG(unsignaled-deadlock): never signal */
  } else if (c->mode == MODE_UNSIGNALED_RUN) {
    sig = final || c->unsignaled + 1 >= c->depth - 1; /* BUG(unsignaled-run): every depth-1 WRs only */
  } else {
    /* Credits left for the next slot once this WR is posted (other slots'
     * reservations are spoken for).  Signed: sq-overflow over-posts. */
    int64_t left = (int64_t)c->depth - (int64_t)(sq_used(c) + i + 1) - (int64_t)(c->reserved - held);
    sig = final                                /* teardown must be able to retire everything */
          || c->unsignaled + 1 >= c->depth / 2 /* the 1/2 mark of the SQ */
          || left < (int64_t)c->per_rpc;       /* fills the SQ, or the next slot cannot get N credits:
                                                  whoever waits for credits needs a completion to come */
  }
  c->unsignaled = sig ? 0 : c->unsignaled + 1;
  if (sig) c->signaled_end = c->posted + i + 1;
  return sig ? IBV_SEND_SIGNALED : 0;
}

void sq_commit(struct sq_credits *c, uint32_t k, uint32_t held) {
  c->posted += k;
  c->reserved -= held; /* k consumed (now counted in sq_used), held - k given back */
}

void sq_retire(struct sq_credits *c, uint64_t wr_id) {
  assert(wr_id >= c->retired && wr_id < c->posted);
  c->retired = wr_id + 1; /* this WR and every earlier one: the SQ is strongly ordered */
}

/* ---- device and QP ----------------------------------------------------- */

int rpc_dev_open(struct rpc_dev *d, const char *devname, uint32_t max_send_wr, uint32_t max_recv_wr,
                 int scq_cqe, int rcq_cqe, bool shared_cq) {
  memset(d, 0, sizeof(*d));
  int n = 0;
  struct ibv_device **list = ibv_get_device_list(&n);
  if (!list || n == 0) {
    fprintf(stderr, "no RDMA device (run under `rdmasan run` to get softnic0)\n");
    if (list) ibv_free_device_list(list);
    return -1;
  }
  struct ibv_device *dev = NULL;
  for (int i = 0; i < n && !dev; i++)
    if (!devname || strcmp(ibv_get_device_name(list[i]), devname) == 0) dev = list[i];
  if (!dev) {
    fprintf(stderr, "device %s not found\n", devname);
    ibv_free_device_list(list);
    return -1;
  }
  d->ctx = ibv_open_device(dev);
  ibv_free_device_list(list);
  if (!d->ctx) return perror("ibv_open_device"), -1;

  struct ibv_port_attr pa;
  if (ibv_query_port(d->ctx, 1, &pa)) return perror("ibv_query_port"), -1;
  d->lid = pa.lid;
  if (ibv_query_gid(d->ctx, 1, 0, &d->gid)) memset(&d->gid, 0, sizeof(d->gid));

  d->pd = ibv_alloc_pd(d->ctx);
  if (!d->pd) return perror("ibv_alloc_pd"), -1;
  d->scq = ibv_create_cq(d->ctx, shared_cq ? rcq_cqe : scq_cqe, NULL, NULL, 0);
  if (!d->scq) return perror("ibv_create_cq"), -1;
  d->rcq = shared_cq ? d->scq : ibv_create_cq(d->ctx, rcq_cqe, NULL, NULL, 0);
  if (!d->rcq) return perror("ibv_create_cq"), -1;

  struct ibv_qp_init_attr ia = {
      .send_cq = d->scq,
      .recv_cq = d->rcq,
      .qp_type = IBV_QPT_RC,
      .sq_sig_all = 0,
      .cap = {.max_send_wr = max_send_wr, .max_recv_wr = max_recv_wr, .max_send_sge = 1, .max_recv_sge = 1},
  };
  d->qp = ibv_create_qp(d->pd, &ia);
  if (!d->qp) return perror("ibv_create_qp"), -1;
  d->cap = ia.cap; /* the provider may give more than asked: account with what it returned */

  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_INIT,
      .pkey_index = 0,
      .port_num = 1,
      /* Remote access still needs an rkey of this PD that grants it:
       * the RPC server's regions (REMOTE_WRITE), examples/blk's windows. */
      .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ,
  };
  if (ibv_modify_qp(d->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return perror("modify_qp INIT"), -1;
  srand48((long)getpid() * 7919 + (long)time(NULL));
  d->psn = (uint32_t)lrand48() & 0xffffff;
  return 0;
}

void rpc_dev_local_info(const struct rpc_dev *d, struct rpc_conn_info *out) {
  memset(out, 0, sizeof(*out));
  out->lid = d->lid;
  out->qpn = d->qp->qp_num;
  out->psn = d->psn;
  out->gid = d->gid;
}

int rpc_dev_connect(struct rpc_dev *d, const struct rpc_conn_info *r) {
  struct ibv_qp_attr a = {
      .qp_state = IBV_QPS_RTR,
      .path_mtu = IBV_MTU_1024,
      .dest_qp_num = r->qpn,
      .rq_psn = r->psn,
      .max_dest_rd_atomic = 1,
      .min_rnr_timer = 12,
      .ah_attr = {.dlid = r->lid, .sl = 0, .src_path_bits = 0, .port_num = 1},
  };
  if (r->lid == 0) { /* no LID (RoCE-like): route by GID */
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = r->gid;
    a.ah_attr.grh.sgid_index = 0;
    a.ah_attr.grh.hop_limit = 1;
  }
  if (ibv_modify_qp(d->qp, &a,
                    IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                        IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return perror("modify_qp RTR"), -1;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.sq_psn = d->psn;
  a.max_rd_atomic = 1;
  if (ibv_modify_qp(d->qp, &a,
                    IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN |
                        IBV_QP_MAX_QP_RD_ATOMIC))
    return perror("modify_qp RTS"), -1;
  return 0;
}

void rpc_dev_destroy_qp(struct rpc_dev *d) {
  if (d->qp && ibv_destroy_qp(d->qp)) perror("ibv_destroy_qp");
  d->qp = NULL;
  if (d->rcq && d->rcq != d->scq && ibv_destroy_cq(d->rcq)) perror("ibv_destroy_cq");
  if (d->scq && ibv_destroy_cq(d->scq)) perror("ibv_destroy_cq");
  d->rcq = d->scq = NULL;
}

void rpc_dev_close(struct rpc_dev *d) {
  if (d->pd && ibv_dealloc_pd(d->pd)) perror("ibv_dealloc_pd");
  d->pd = NULL;
  if (d->ctx && ibv_close_device(d->ctx)) perror("ibv_close_device");
  d->ctx = NULL;
}

/* ---- TCP --------------------------------------------------------------- */

double rpc_now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

void (*rpc_idle_hook)(void *arg);
void *rpc_idle_arg;

void rpc_backoff(unsigned *idle_polls) {
  if (rpc_idle_hook) { /* in one process (rpc_inproc.c): the other side takes a step */
    rpc_idle_hook(rpc_idle_arg);
    return;
  }
  /* Two processes poll on few cores: spin briefly, then yield, then nap. */
  if (++*idle_polls < 64) return;
  if (*idle_polls < 1024) {
    sched_yield();
    return;
  }
  struct timespec ts = {0, 50 * 1000};
  nanosleep(&ts, NULL);
}

static int wait_fd(int fd, short events, double timeout_s) {
  double end = rpc_now() + timeout_s;
  for (;;) {
    double left = end - rpc_now();
    if (left < 0) left = 0;
    struct pollfd p = {.fd = fd, .events = events};
    int r = poll(&p, 1, (int)(left * 1000));
    if (r > 0) return 0;
    if (r == 0) return -1;
    if (errno != EINTR) return -1;
  }
}

int rpc_tcp_listen(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return perror("socket"), -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
  sa.sin_addr.s_addr = htonl(INADDR_ANY);
  if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1)) {
    perror("bind/listen");
    close(fd);
    return -1;
  }
  return fd;
}

int rpc_tcp_accept(int lfd, double timeout_s) {
  if (wait_fd(lfd, POLLIN, timeout_s)) {
    fprintf(stderr, "no client connected within %.0f s\n", timeout_s);
    return -1;
  }
  int fd = accept(lfd, NULL, NULL);
  if (fd < 0) perror("accept");
  return fd;
}

int rpc_tcp_connect(const char *host, int port, double timeout_s) {
  char ps[16];
  snprintf(ps, sizeof(ps), "%d", port);
  struct addrinfo hints = {.ai_family = AF_INET, .ai_socktype = SOCK_STREAM}, *res = NULL;
  int e = getaddrinfo(host, ps, &hints, &res);
  if (e) {
    fprintf(stderr, "getaddrinfo %s: %s\n", host, gai_strerror(e));
    return -1;
  }
  double end = rpc_now() + timeout_s;
  int fd = -1;
  for (;;) {
    fd = socket(res->ai_family, res->ai_socktype, res->ai_protocol);
    if (fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0) break;
    if (fd >= 0) close(fd);
    fd = -1;
    if (rpc_now() > end) {
      fprintf(stderr, "cannot connect to %s:%d: %s\n", host, port, strerror(errno));
      break;
    }
    usleep(100 * 1000);
  }
  freeaddrinfo(res);
  return fd;
}

/* The connection info travels as one text line, so the two sides need not
 * agree on struct layout or byte order. */
#define INFO_LEN 128

int rpc_send_info(int fd, const struct rpc_conn_info *i) {
  char buf[INFO_LEN];
  memset(buf, 0, sizeof(buf));
  char gid[33];
  for (int k = 0; k < 16; k++) sprintf(gid + 2 * k, "%02x", i->gid.raw[k]);
  snprintf(buf, sizeof(buf), "%04x %06x %06x %s %016llx %08x\n", i->lid, i->qpn, i->psn, gid,
           (unsigned long long)i->addr, i->rkey);
  size_t off = 0;
  while (off < sizeof(buf)) {
    ssize_t w = write(fd, buf + off, sizeof(buf) - off);
    if (w <= 0) {
      if (w < 0 && errno == EINTR) continue;
      return perror("write conn info"), -1;
    }
    off += (size_t)w;
  }
  return 0;
}

int rpc_recv_info(int fd, struct rpc_conn_info *i, double timeout_s) {
  char buf[INFO_LEN + 1];
  size_t off = 0;
  double end = rpc_now() + timeout_s;
  while (off < INFO_LEN) {
    if (wait_fd(fd, POLLIN, end - rpc_now()))
      return fprintf(stderr, "no connection info from the peer\n"), -1;
    ssize_t r = read(fd, buf + off, INFO_LEN - off);
    if (r == 0) return fprintf(stderr, "peer closed the socket during the exchange\n"), -1;
    if (r < 0) {
      if (errno == EINTR) continue;
      return perror("read conn info"), -1;
    }
    off += (size_t)r;
  }
  buf[INFO_LEN] = 0;
  unsigned lid, qpn, psn, rkey;
  unsigned long long addr;
  char gid[33];
  if (sscanf(buf, "%x %x %x %32s %llx %x", &lid, &qpn, &psn, gid, &addr, &rkey) != 6 || strlen(gid) != 32)
    return fprintf(stderr, "malformed connection info\n"), -1;
  memset(i, 0, sizeof(*i));
  i->lid = (uint16_t)lid;
  i->qpn = qpn;
  i->psn = psn;
  i->addr = addr;
  i->rkey = rkey;
  for (int k = 0; k < 16; k++) {
    unsigned v;
    sscanf(gid + 2 * k, "%2x", &v);
    i->gid.raw[k] = (uint8_t)v;
  }
  return 0;
}

int rpc_recv_byte(int fd, uint8_t *b, double timeout_s) {
  if (wait_fd(fd, POLLIN, timeout_s)) return -1;
  ssize_t r;
  do r = read(fd, b, 1);
  while (r < 0 && errno == EINTR);
  return r == 1 ? 1 : r == 0 ? 0 : -1;
}

bool rpc_peer_readable(int fd) { return wait_fd(fd, POLLIN, 0) == 0; }
