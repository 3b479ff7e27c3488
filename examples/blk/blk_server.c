/* blk_server.c: the block-storage target of examples/blk (blk_common.h).
 *
 * One client, one RC QP.  For each request: BLK_READ, RDMA WRITE the
 * device's blocks into the client's window, then the reply SEND in the
 * same chain (RC delivers them in order, so the data is in place before
 * the reply is seen); BLK_WRITE, a signaled RDMA READ from the window into
 * the device, and the reply only once that READ's completion is polled.
 * The reply is SEND_WITH_INV naming the window's rkey when the client asks
 * (BLK_F_SERVER_INV): the client's window is invalid before the client
 * learns the I/O is done, with no extra work request on its side.  The
 * server never uses an rkey after its reply: the key it was given is
 * valid for this I/O only.  SQ credits as in examples/rpc (rpc_common.h).
 *
 * usage: blk_server -p PORT [--mode M] [-d DEV]   (the mode only matters
 * to the client; the server accepts it so both take the same arguments) */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blk_common.h"

#define WHO "blk_server"
#define RECV_TAG (1ull << 63)

struct server {
  struct rpc_dev d;
  struct sq_credits sq;
  uint8_t *dev; /* the device's blocks */
  struct ibv_mr *dev_mr;
  uint8_t *rbufs; /* BLK_RECVS requests */
  struct ibv_mr *rbufs_mr;
  struct blk_rep *reps; /* BLK_SQ_DEPTH reply buffers, entry k % depth for WR k */
  struct ibv_mr *reps_mr;
  uint32_t served;
  /* The device's blocks are the source of the RDMA WRITEs of BLK_READs and
   * the target of the RDMA READs of BLK_WRITEs: no READ may land in them
   * while a WRITE that sends them is outstanding.  WR number up to which
   * WRITEs were posted (the signaled reply that follows the last one). */
  uint64_t dev_sent_until;
  bool dev_sending;
};

static int post_recv(struct server *s, uint32_t idx) {
  struct ibv_sge sge = {.addr = (uintptr_t)(s->rbufs + (size_t)idx * sizeof(struct blk_req)),
                        .length = sizeof(struct blk_req),
                        .lkey = s->rbufs_mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = RECV_TAG | idx, .sg_list = &sge, .num_sge = 1}, *bad;
  int rc = ibv_post_recv(s->d.qp, &wr, &bad);
  if (rc) RPC_LOG(WHO, "ibv_post_recv: %s", strerror(rc));
  return rc ? -1 : 0;
}

/* Polls the send CQ until every WR up to `seq` is retired. */
static int wait_retired(struct server *s, uint64_t seq) {
  double deadline = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  while (s->sq.retired <= seq) {
    struct ibv_wc wc;
    int n = ibv_poll_cq(s->d.scq, 1, &wc);
    if (n < 0) return RPC_LOG(WHO, "ibv_poll_cq failed"), -1;
    if (n == 0) {
      if (rpc_now() > deadline) return RPC_LOG(WHO, "no send completion for %.0f s", RPC_WAIT_S), -1;
      rpc_backoff(&idle);
      continue;
    }
    if (wc.status != IBV_WC_SUCCESS)
      return RPC_LOG(WHO, "send WR %llu failed: %s", (unsigned long long)wc.wr_id,
                     ibv_wc_status_str(wc.status)),
             -1;
    sq_retire(&s->sq, wc.wr_id);
  }
  return 0;
}

/* Makes room for one request's 2 WRs (waits for completions if needed). */
static int reserve(struct server *s) {
  while (!sq_reserve(&s->sq))
    if (wait_retired(s, s->sq.retired)) return -1;
  return 0;
}

static int serve(struct server *s, const struct blk_req *q, bool *last) {
  *last = q->flags & BLK_F_LAST;
  struct blk_rep rep = {.magic = BLK_REP_MAGIC, .id = q->id, .slot = q->slot, .status = BLK_ST_OK};
  const bool ok = q->magic == BLK_REQ_MAGIC && (q->op == BLK_READ || q->op == BLK_WRITE) && q->len > 0 &&
                  q->len <= BLK_IO_MAX && q->offset <= BLK_DEV_SIZE - q->len;
  if (reserve(s)) return -1;
  uint32_t held = 2, k = 0;
  struct ibv_send_wr wr[2];
  struct ibv_sge sge[2];
  memset(wr, 0, sizeof(wr));
  if (!ok) {
    rep.status = BLK_ST_BAD_REQUEST;
  } else if (q->op == BLK_WRITE) {
    /* The blocks may still be going out in an earlier WRITE: retire it
     * (through the signaled reply that followed it) before overwriting. */
    if (s->dev_sending && wait_retired(s, s->dev_sent_until)) return -1;
    s->dev_sending = false;
    /* Pull the client's blocks; reply once they are in. */
    sge[0] =
        (struct ibv_sge){.addr = (uintptr_t)(s->dev + q->offset), .length = q->len, .lkey = s->dev_mr->lkey};
    wr[0] = (struct ibv_send_wr){.wr_id = s->sq.posted,
                                 .sg_list = &sge[0],
                                 .num_sge = 1,
                                 .opcode = IBV_WR_RDMA_READ,
                                 .send_flags = sq_signal_flag(&s->sq, 0, held, true), /* waited for */
                                 .wr = {.rdma = {.remote_addr = q->addr, .rkey = q->rkey}}};
    sq_check_post(&s->sq, 1, held);
    struct ibv_send_wr *bad;
    int rc = ibv_post_send(s->d.qp, &wr[0], &bad);
    if (rc) return RPC_LOG(WHO, "ibv_post_send(RDMA_READ): %s", strerror(rc)), -1;
    uint64_t seq = s->sq.posted;
    sq_commit(&s->sq, 1, 1);
    held = 1;
    if (wait_retired(s, seq)) return -1;
    if (rpc_hash(s->dev + q->offset, q->len) != q->sum) rep.status = BLK_ST_BAD_DATA;
  } else {
    /* Push the blocks into the client's window, then the reply, one chain. */
    sge[0] =
        (struct ibv_sge){.addr = (uintptr_t)(s->dev + q->offset), .length = q->len, .lkey = s->dev_mr->lkey};
    wr[0] = (struct ibv_send_wr){.wr_id = s->sq.posted,
                                 .sg_list = &sge[0],
                                 .num_sge = 1,
                                 .opcode = IBV_WR_RDMA_WRITE,
                                 .send_flags = sq_signal_flag(&s->sq, 0, held, false),
                                 .wr = {.rdma = {.remote_addr = q->addr, .rkey = q->rkey}}};
    wr[0].next = &wr[1];
    rep.sum = rpc_hash(s->dev + q->offset, q->len);
    k = 1;
  }
  /* The reply: its buffer is entry (WR number) % depth, free because the
   * WR that used it last was retired before these credits were granted. */
  const uint64_t seq = s->sq.posted + k;
  struct blk_rep *buf = &s->reps[seq % BLK_SQ_DEPTH];
  *buf = rep;
  sge[1] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = sizeof(*buf), .lkey = s->reps_mr->lkey};
  wr[1] = (struct ibv_send_wr){.wr_id = seq, .sg_list = &sge[1], .num_sge = 1, .opcode = IBV_WR_SEND};
  if (ok && (q->flags & BLK_F_SERVER_INV)) {
    wr[1].opcode = IBV_WR_SEND_WITH_INV;
    wr[1].invalidate_rkey = q->rkey;
  }
  /* After a WRITE of the blocks, the reply is signaled: its completion
   * retires the WRITE, which a later BLK_WRITE waits for. */
  wr[1].send_flags = sq_signal_flag(&s->sq, k, held, *last || k);
  sq_check_post(&s->sq, k + 1, held);
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(s->d.qp, k ? &wr[0] : &wr[1], &bad);
  if (rc) return RPC_LOG(WHO, "ibv_post_send(reply): %s", strerror(rc)), -1;
  sq_commit(&s->sq, k + 1, held);
  if (k) {
    s->dev_sending = true;
    s->dev_sent_until = seq;
  }
  s->served++;
  return 0;
}

static int run(struct server *s) {
  double deadline = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  for (;;) {
    struct ibv_wc wc;
    int n = ibv_poll_cq(s->d.rcq, 1, &wc);
    if (n < 0) return RPC_LOG(WHO, "ibv_poll_cq failed"), -1;
    if (n == 0) {
      /* Retire what completed meanwhile, without waiting. */
      struct ibv_wc sw;
      while (ibv_poll_cq(s->d.scq, 1, &sw) == 1) {
        if (sw.status != IBV_WC_SUCCESS)
          return RPC_LOG(WHO, "send WR failed: %s", ibv_wc_status_str(sw.status)), -1;
        sq_retire(&s->sq, sw.wr_id);
      }
      if (rpc_now() > deadline) return RPC_LOG(WHO, "no request for %.0f s", RPC_WAIT_S), -1;
      rpc_backoff(&idle);
      continue;
    }
    idle = 0;
    deadline = rpc_now() + RPC_WAIT_S;
    if (wc.status != IBV_WC_SUCCESS)
      return RPC_LOG(WHO, "receive failed: %s", ibv_wc_status_str(wc.status)), -1;
    uint32_t idx = (uint32_t)(wc.wr_id & ~RECV_TAG);
    struct blk_req q;
    memcpy(&q, s->rbufs + (size_t)idx * sizeof(q), sizeof(q));
    if (post_recv(s, idx)) return -1;
    bool last;
    if (serve(s, &q, &last)) return -1;
    if (last) return wait_retired(s, s->sq.posted - 1);
  }
}

int main(int argc, char **argv) {
  int port = 0;
  const char *devname = NULL;
  static const struct option longs[] = {{"mode", required_argument, NULL, 'm'}, {NULL, 0, NULL, 0}};
  int o;
  while ((o = getopt_long(argc, argv, "p:d:m:", longs, NULL)) != -1) {
    switch (o) {
      case 'p':
        port = atoi(optarg);
        break;
      case 'd':
        devname = optarg;
        break;
      case 'm':
        if (blk_parse_mode(optarg) < 0) return fprintf(stderr, WHO ": unknown mode %s\n", optarg), 2;
        break;
      default:
        return fprintf(stderr, "usage: " WHO " -p PORT [--mode M] [-d DEV]\n"), 2;
    }
  }
  if (port <= 0) return fprintf(stderr, "usage: " WHO " -p PORT [--mode M] [-d DEV]\n"), 2;

  struct server s;
  memset(&s, 0, sizeof(s));
  if (rpc_dev_open(&s.d, devname, BLK_SQ_DEPTH, BLK_RECVS, BLK_SQ_DEPTH, BLK_RECVS, false)) return 1;
  s.sq = (struct sq_credits){.depth = s.d.cap.max_send_wr, .per_rpc = 2, .mode = MODE_CORRECT};
  if (s.sq.depth > BLK_SQ_DEPTH) s.sq.depth = BLK_SQ_DEPTH; /* the reply ring has BLK_SQ_DEPTH entries */
  s.dev = rpc_alloc_pages(BLK_DEV_SIZE);
  s.rbufs = rpc_alloc_pages(BLK_RECVS * sizeof(struct blk_req));
  s.reps = rpc_alloc_pages(BLK_SQ_DEPTH * sizeof(struct blk_rep));
  if (!s.dev || !s.rbufs || !s.reps) return RPC_LOG(WHO, "out of memory"), 1;
  rpc_fill(s.dev, BLK_DEV_SIZE, 0, 2);
  s.dev_mr = ibv_reg_mr(s.d.pd, s.dev, BLK_DEV_SIZE, IBV_ACCESS_LOCAL_WRITE);
  s.rbufs_mr = ibv_reg_mr(s.d.pd, s.rbufs, BLK_RECVS * sizeof(struct blk_req), IBV_ACCESS_LOCAL_WRITE);
  s.reps_mr = ibv_reg_mr(s.d.pd, s.reps, BLK_SQ_DEPTH * sizeof(struct blk_rep), 0);
  if (!s.dev_mr || !s.rbufs_mr || !s.reps_mr) return perror("ibv_reg_mr"), 1;
  for (uint32_t i = 0; i < BLK_RECVS; i++)
    if (post_recv(&s, i)) return 1;

  int lfd = rpc_tcp_listen(port);
  if (lfd < 0) return 1;
  int fd = rpc_tcp_accept(lfd, 30.0);
  close(lfd);
  if (fd < 0) return RPC_LOG(WHO, "no client"), 1;
  struct rpc_conn_info me, peer;
  rpc_dev_local_info(&s.d, &me);
  if (rpc_send_info(fd, &me) || rpc_recv_info(fd, &peer, RPC_WAIT_S) || rpc_dev_connect(&s.d, &peer))
    return RPC_LOG(WHO, "connection setup failed"), 1;
  /* The client starts sending once we are connected. */
  if (write(fd, "g", 1) != 1) return RPC_LOG(WHO, "tcp write failed"), 1;

  int rc = run(&s);
  /* Wait for the client to say it is done with us before the QP goes. */
  uint8_t b;
  if (rc == 0 && rpc_recv_byte(fd, &b, RPC_WAIT_S) < 0) rc = -1;
  close(fd);
  rpc_dev_destroy_qp(&s.d);
  ibv_dereg_mr(s.dev_mr);
  ibv_dereg_mr(s.rbufs_mr);
  ibv_dereg_mr(s.reps_mr);
  free(s.dev);
  free(s.rbufs);
  free(s.reps);
  rpc_dev_close(&s.d);
  if (rc == 0) printf(WHO ": served %u I/Os\n", s.served);
  return rc ? 1 : 0;
}
