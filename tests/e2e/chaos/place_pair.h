/* place_pair.h: the two processes of the placement programs.  The program
 * forks before any verbs call; the parent is the writer (its softnic
 * executes the WRITEs, so its decisions are the ones logged), the child
 * the reader whose memory the WRITEs target.  Each opens the device and
 * connects one RC QP to the other's; numbers, the target's address and
 * rkey go through pipes, and so does the round-by-round handshake:
 *   reader -> writer  "r" ready (receives posted, if any)
 *   writer -> reader  "d" round k's WRITE completed
 *   reader -> writer  "k" round k checked, go on
 * A reader that dies ends its pipe: the writer stops and exits with the
 * reader's status (128 + signal), printing DONE only when both ended well.
 * The reader waits for "d" before it acts on a bad check, so the writer's
 * own WR always completes cleanly first (its books stay silent). */
#ifndef RDMASAN_E2E_CHAOS_PLACE_PAIR_H
#define RDMASAN_E2E_CHAOS_PLACE_PAIR_H

#include "../checks/common.h"

#include <arpa/inet.h>

#define MSG 16384 /* one WRITE: a flag in its last byte, in the planted program */
#define ROUNDS 8  /* any one of them catches the planted bug */

struct end {
  uint32_t qpn;
  uint16_t lid;
  uint64_t addr;
  uint32_t rkey;
};

struct side {
  struct rig r;
  struct ibv_cq *cq;
  struct ibv_qp *qp;
  struct ibv_mr *mr;
  int to, from; /* pipes to and from the other side */
};

/* Round k's byte i: never zero, different in every round. */
static inline uint8_t pattern(int k, size_t i) { return (uint8_t)((i * 13 + (size_t)k * 7) % 251 + 1); }

static inline void side_open(struct side *s, void *buf, size_t len) {
  memset(&s->r, 0, sizeof s->r);
  s->r.ctx = rig_open_first_device();
  struct ibv_port_attr pa;
  if (ibv_query_port(s->r.ctx, 1, &pa)) DIE("ibv_query_port failed");
  s->r.lid = pa.lid;
  s->r.pd = ibv_alloc_pd(s->r.ctx);
  if (!s->r.pd) DIE("ibv_alloc_pd failed");
  s->cq = ibv_create_cq(s->r.ctx, 16, NULL, NULL, 0);
  if (!s->cq) DIE("ibv_create_cq failed");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = s->cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 8;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  s->qp = ibv_create_qp(s->r.pd, &ia);
  if (!s->qp) DIE("ibv_create_qp: %s", strerror(errno));
  s->mr = rig_reg(&s->r, buf, len, RIG_ALL_ACCESS);
}

/* Exchanges ends with the other side and connects; returns the other's. */
static inline struct end side_connect(struct side *s) {
  struct end me = {s->qp->qp_num, s->r.lid, (uintptr_t)s->mr->addr, s->mr->rkey}, peer;
  if (write(s->to, &me, sizeof me) != sizeof me) DIE("write: %s", strerror(errno));
  if (read(s->from, &peer, sizeof peer) != sizeof peer) DIE("read: %s", strerror(errno));
  s->r.lid = peer.lid;
  rig_connect_qp(&s->r, s->qp, peer.qpn, 0);
  return peer;
}

static inline void side_close(struct side *s) {
  ibv_destroy_qp(s->qp);
  ibv_dereg_mr(s->mr);
  ibv_destroy_cq(s->cq);
  ibv_dealloc_pd(s->r.pd);
  ibv_close_device(s->r.ctx);
}

/* The writer's wait for its WRITE's completion: a poll, then 100 us
 * asleep, so the reader, spinning on its flag, has a CPU to look on
 * between two placement steps (2 ms apart) even on a loaded machine. */
static inline void writer_wait(struct ibv_cq *cq) {
  struct ibv_wc wc;
  double end = rig_now() + 20.0;
  int n;
  while ((n = ibv_poll_cq(cq, 1, &wc)) == 0) {
    if (rig_now() > end) DIE("no completion of the WRITE");
    struct timespec ts = {0, 100 * 1000};
    nanosleep(&ts, NULL);
  }
  if (n < 0) DIE("ibv_poll_cq failed");
  if (wc.status != IBV_WC_SUCCESS)
    DIE("completion wr_id=%llu: %s", (unsigned long long)wc.wr_id, ibv_wc_status_str(wc.status));
}

/* The writer: round k WRITEs pattern k into the reader's k-th MSG bytes
 * (with_imm: WRITE_WITH_IMM, immediate k), waits for its completion, tells
 * the reader, and waits for its go-ahead.  Returns main's exit status. */
static inline int run_writer(struct side *s, pid_t reader, int with_imm) {
  static uint8_t src[MSG];
  side_open(s, src, sizeof src);
  struct end peer = side_connect(s);
  char c;
  if (read(s->from, &c, 1) != 1) DIE("the reader did not get ready");
  for (int k = 0; k < ROUNDS; ++k) {
    for (size_t i = 0; i < MSG; ++i) src[i] = pattern(k, i);
    struct ibv_sge sge = rig_sge(s->mr, src, MSG);
    struct ibv_send_wr wr = rig_write_wr((uint64_t)k, &sge, peer.addr + (uint64_t)k * MSG, peer.rkey, 1),
                       *bad;
    if (with_imm) {
      wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
      wr.imm_data = htonl((uint32_t)k);
    }
    if (ibv_post_send(s->qp, &wr, &bad)) DIE("post_send failed");
    writer_wait(s->cq);
    if (write(s->to, "d", 1) != 1) DIE("write: %s", strerror(errno));
    if (read(s->from, &c, 1) != 1) break; /* the reader is gone */
  }
  int status = 0;
  if (waitpid(reader, &status, 0) != reader) DIE("waitpid: %s", strerror(errno));
  side_close(s);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 4;
  printf("DONE\n");
  return 0;
}

/* Whether round k's bytes are all in the reader's buffer. */
static inline int round_complete(const volatile uint8_t *buf, int k) {
  for (size_t i = 0; i < MSG; ++i)
    if (buf[i] != pattern(k, i)) return 0;
  return 1;
}

#endif
