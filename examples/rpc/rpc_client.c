/* rpc_client.c: an RPC-over-RDMA client that runs its send queue the way
 * the linux-rdma advice in docs/checks.md#sq-overflow says a ULP should
 * (Jason Gunthorpe on linux-rdma, 2015).
 *
 * What it shows:
 *  - a fixed number of RPC slots moving through three pools: IDLE (waiting
 *    for resources: N SQE credits), handed to the upper layer with N credits
 *    reserved, IN_FLIGHT (posted, waiting for the reply);
 *  - SQE credits tracked directly (struct sq_credits in rpc_common.c),
 *    checked before every post, returned when a polled completion retires
 *    WRs (a signaled completion retires every earlier WR of the SQ);
 *  - signaling at the 1/2 mark of the SQ and whenever the next slot could not
 *    get its N credits (which includes the WR that fills the SQ);
 *  - receives posted ahead (one per slot plus slack), reposted as they
 *    complete; CQs sized for every signaled send and every posted receive;
 *  - send buffers indexed by WR number: WR k uses buffer k % depth, which WR
 *    k - depth used; the credit check guarantees that WR was retired, i.e.
 *    its completion was polled, before the buffer is written again;
 *  - teardown: retire every WR, destroy the QP, deregister, then free.
 *
 * usage: rpc_client -p PORT [--mode M] [-n N] [-d DEV] HOST
 * --mode plants one classic bug (see rpc_common.h, "BUG(<mode>)" below); every wait has a deadline,
 * so a bug that stops progress ends the run with a message and exit status 1. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc_common.h"

#define WHO "rpc_client"
#define RECV_TAG (1ull << 63) /* receive wr_ids: tag | buffer index; send wr_ids: WR number */

enum slot_state { SLOT_IDLE, SLOT_IN_FLIGHT };

struct slot {
  enum slot_state state;
  uint32_t id;      /* the RPC it carries */
  uint64_t req_seq; /* the WR number of its request SEND */
  uint64_t psum;    /* what the reply must say */
  uint64_t wsum;
};

struct client {
  enum rpc_mode mode;
  uint32_t n, issued, done;
  struct rpc_dev d;
  struct sq_credits sq;
  struct rpc_conn_info remote;
  int tcp;
  /* Send buffers: `depth` entries of RPC_WRITE_MAX bytes, entry k % depth for WR k; one more entry
   * is the staging buffer of the buffer-modified-in-flight bug. */
  uint8_t *ring;
  size_t ring_len;
  struct ibv_mr *ring_mr;
  uint8_t *rbufs; /* RPC_RECVS receive buffers of RPC_MSG_MAX bytes */
  struct ibv_mr *rbufs_mr;
  struct slot slots[RPC_SLOTS];
};

static int post_recv(struct client *c, uint32_t idx) {
  struct ibv_sge sge = {.addr = (uintptr_t)(c->rbufs + (size_t)idx * RPC_MSG_MAX),
                        .length = RPC_MSG_MAX,
                        .lkey = c->rbufs_mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = RECV_TAG | idx, .sg_list = &sge, .num_sge = 1}, *bad;
  int rc = ibv_post_recv(c->d.qp, &wr, &bad);
  if (rc) RPC_LOG(WHO, "ibv_post_recv: %s", strerror(rc));
  return rc ? -1 : 0;
}

/* The send buffer of WR `seq`.  It was last used by WR seq - depth, which
 * the credit check before the post guarantees is retired. */
static uint8_t *send_buf(struct client *c, uint64_t seq) {
  if (c->mode != MODE_SQ_OVERFLOW) /* BUG(sq-overflow) keeps no books to check */
    assert(seq < c->sq.retired + c->sq.depth);
  return c->ring + (size_t)(seq % c->sq.depth) * RPC_WRITE_MAX;
}

static int handle_reply(struct client *c, const struct ibv_wc *wc) {
  uint32_t idx = (uint32_t)(wc->wr_id & ~RECV_TAG);
  struct rpc_rep rep;
  if (wc->byte_len != sizeof(rep)) {
    RPC_LOG(WHO, "reply of %u bytes, expected %zu", wc->byte_len, sizeof(rep));
    return -1;
  }
  memcpy(&rep, c->rbufs + (size_t)idx * RPC_MSG_MAX, sizeof(rep));
  /* The buffer is consumed: put it back on the RQ right away. */
  if (post_recv(c, idx)) return -1;
  struct slot *s = rep.slot < RPC_SLOTS ? &c->slots[rep.slot] : NULL;
  if (rep.magic != RPC_REP_MAGIC || !s || s->state != SLOT_IN_FLIGHT || rep.id != s->id) {
    RPC_LOG(WHO, "unexpected reply (magic %#x, id %u, slot %u)", rep.magic, rep.id, rep.slot);
    return -1;
  }
  if (rep.status != RPC_ST_OK || rep.psum != s->psum || rep.wsum != s->wsum) {
    RPC_LOG(WHO, "RPC %u: bad reply: status %u, payload hash %s, written-data hash %s", rep.id, rep.status,
            rep.psum == s->psum ? "ok" : "WRONG", rep.wsum == s->wsum ? "ok" : "WRONG");
    return -1;
  }
  if (c->mode == MODE_REPLY_BEFORE_SEND) rpc_bug_scrub(send_buf(c, s->req_seq)); /* BUG(reply-before-send) */
  /* The slot's write region on the server is free again (the server read
   * it before replying); its send buffers are covered by the SQE credits. */
  s->state = SLOT_IDLE;
  c->done++;
  return 0;
}

/* Polls one CQ once; returns completions handled or -1.  A completion may be
 * a send or a receive whichever CQ it came from (cq-overrun mode shares one). */
static int poll_cq(struct client *c, struct ibv_cq *cq) {
  struct ibv_wc wc[16];
  int n = ibv_poll_cq(cq, 16, wc);
  if (n < 0) {
    RPC_LOG(WHO, "ibv_poll_cq failed");
    return -1;
  }
  for (int i = 0; i < n; i++) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      RPC_LOG(WHO, "completion error: %s (wr_id %#llx)", ibv_wc_status_str(wc[i].status),
              (unsigned long long)wc[i].wr_id);
      return -1;
    }
    if (wc[i].wr_id & RECV_TAG) {
      if (handle_reply(c, &wc[i])) return -1;
    } else {
      sq_retire(&c->sq, wc[i].wr_id); /* credits come back at completion time */
    }
  }
  return n;
}

/* Seed 000, pool 3 -> pool 1: wait (bounded) until N credits are free. */
static int wait_for_credits(struct client *c) {
  double end = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  while (sq_free(&c->sq) < c->sq.per_rpc) {
    int n = poll_cq(c, c->d.scq);
    if (n < 0) return -1;
    if (n > 0) {
      idle = 0;
      continue;
    }
    if (rpc_now() > end) {
      RPC_LOG(WHO,
              "no SQE credits for %.0f s: %u of %u SQEs hold unretired WRs and no completion comes "
              "(an SQ with no signaled WR outstanding never drains)",
              RPC_WAIT_S, sq_used(&c->sq), c->sq.depth);
      return -1;
    }
    rpc_backoff(&idle);
  }
  return 0;
}

/* The upper layer: issue RPC `id` on slot `si`, which holds `held` credits. */
static int issue_rpc(struct client *c, uint32_t si, uint32_t id, uint32_t held) {
  struct slot *s = &c->slots[si];
  const uint32_t wlen = rpc_write_len(id), plen = rpc_payload_len(id);
  const uint32_t k = wlen ? 2 : 1; /* SQEs this RPC really needs */
  const bool last = id == c->n - 1;
  struct ibv_sge sge[2];
  struct ibv_send_wr wr[2], *bad = NULL;
  memset(wr, 0, sizeof(wr));

  sq_check_post(&c->sq, k, held); /* the invariant, before every post */

  uint32_t i = 0;
  s->wsum = rpc_hash(NULL, 0);
  if (wlen) { /* bulk data first: RDMA WRITE into the slot's region on the server */
    uint64_t seq = c->sq.posted + i;
    uint8_t *buf = send_buf(c, seq);
    rpc_fill(buf, wlen, id, 1);
    s->wsum = rpc_hash(buf, wlen);
    sge[i] = (struct ibv_sge){.addr = (uintptr_t)buf, .length = wlen, .lkey = c->ring_mr->lkey};
    wr[i].wr_id = seq;
    wr[i].opcode = IBV_WR_RDMA_WRITE;
    wr[i].wr.rdma.remote_addr = c->remote.addr + (uint64_t)si * RPC_WRITE_MAX;
    wr[i].wr.rdma.rkey = c->remote.rkey;
    wr[i].send_flags = sq_signal_flag(&c->sq, i, held, false);
    i++;
  }
  uint64_t seq = c->sq.posted + i;
  uint8_t *buf = send_buf(c, seq);
  if (c->mode == MODE_BUFFER_MODIFIED_IN_FLIGHT)
    buf = c->ring + c->ring_len - RPC_WRITE_MAX; /* BUG(buffer-modified-in-flight): one staging buffer */
  struct rpc_req q = {.magic = RPC_REQ_MAGIC,
                      .id = id,
                      .slot = (uint16_t)si,
                      .flags = last ? RPC_FLAG_LAST : 0,
                      .len = plen,
                      .wlen = wlen,
                      .wsum = s->wsum};
  memcpy(buf, &q, sizeof(q));
  rpc_fill(buf + sizeof(q), plen, id, 0);
  s->psum = rpc_hash(buf + sizeof(q), plen);
  sge[i] = (struct ibv_sge){
      .addr = (uintptr_t)buf, .length = (uint32_t)sizeof(q) + plen, .lkey = c->ring_mr->lkey};
  wr[i].wr_id = seq;
  wr[i].opcode = IBV_WR_SEND;
  wr[i].send_flags = sq_signal_flag(&c->sq, i, held, last);
  for (uint32_t j = 0; j <= i; j++) {
    wr[j].sg_list = &sge[j];
    wr[j].num_sge = 1;
    wr[j].next = j < i ? &wr[j + 1] : NULL;
  }

  int rc = ibv_post_send(c->d.qp, &wr[0], &bad);
  if (rc) {
    RPC_LOG(WHO, "RPC %u: ibv_post_send: %s (%u WRs unretired, max_send_wr %u)", id, strerror(rc),
            sq_used(&c->sq), c->sq.depth);
    return -1;
  }
  sq_commit(&c->sq, k, held); /* k SQEs now in use, held - k returned */
  s->id = id, s->req_seq = seq;
  s->state = SLOT_IN_FLIGHT;

  if (c->mode == MODE_BUFFER_MODIFIED_IN_FLIGHT) {
    /* BUG(buffer-modified-in-flight): "the request is on the wire", so the
     * staging buffer is filled with the next request right away -- before
     * the completion that retires this SEND was polled. */
    struct rpc_req next = q;
    next.id = id + 1;
    next.len = rpc_payload_len(id + 1);
    memcpy(buf, &next, sizeof(next));
    rpc_fill(buf + sizeof(next), next.len, id + 1, 0);
  }
  return 0;
}

static int run_rpcs(struct client *c) {
  double last_progress = rpc_now();
  unsigned idle = 0;
  while (c->done < c->n) {
    /* Hand idle slots to the upper layer, each with N SQE credits. */
    for (uint32_t si = 0; si < RPC_SLOTS && c->issued < c->n; si++) {
      if (c->slots[si].state != SLOT_IDLE) continue;
      if (c->mode == MODE_SQ_OVERFLOW) {
        /* BUG(sq-overflow): a reply came back, so the slot is reused at once;
         * no credit check, and the send CQ is never polled (the reply is
         * taken as proof that the SEND is done; it is not). */
        c->sq.reserved += c->sq.per_rpc;
      } else if (!sq_reserve(&c->sq)) {
        if (wait_for_credits(c)) return -1;
        if (!sq_reserve(&c->sq)) return -1; /* cannot happen: credits are free now */
      }
      if (issue_rpc(c, si, c->issued, c->sq.per_rpc)) return -1;
      c->issued++;
      last_progress = rpc_now();
    }
    int n = poll_cq(c, c->d.rcq);
    if (n < 0) return -1;
    if (n > 0) {
      idle = 0;
      last_progress = rpc_now();
      continue;
    }
    if (rpc_now() - last_progress > RPC_WAIT_S) {
      RPC_LOG(WHO, "no reply for %.0f s (%u of %u RPCs done)", RPC_WAIT_S, c->done, c->n);
      return -1;
    }
    rpc_backoff(&idle);
  }
  return 0;
}

/* Every WR retired: the last WR posted was signaled, so its completion
 * retires all the others. */
static int drain_sq(struct client *c) {
  double end = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  while (sq_used(&c->sq) > 0 && sq_completion_pending(&c->sq)) {
    int n = poll_cq(c, c->d.scq);
    if (n < 0) return -1;
    if (n == 0) {
      if (rpc_now() > end) {
        RPC_LOG(WHO, "%u WRs never retired", sq_used(&c->sq));
        return -1;
      }
      rpc_backoff(&idle);
    }
  }
  if (sq_used(&c->sq) > 0) { /* cannot happen: the last WR posted is signaled */
    RPC_LOG(WHO, "%u unsignaled WRs at the end of the SQ", sq_used(&c->sq));
    return -1;
  }
  return 0;
}

static void usage(void) {
  fprintf(stderr, "usage: rpc_client -p PORT [--mode M] [-n N] [-d DEV] HOST\nmodes:");
  for (int m = 0; m < MODE_COUNT; m++) fprintf(stderr, " %s", rpc_mode_names[m]);
  fputc('\n', stderr);
  exit(2);
}

int main(int argc, char **argv) {
  struct client cl;
  memset(&cl, 0, sizeof(cl));
  struct client *c = &cl;
  c->n = 2000;
  c->tcp = -1;
  int port = 0;
  const char *devname = NULL;
  static const struct option opts[] = {
      {"port", required_argument, 0, 'p'},  {"mode", required_argument, 0, 'm'},
      {"iters", required_argument, 0, 'n'}, {"dev", required_argument, 0, 'd'},
      {"help", no_argument, 0, 'h'},        {0, 0, 0, 0}};
  for (int o; (o = getopt_long(argc, argv, "p:m:n:d:h", opts, NULL)) != -1;) {
    switch (o) {
      case 'p':
        port = atoi(optarg);
        break;
      case 'n':
        c->n = (uint32_t)strtoul(optarg, NULL, 0);
        break;
      case 'd':
        devname = optarg;
        break;
      case 'm': {
        int m = rpc_parse_mode(optarg);
        if (m < 0) usage();
        c->mode = (enum rpc_mode)m;
        break;
      }
      default:
        usage();
    }
  }
  if (port <= 0 || optind != argc - 1 || c->n == 0) usage();
  const char *host = argv[optind];

  /* Seed 000: "size the SQ length to be at least 2*N*(the # of RPC slots)". */
  const uint32_t want_sq = 2 * RPC_CLIENT_WRS_PER_RPC * RPC_SLOTS;
  /* CQs: every WR may be signaled, so the send CQ holds the whole SQ; the receive CQ holds every posted
   * receive.  BUG(cq-overrun): one CQ for both, sized for the receives only (reply-before-send: for all). */
  const bool shared = c->mode == MODE_CQ_OVERRUN || c->mode == MODE_REPLY_BEFORE_SEND;
  const int rcqe = RPC_RECVS + (c->mode == MODE_REPLY_BEFORE_SEND ? (int)want_sq : 0);
  if (rpc_dev_open(&c->d, devname, want_sq, RPC_RECVS, (int)want_sq, rcqe, shared)) return 1;
  c->sq =
      (struct sq_credits){.depth = c->d.cap.max_send_wr, .per_rpc = RPC_CLIENT_WRS_PER_RPC, .mode = c->mode};
  if (c->sq.depth < want_sq) {
    RPC_LOG(WHO, "max_send_wr %u < %u", c->sq.depth, want_sq);
    return 1;
  }
  if (!shared && c->d.scq->cqe < (int)c->sq.depth) { /* more WRs than asked: grow the send CQ to match */
    RPC_LOG(WHO, "send CQ has %d entries for an SQ of %u", c->d.scq->cqe, c->sq.depth);
    return 1;
  }

  c->ring_len = ((size_t)c->sq.depth + 1) * RPC_WRITE_MAX;
  c->ring = rpc_alloc_pages(c->ring_len);
  c->rbufs = rpc_alloc_pages((size_t)RPC_RECVS * RPC_MSG_MAX);
  if (!c->ring || !c->rbufs) return RPC_LOG(WHO, "out of memory"), 1;
  memset(c->ring, 0, c->ring_len);
  memset(c->rbufs, 0, (size_t)RPC_RECVS * RPC_MSG_MAX);
  c->ring_mr = ibv_reg_mr(c->d.pd, c->ring, c->ring_len, 0);
  c->rbufs_mr = ibv_reg_mr(c->d.pd, c->rbufs, (size_t)RPC_RECVS * RPC_MSG_MAX, IBV_ACCESS_LOCAL_WRITE);
  if (!c->ring_mr || !c->rbufs_mr) return perror("ibv_reg_mr"), 1;

  /* Receives go up before the peer can send: one per slot plus slack. */
  for (uint32_t i = 0; i < RPC_RECVS; i++)
    if (post_recv(c, i)) return 1;

  c->tcp = rpc_tcp_connect(host, port, 10.0);
  if (c->tcp < 0) return 1;
  struct rpc_conn_info local;
  rpc_dev_local_info(&c->d, &local);
  if (rpc_send_info(c->tcp, &local) || rpc_recv_info(c->tcp, &c->remote, 10.0)) return 1;
  if (rpc_dev_connect(&c->d, &c->remote)) return 1;
  /* Send nothing before the server's QP can receive (RTR): it says so. */
  uint8_t ready;
  if (rpc_recv_byte(c->tcp, &ready, 10.0) != 1 || ready != 'R') return RPC_LOG(WHO, "server not ready"), 1;
  RPC_LOG(WHO, "mode %s: %u RPCs, %d slots, max_send_wr %u, %d receives", rpc_mode_names[c->mode], c->n,
          RPC_SLOTS, c->sq.depth, RPC_RECVS);

  int rc = run_rpcs(c);
  if (rc) {
    /* A planted bug stopped progress: say so and leave; exiting releases
     * everything (a clean teardown would need the WRs that never retire). */
    RPC_LOG(WHO, "FAILED after %u of %u RPCs (mode %s)", c->done, c->n, rpc_mode_names[c->mode]);
    return 1;
  }

  /* Teardown, in the only safe order. */
  if (c->mode == MODE_DEREG_IN_FLIGHT) {
    /* BUG(dereg-in-flight): all replies are in, so "the sends are done";
     * but the completions that retire them were not polled yet. */
    if (ibv_dereg_mr(c->ring_mr)) perror("ibv_dereg_mr");
    c->ring_mr = NULL;
  }
  if (drain_sq(c)) return 1; /* 1. every WR retired */
  uint8_t bye = 'B';
  if (write(c->tcp, &bye, 1) != 1) perror("write"); /* 2. the server may go */
  rpc_dev_destroy_qp(&c->d);                        /* 3. QP (and its posted receives), CQs */
  if (c->ring_mr && ibv_dereg_mr(c->ring_mr)) perror("ibv_dereg_mr"); /* 4. MRs: nothing references them */
  if (ibv_dereg_mr(c->rbufs_mr)) perror("ibv_dereg_mr");
  free(c->ring); /* 5. memory, after deregistering */
  free(c->rbufs);
  rpc_dev_close(&c->d);
  close(c->tcp);
  printf("rpc_client: %u RPCs ok (mode %s)\n", c->done, rpc_mode_names[c->mode]);
  return 0;
}
