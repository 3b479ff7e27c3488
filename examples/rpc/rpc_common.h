/* rpc_common.h: what the RPC client and server share.
 *
 * Shows (1) the wire format of the example RPC, (2) SQE credit accounting as
 * Jason Gunthorpe describes it on linux-rdma (docs/checks.md#sq-overflow: "directly track the
 * number of SQEs used and available, [check] before every post"), (3) the
 * signaling policy "at the 1/2 point, and whenever free space is < N", and
 * (4) the plumbing every verbs program needs: device, RC QP connected over a
 * TCP socket (LID/QPN/PSN/GID and an rkey/addr), polling with deadlines.
 *
 * The planted bugs (--mode) are selected here too; each one is a single,
 * marked deviation from the correct code ("BUG(<mode>)" comments). */
#ifndef RDMASAN_EXAMPLES_RPC_COMMON_H
#define RDMASAN_EXAMPLES_RPC_COMMON_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include <infiniband/verbs.h>

/* ---- sizes ------------------------------------------------------------- */

#define RPC_SLOTS 8      /* RPCs the client may have executing at once */
#define RPC_RECV_SLACK 4 /* receives posted beyond one per slot */
#define RPC_RECVS (RPC_SLOTS + RPC_RECV_SLACK)
#define RPC_MSG_MAX 512 /* largest SEND (header + inline payload) */
#define RPC_PAYLOAD_MAX (RPC_MSG_MAX - (int)sizeof(struct rpc_req))
#define RPC_WRITE_MAX 4096 /* largest RDMA WRITE payload, one region per slot */
#define RPC_WRITE_EVERY 4  /* every 4th RPC writes its bulk data first */
#define RPC_WAIT_S 5.0     /* no wait in these programs lasts longer */

/* Most SQEs one RPC can use (docs/checks.md#sq-overflow; step 1): client: RDMA WRITE + SEND;
 * server: the reply SEND. */
#define RPC_CLIENT_WRS_PER_RPC 2
#define RPC_SERVER_WRS_PER_RPC 1

/* ---- wire format ------------------------------------------------------- */

#define RPC_REQ_MAGIC 0x52504351u /* "RPCQ" */
#define RPC_REP_MAGIC 0x52504352u /* "RPCR" */
#define RPC_FLAG_LAST 1u          /* the client's last request */

struct rpc_req {
  uint32_t magic;
  uint32_t id;    /* RPC number, 0..n-1 */
  uint16_t slot;  /* client slot; also selects the server's write region */
  uint16_t flags; /* RPC_FLAG_* */
  uint32_t len;   /* inline payload bytes following this header */
  uint32_t wlen;  /* bytes RDMA-written into the slot's region before this SEND */
  uint32_t pad;
  uint64_t wsum; /* hash of those bytes, as the client wrote them */
};

struct rpc_rep {
  uint32_t magic;
  uint32_t id;
  uint16_t slot;
  uint16_t status; /* 0 ok, else RPC_ST_* */
  uint32_t pad;
  uint64_t psum; /* hash of the inline payload the server received */
  uint64_t wsum; /* hash of the slot's write region as the server read it */
};

enum { RPC_ST_OK = 0, RPC_ST_BAD_HEADER = 1, RPC_ST_BAD_WRITE = 2 };

uint64_t rpc_hash(const void *p, size_t n);
/* Deterministic payload bytes of RPC `id`: `salt` tells the inline payload
 * (0) from the written bulk data (1). */
void rpc_fill(uint8_t *p, size_t n, uint32_t id, int salt);
uint32_t rpc_payload_len(uint32_t id);
uint32_t rpc_write_len(uint32_t id); /* 0 unless id % RPC_WRITE_EVERY == 0 */

/* ---- modes: correct, or one planted bug named after its rdmasan check ---- */

enum rpc_mode {
  MODE_CORRECT,
  MODE_SQ_OVERFLOW,
  MODE_UNSIGNALED_DEADLOCK,
  MODE_UNSIGNALED_RUN,
  MODE_BUFFER_MODIFIED_IN_FLIGHT,
  MODE_DEREG_IN_FLIGHT,
  MODE_CQ_OVERRUN,
  MODE_REPLY_BEFORE_SEND,
  MODE_COUNT
};
extern const char *const rpc_mode_names[MODE_COUNT];
int rpc_parse_mode(const char *s); /* -1 if unknown */
/* BUG(reply-before-send): scrubs a request's send buffer for its next user
 * as soon as the reply is in (rpc_common.c says why that is wrong). */
void rpc_bug_scrub(uint8_t *req_buf);

/* ---- SQE credit accounting (docs/checks.md) ---------------------------------- */

/* One QP's send queue, counted in SQEs.  WR number k (k = 0, 1, ...) is
 * posted with wr_id = k, so a completion says by itself how far it retires:
 * the SQ is strongly ordered, a signaled completion for WR k retires k and
 * every earlier WR, signaled or not. */
struct sq_credits {
  uint32_t depth;        /* max_send_wr as ibv_create_qp RETURNED it */
  uint32_t per_rpc;      /* N: most SQEs one RPC can use */
  uint64_t posted;       /* WRs posted; the next WR's number */
  uint64_t retired;      /* WRs whose completion (own or later) was polled */
  uint32_t reserved;     /* credits held by slots handed to the upper layer */
  uint32_t unsignaled;   /* unsignaled WRs posted since the last signaled one */
  uint64_t signaled_end; /* number of the last signaled WR posted, plus one */
  enum rpc_mode mode;
};

/* Page-aligned memory for registration; aligned_alloc wants the size to be a
 * multiple of the alignment. */
static inline void *rpc_alloc_pages(size_t len) { return aligned_alloc(4096, (len + 4095) & ~(size_t)4095); }

static inline uint32_t sq_used(const struct sq_credits *c) { return (uint32_t)(c->posted - c->retired); }
/* Credits nobody holds: what the next slot could reserve. */
static inline uint32_t sq_free(const struct sq_credits *c) { return c->depth - sq_used(c) - c->reserved; }

/* Seed 000, step 2: take N credits before a slot goes to the upper layer;
 * false (and nothing taken) if they are not there. */
bool sq_reserve(struct sq_credits *c);
/* The invariant, checked before every post: the `k` WRs about to be posted
 * are covered by the `held` credits the caller reserved, and fit the SQ. */
void sq_check_post(const struct sq_credits *c, uint32_t k, uint32_t held);
/* Decide IBV_SEND_SIGNALED for the next WR of a chain whose first `i` WRs
 * were already decided (0 for the first); `final` forces it (the last WR
 * before teardown must be signaled so teardown can retire everything). */
unsigned sq_signal_flag(struct sq_credits *c, uint32_t i, uint32_t held, bool final);
/* After a successful post of `k` WRs with `held` credits: consume k, return
 * the held - k the RPC did not need (docs/checks.md#sq-overflow; step 3). */
void sq_commit(struct sq_credits *c, uint32_t k, uint32_t held);
/* A successful send completion for WR `wr_id` was polled (step 4). */
void sq_retire(struct sq_credits *c, uint64_t wr_id);
/* Will a completion still come?  (Unsignaled WRs after the last signaled one
 * are retired only by a later signaled WR, or by destroying the QP.) */
static inline bool sq_completion_pending(const struct sq_credits *c) { return c->retired < c->signaled_end; }

/* ---- connection -------------------------------------------------------- */

struct rpc_conn_info {
  uint16_t lid;
  uint32_t qpn;
  uint32_t psn;
  union ibv_gid gid;
  uint64_t addr; /* the server's write regions (0 from the client) */
  uint32_t rkey;
};

struct rpc_dev {
  struct ibv_context *ctx;
  struct ibv_pd *pd;
  struct ibv_cq *scq; /* send completions */
  struct ibv_cq *rcq; /* receive completions (== scq in cq-overrun mode) */
  struct ibv_qp *qp;
  struct ibv_qp_cap cap; /* what create_qp returned */
  uint16_t lid;
  union ibv_gid gid;
  uint32_t psn;
};

/* Open the device (NULL: the first one), make a PD, the CQs and an RC QP.
 * `scq_cqe`/`rcq_cqe` as given; if `shared_cq`, one CQ of `rcq_cqe`. */
int rpc_dev_open(struct rpc_dev *d, const char *devname, uint32_t max_send_wr, uint32_t max_recv_wr,
                 int scq_cqe, int rcq_cqe, bool shared_cq);
int rpc_dev_connect(struct rpc_dev *d, const struct rpc_conn_info *remote);
void rpc_dev_local_info(const struct rpc_dev *d, struct rpc_conn_info *out);
/* Destroys the QP and the CQs (not the PD: MRs may still need it). */
void rpc_dev_destroy_qp(struct rpc_dev *d);
void rpc_dev_close(struct rpc_dev *d);

int rpc_tcp_listen(int port);
int rpc_tcp_accept(int lfd, double timeout_s);
int rpc_tcp_connect(const char *host, int port, double timeout_s);
int rpc_send_info(int fd, const struct rpc_conn_info *i);
int rpc_recv_info(int fd, struct rpc_conn_info *i, double timeout_s);
/* Waits up to timeout_s for one byte; 1: got `*b`, 0: EOF, -1: timeout or error. */
int rpc_recv_byte(int fd, uint8_t *b, double timeout_s);
/* 1 if the peer closed the socket (or wrote something), without blocking. */
bool rpc_peer_readable(int fd);

/* ---- misc -------------------------------------------------------------- */

double rpc_now(void);
void rpc_backoff(unsigned *idle_polls); /* call after an empty poll */
/* Client and server in one process and one thread (rpc_inproc.c): when
 * set, rpc_backoff calls it instead of waiting, and the other side runs. */
extern void (*rpc_idle_hook)(void *arg);
extern void *rpc_idle_arg;

/* An expression, so that `return RPC_LOG(...), -1;` works. */
#define RPC_LOG(who, ...) (fprintf(stderr, "%s: ", who), fprintf(stderr, __VA_ARGS__), fputc('\n', stderr))

#endif
