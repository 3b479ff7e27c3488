/* blk_client.c: the initiator of examples/blk (blk_common.h): n I/Os to
 * the server's device, up to BLK_SLOTS at once, each through its slot's
 * type-2 memory window.
 *
 * One I/O on slot s:
 *   1. the window is invalid (never bound, or its last invalidation was
 *      seen complete); write the data into the slot's buffer (BLK_WRITE);
 *   2. post, in one chain, BIND_MW (the window over the buffer, REMOTE_READ
 *      for a write, REMOTE_WRITE for a read, with a new key:
 *      ibv_inc_rkey of the last one) and the request SEND carrying that
 *      key;
 *   3. the reply arrives: with IBV_WC_WITH_INV naming the key, the server
 *      has invalidated the window (default); with --inv local, post a
 *      signaled LOCAL_INV and wait for its completion;
 *   4. only then check the data (BLK_READ) and give the slot back.
 * SQ credits as in examples/rpc: an I/O reserves 3 SQEs (bind, send, local
 * invalidate), and the invalidation is always signaled (linux-rdma advice,
 * docs/checks.md#invalidate-in-flight: "the INVALIDATE should be signaled
 * and RPC processing should resume from the SCQ side").  Teardown: every window invalid and every WR retired,
 * destroy the QP, deallocate the windows, deregister, free.
 *
 * usage: blk_client -p PORT [--mode M] [--inv server|local] [-n N] [-d DEV] HOST */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "blk_common.h"

#define WHO "blk_client"
#define RECV_TAG (1ull << 63)
#define NO_WR UINT64_MAX

enum slot_state {
  SLOT_IDLE,         /* window invalid: the buffer is ours */
  SLOT_IN_FLIGHT,    /* bound, request sent, waiting for the reply */
  SLOT_INVALIDATING, /* reply in, our LOCAL_INV posted, waiting for it */
};

struct slot {
  enum slot_state state;
  struct ibv_mw *mw;
  uint32_t key;        /* the window's current (or last) rkey */
  uint32_t id;         /* the I/O it carries */
  uint64_t inv_seq;    /* WR number of its LOCAL_INV */
  uint64_t rep_sum;    /* BLK_READ: what the buffer must hash to */
  struct blk_req *req; /* its request buffer */
  uint8_t *buf;        /* its data buffer */
};

struct client {
  enum blk_mode mode;
  bool local_inv;
  uint32_t n, issued, done;
  struct rpc_dev d;
  struct sq_credits sq;
  uint8_t *data; /* BLK_SLOTS data buffers */
  struct ibv_mr *data_mr;
  struct blk_req *reqs; /* BLK_SLOTS request buffers */
  struct ibv_mr *reqs_mr;
  uint8_t *rbufs; /* BLK_RECVS reply buffers */
  struct ibv_mr *rbufs_mr;
  struct slot slots[BLK_SLOTS];
};

static int post_recv(struct client *c, uint32_t idx) {
  struct ibv_sge sge = {.addr = (uintptr_t)(c->rbufs + (size_t)idx * sizeof(struct blk_rep)),
                        .length = sizeof(struct blk_rep),
                        .lkey = c->rbufs_mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = RECV_TAG | idx, .sg_list = &sge, .num_sge = 1}, *bad;
  int rc = ibv_post_recv(c->d.qp, &wr, &bad);
  if (rc) RPC_LOG(WHO, "ibv_post_recv: %s", strerror(rc));
  return rc ? -1 : 0;
}

/* Steps 1-2: bind the slot's window over its buffer and send the request. */
static int start_io(struct client *c, struct slot *s) {
  const uint32_t id = c->issued;
  const enum blk_op op = blk_io_op(id);
  const uint32_t len = blk_io_len(id);
  const bool last = id + 1 == c->n;
  s->id = id;
  if (op == BLK_WRITE)
    rpc_fill(s->buf, len, id, 1);
  else
    memset(s->buf, 0, len);

  /* A new key for every binding: a stale rkey the server still holds must
   * not reach this I/O's memory. */
  uint32_t key = ibv_inc_rkey(s->key);
  if (c->mode == BLK_RKEY_NOT_BUMPED && id >= BLK_SLOTS)
    key = s->key; /* BUG(rkey-not-bumped): the last I/O's key, valid again */
  struct ibv_send_wr wr[2];
  memset(wr, 0, sizeof(wr));
  wr[0].wr_id = c->sq.posted;
  wr[0].opcode = IBV_WR_BIND_MW;
  wr[0].send_flags = sq_signal_flag(&c->sq, 0, 3, false);
  wr[0].bind_mw.mw = s->mw;
  wr[0].bind_mw.rkey = key;
  wr[0].bind_mw.bind_info = (struct ibv_mw_bind_info){
      .mr = c->data_mr,
      .addr = (uintptr_t)s->buf,
      .length = len,
      .mw_access_flags = op == BLK_WRITE ? IBV_ACCESS_REMOTE_READ : IBV_ACCESS_REMOTE_WRITE,
  };
  wr[0].next = &wr[1];

  *s->req = (struct blk_req){
      .magic = BLK_REQ_MAGIC,
      .id = id,
      .slot = (uint16_t)(s - c->slots),
      .op = (uint16_t)op,
      .flags = (c->local_inv ? 0 : BLK_F_SERVER_INV) | (last ? BLK_F_LAST : 0),
      .len = len,
      .offset = blk_io_offset(id),
      .addr = (uintptr_t)s->buf,
      .rkey = key,
      .sum = op == BLK_WRITE ? rpc_hash(s->buf, len) : 0,
  };
  /* BUG(destroy-in-use), BUG(free-registered): the last I/O's window is
   * left valid ("we are tearing down anyway"). */
  if (last && (c->mode == BLK_DESTROY_IN_USE || c->mode == BLK_FREE_REGISTERED))
    s->req->flags &= ~BLK_F_SERVER_INV;
  struct ibv_sge sge = {.addr = (uintptr_t)s->req, .length = sizeof(*s->req), .lkey = c->reqs_mr->lkey};
  wr[1].wr_id = c->sq.posted + 1;
  wr[1].opcode = IBV_WR_SEND;
  wr[1].sg_list = &sge;
  wr[1].num_sge = 1;
  wr[1].send_flags = sq_signal_flag(&c->sq, 1, 3, false);

  sq_check_post(&c->sq, 2, 3);
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(c->d.qp, wr, &bad);
  if (rc) return RPC_LOG(WHO, "ibv_post_send(bind + request): %s", strerror(rc)), -1;
  sq_commit(&c->sq, 2, 2); /* one credit stays held for the invalidation */
  s->key = key;
  s->state = SLOT_IN_FLIGHT;
  c->issued++;
  return 0;
}

/* Step 4: the window is invalid; the buffer is ours again. */
static int finish_io(struct client *c, struct slot *s) {
  if (blk_io_op(s->id) == BLK_READ && rpc_hash(s->buf, blk_io_len(s->id)) != s->rep_sum)
    return RPC_LOG(WHO, "I/O %u: the data read is not what the server wrote", s->id), -1;
  s->state = SLOT_IDLE;
  c->done++;
  return 0;
}

/* Step 3. */
static int handle_reply(struct client *c, const struct ibv_wc *wc) {
  const uint32_t idx = (uint32_t)(wc->wr_id & ~RECV_TAG);
  struct blk_rep rep;
  memcpy(&rep, c->rbufs + (size_t)idx * sizeof(rep), sizeof(rep));
  if (post_recv(c, idx)) return -1;
  if (rep.magic != BLK_REP_MAGIC || rep.slot >= BLK_SLOTS) return RPC_LOG(WHO, "malformed reply"), -1;
  struct slot *s = &c->slots[rep.slot];
  if (s->state != SLOT_IN_FLIGHT || rep.id != s->id)
    return RPC_LOG(WHO, "unexpected reply for I/O %u", rep.id), -1;
  if (rep.status != BLK_ST_OK)
    return RPC_LOG(WHO, "I/O %u failed on the server: status %u", rep.id, rep.status), -1;
  s->rep_sum = rep.sum;
  if (wc->wc_flags & IBV_WC_WITH_INV) {
    if (wc->invalidated_rkey != s->key)
      return RPC_LOG(WHO, "I/O %u: the server invalidated rkey 0x%x, not 0x%x", rep.id, wc->invalidated_rkey,
                     s->key),
             -1;
    c->sq.reserved -= 1; /* the invalidation's credit is not needed */
    return finish_io(c, s);
  }
  if (!c->local_inv && !(c->mode == BLK_DESTROY_IN_USE || c->mode == BLK_FREE_REGISTERED))
    return RPC_LOG(WHO, "I/O %u: the reply did not invalidate the window", rep.id), -1;
  if (c->mode == BLK_DESTROY_IN_USE || c->mode == BLK_FREE_REGISTERED) {
    if (!c->local_inv && rep.id + 1 == c->n) { /* the planted last I/O: left valid */
      c->sq.reserved -= 1;
      return finish_io(c, s);
    }
  }
  struct ibv_send_wr wr = {
      .wr_id = c->sq.posted,
      .opcode = IBV_WR_LOCAL_INV,
      .send_flags = sq_signal_flag(&c->sq, 0, 1, true), /* resume from its completion */
      .invalidate_rkey = s->key,
  };
  sq_check_post(&c->sq, 1, 1);
  struct ibv_send_wr *bad;
  int rc = ibv_post_send(c->d.qp, &wr, &bad);
  if (rc) return RPC_LOG(WHO, "ibv_post_send(LOCAL_INV): %s", strerror(rc)), -1;
  s->inv_seq = c->sq.posted;
  sq_commit(&c->sq, 1, 1);
  s->state = SLOT_INVALIDATING;
  if (c->mode == BLK_INVALIDATE_IN_FLIGHT)
    return finish_io(c, s); /* BUG(invalidate-in-flight): reused before the LOCAL_INV completed */
  return 0;
}

static int poll_send(struct client *c) {
  struct ibv_wc wc[8];
  int n = ibv_poll_cq(c->d.scq, 8, wc);
  if (n < 0) return RPC_LOG(WHO, "ibv_poll_cq failed"), -1;
  for (int i = 0; i < n; i++) {
    if (wc[i].status != IBV_WC_SUCCESS)
      return RPC_LOG(WHO, "send WR %llu failed: %s", (unsigned long long)wc[i].wr_id,
                     ibv_wc_status_str(wc[i].status)),
             -1;
    sq_retire(&c->sq, wc[i].wr_id);
  }
  for (int i = 0; i < BLK_SLOTS; i++) {
    struct slot *s = &c->slots[i];
    if (s->state == SLOT_INVALIDATING && c->sq.retired > s->inv_seq && finish_io(c, s)) return -1;
  }
  return n;
}

static int run(struct client *c) {
  double deadline = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  while (c->done < c->n || c->sq.retired < c->sq.posted) {
    bool progress = false;
    for (int i = 0; i < BLK_SLOTS && c->issued < c->n; i++) {
      struct slot *s = &c->slots[i];
      if (s->state != SLOT_IDLE || !sq_reserve(&c->sq)) continue;
      if (start_io(c, s)) return -1;
      progress = true;
    }
    int n = poll_send(c);
    if (n < 0) return -1;
    progress |= n > 0;
    struct ibv_wc wc;
    n = ibv_poll_cq(c->d.rcq, 1, &wc);
    if (n < 0) return RPC_LOG(WHO, "ibv_poll_cq failed"), -1;
    if (n == 1) {
      if (wc.status != IBV_WC_SUCCESS)
        return RPC_LOG(WHO, "receive failed: %s", ibv_wc_status_str(wc.status)), -1;
      if (handle_reply(c, &wc)) return -1;
      progress = true;
    }
    if (progress) {
      idle = 0;
      deadline = rpc_now() + RPC_WAIT_S;
    } else if (rpc_now() > deadline) {
      return RPC_LOG(WHO, "no progress for %.0f s (%u of %u I/Os done)", RPC_WAIT_S, c->done, c->n), -1;
    } else {
      rpc_backoff(&idle);
    }
  }
  return 0;
}

static void teardown(struct client *c) {
  rpc_dev_destroy_qp(&c->d);
  if (c->mode == BLK_FREE_REGISTERED) {
    free(c->data); /* BUG(free-registered): a window still grants the server access to it */
    c->data = NULL;
  }
  if (c->mode == BLK_DESTROY_IN_USE) {
    /* BUG(destroy-in-use): the MR goes before the window bound to it. */
    if (ibv_dereg_mr(c->data_mr) == 0)
      c->data_mr = NULL;
    else
      RPC_LOG(WHO, "ibv_dereg_mr: %s (a window is still bound to it)", strerror(errno));
  }
  for (int i = 0; i < BLK_SLOTS; i++)
    if (c->slots[i].mw && ibv_dealloc_mw(c->slots[i].mw)) perror("ibv_dealloc_mw");
  if (c->data_mr && ibv_dereg_mr(c->data_mr)) perror("ibv_dereg_mr");
  if (c->reqs_mr && ibv_dereg_mr(c->reqs_mr)) perror("ibv_dereg_mr");
  if (c->rbufs_mr && ibv_dereg_mr(c->rbufs_mr)) perror("ibv_dereg_mr");
  free(c->data);
  free(c->reqs);
  free(c->rbufs);
  rpc_dev_close(&c->d);
}

int main(int argc, char **argv) {
  struct client c;
  memset(&c, 0, sizeof(c));
  c.n = 200;
  int port = 0;
  const char *devname = NULL;
  static const struct option longs[] = {
      {"mode", required_argument, NULL, 'm'}, {"inv", required_argument, NULL, 'i'}, {NULL, 0, NULL, 0}};
  const char *usage = "usage: " WHO " -p PORT [--mode M] [--inv server|local] [-n N] [-d DEV] HOST\n";
  int o, m;
  while ((o = getopt_long(argc, argv, "p:n:d:m:i:", longs, NULL)) != -1) {
    switch (o) {
      case 'p':
        port = atoi(optarg);
        break;
      case 'n':
        c.n = (uint32_t)strtoul(optarg, NULL, 0);
        break;
      case 'd':
        devname = optarg;
        break;
      case 'm':
        if ((m = blk_parse_mode(optarg)) < 0) return fprintf(stderr, WHO ": unknown mode %s\n", optarg), 2;
        c.mode = (enum blk_mode)m;
        break;
      case 'i':
        if (strcmp(optarg, "local") && strcmp(optarg, "server"))
          return fprintf(stderr, WHO ": --inv server|local\n"), 2;
        c.local_inv = strcmp(optarg, "local") == 0;
        break;
      default:
        return fputs(usage, stderr), 2;
    }
  }
  if (port <= 0 || optind + 1 != argc || c.n == 0) return fputs(usage, stderr), 2;
  /* invalidate-in-flight is a local invalidation's bug. */
  if (c.mode == BLK_INVALIDATE_IN_FLIGHT) c.local_inv = true;

  if (rpc_dev_open(&c.d, devname, BLK_SQ_DEPTH, BLK_RECVS, BLK_SQ_DEPTH, BLK_RECVS, false)) return 1;
  c.sq = (struct sq_credits){.depth = c.d.cap.max_send_wr, .per_rpc = 3, .mode = MODE_CORRECT};
  c.data = rpc_alloc_pages(BLK_SLOTS * BLK_IO_MAX);
  c.reqs = rpc_alloc_pages(BLK_SLOTS * sizeof(struct blk_req));
  c.rbufs = rpc_alloc_pages(BLK_RECVS * sizeof(struct blk_rep));
  if (!c.data || !c.reqs || !c.rbufs) return RPC_LOG(WHO, "out of memory"), 1;
  /* No remote access on the MR itself: only a bound window grants it. */
  c.data_mr = ibv_reg_mr(c.d.pd, c.data, BLK_SLOTS * BLK_IO_MAX, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
  c.reqs_mr = ibv_reg_mr(c.d.pd, c.reqs, BLK_SLOTS * sizeof(struct blk_req), 0);
  c.rbufs_mr = ibv_reg_mr(c.d.pd, c.rbufs, BLK_RECVS * sizeof(struct blk_rep), IBV_ACCESS_LOCAL_WRITE);
  if (!c.data_mr || !c.reqs_mr || !c.rbufs_mr) return perror("ibv_reg_mr"), 1;
  for (int i = 0; i < BLK_SLOTS; i++) {
    struct slot *s = &c.slots[i];
    s->mw = ibv_alloc_mw(c.d.pd, IBV_MW_TYPE_2);
    if (!s->mw) return perror("ibv_alloc_mw(type 2)"), 1;
    s->key = s->mw->rkey;
    s->req = &c.reqs[i];
    s->buf = c.data + (size_t)i * BLK_IO_MAX;
  }
  for (uint32_t i = 0; i < BLK_RECVS; i++)
    if (post_recv(&c, i)) return 1;

  int fd = rpc_tcp_connect(argv[optind], port, 30.0);
  if (fd < 0) return 1;
  struct rpc_conn_info me, peer;
  rpc_dev_local_info(&c.d, &me);
  uint8_t go;
  if (rpc_recv_info(fd, &peer, RPC_WAIT_S) || rpc_send_info(fd, &me) || rpc_dev_connect(&c.d, &peer) ||
      rpc_recv_byte(fd, &go, RPC_WAIT_S) != 1)
    return RPC_LOG(WHO, "connection setup failed"), 1;

  int rc = run(&c);
  if (write(fd, "d", 1) != 1) rc = -1;
  close(fd);
  teardown(&c);
  if (rc == 0)
    printf(WHO ": %u I/Os done, invalidated by the %s\n", c.done, c.local_inv ? "client" : "server");
  return rc ? 1 : 0;
}
