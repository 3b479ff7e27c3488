/* lean_common.h: the plumbing shared by bench/lean_pingpong.c and
 * bench/lean_stream.c, two plain verbs programs (public libibverbs API
 * only) that bench/speed.sh runs under `rdmasan run` on a private softnic
 * fabric: open the device, create the CQs and an RC QP, exchange QP
 * numbers, PSNs and one buffer's address and rkey over loopback TCP, move
 * the QP to RTS, and fail loudly.
 *
 * May not: retry or hide a failed verb, a lost message or a bad completion.
 * Every failure prints "lean: FAILED: ..." and exits 1, and a run that
 * stops making progress is ended by SIGALRM (lean_deadline), so a figure is
 * printed only when every message of the run arrived as sent. */
#ifndef RDMASAN_BENCH_LEAN_COMMON_H_
#define RDMASAN_BENCH_LEAN_COMMON_H_

#include <infiniband/verbs.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What the two sides tell each other before connecting.  param[] carries
 * the client's run parameters to the server (each program says which). */
struct lean_info {
  uint32_t qpn, psn;
  uint16_t lid;
  uint16_t pad[3];
  union ibv_gid gid;
  uint64_t addr;
  uint32_t rkey;
  uint32_t pad2;
  uint64_t param[8];
};

struct lean_conn {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_comp_channel *channel; /* NULL unless asked for */
  struct ibv_cq *scq, *rcq;
  struct ibv_qp *qp;
  struct ibv_qp_cap cap; /* what ibv_create_qp returned */
  uint16_t lid;
  union ibv_gid gid;
  uint32_t psn;
  int sock; /* the TCP connection to the peer */
};

struct lean_qp_opts {
  const char *dev; /* NULL: the first device */
  uint32_t sq_depth, rq_depth;
  int scq_cqe, rcq_cqe;
  uint32_t max_inline; /* asked for; conn->cap says what was given */
  bool channel;        /* the receive CQ on a completion channel */
};

void lean_fail(const char *fmt, ...) __attribute__((noreturn, format(printf, 1, 2)));
/* Fails with the verb's name and the errno-style return value. */
void lean_check(int rc, const char *what);

uint64_t lean_now_ns(void);
/* SIGALRM after `seconds`: "timed out in PHASE" and exit 1.  0 disarms. */
void lean_deadline(unsigned seconds, const char *phase);

/* Opens the device and creates the PD, CQs, QP (INIT); exits on failure.
 * Keeps c->sock. */
void lean_open(struct lean_conn *c, const struct lean_qp_opts *o);
/* Server (host NULL): listens on port, accepts one client.  Client: connects
 * to host:port (retrying for 10 s while nobody listens). */
void lean_tcp_connect(struct lean_conn *c, const char *host, int port);
/* Each side sends its info on the TCP connection and reads the peer's. */
void lean_swap(struct lean_conn *c, const struct lean_info *mine, struct lean_info *peer);
/* Fills a lean_info with the QP's number, PSN, LID and GID. */
void lean_local_info(const struct lean_conn *c, struct lean_info *out);
/* INIT -> RTR -> RTS towards the peer. */
void lean_connect(struct lean_conn *c, const struct lean_info *peer);
/* Both sides call it: each sends a byte and waits for the peer's. */
void lean_sync(struct lean_conn *c);
/* Sends / receives 8 bytes on the TCP connection. */
void lean_send_u64(struct lean_conn *c, uint64_t v);
uint64_t lean_recv_u64(struct lean_conn *c);
/* Destroys the QP (its posted receives are flushed). */
void lean_destroy_qp(struct lean_conn *c);
/* Destroys the rest of what lean_open made (acks `unacked` events first). */
void lean_close(struct lean_conn *c, unsigned unacked);

/* A completion that is not IBV_WC_SUCCESS of the expected opcode fails. */
void lean_expect_wc(const struct ibv_wc *wc, enum ibv_wc_opcode opcode, const char *what);

/* Median of n values (sorts them). */
double lean_median(double *v, size_t n);

/* Parses "-x VALUE" style options shared by both programs; see each
 * program's usage. */
uint64_t lean_parse_u64(const char *s, const char *what);

#endif /* RDMASAN_BENCH_LEAN_COMMON_H_ */
