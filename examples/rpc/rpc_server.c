/* rpc_server.c: the RPC-over-RDMA server; the other half of rpc_client.c.
 *
 * What it shows: the same SQE credit accounting on the reply side (one SQE
 * per reply, N = 1), receives posted ahead and reposted as soon as a
 * request is consumed, a remotely writable region per client slot that the
 * client fills with RDMA WRITE before its SEND (RC ordering makes the data
 * visible when the SEND's receive completes), replies built in send buffers
 * indexed by WR number and reused only after their WR retired, and a
 * teardown that retires every WR (or destroys the QP, which halts the send
 * side) before deregistering anything.
 *
 * usage: rpc_server -p PORT [--mode M] [-d DEV]
 * The planted bugs live in the client; the server accepts --mode so that a
 * test passes one mode to both, and always runs correctly.  It serves one
 * client and exits 0 when that client is done or has gone away. */
#define _GNU_SOURCE
#include <errno.h>
#include <getopt.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rpc_common.h"

#define WHO "rpc_server"
#define RECV_TAG (1ull << 63)
#define IDLE_LIMIT_S 30.0 /* a silent, connected client is given up after this */

struct server {
  struct rpc_dev d;
  struct sq_credits sq;
  int tcp;
  uint8_t *ring; /* reply buffers, entry k % depth for WR k */
  struct ibv_mr *ring_mr;
  uint8_t *rbufs; /* RPC_RECVS request buffers */
  struct ibv_mr *rbufs_mr;
  uint8_t *wregion; /* RPC_SLOTS regions of RPC_WRITE_MAX, written by the client */
  struct ibv_mr *wregion_mr;
  uint32_t served;
  bool last_seen;
  bool broken; /* an error completion: the QP is in ERR */
};

static int post_recv(struct server *s, uint32_t idx) {
  struct ibv_sge sge = {.addr = (uintptr_t)(s->rbufs + (size_t)idx * RPC_MSG_MAX),
                        .length = RPC_MSG_MAX,
                        .lkey = s->rbufs_mr->lkey};
  struct ibv_recv_wr wr = {.wr_id = RECV_TAG | idx, .sg_list = &sge, .num_sge = 1}, *bad;
  int rc = ibv_post_recv(s->d.qp, &wr, &bad);
  if (rc) RPC_LOG(WHO, "ibv_post_recv: %s", strerror(rc));
  return rc ? -1 : 0;
}

static int poll_send_cq(struct server *s) {
  struct ibv_wc wc[16];
  int n = ibv_poll_cq(s->d.scq, 16, wc);
  if (n < 0) return RPC_LOG(WHO, "ibv_poll_cq failed"), -1;
  for (int i = 0; i < n; i++) {
    if (wc[i].status != IBV_WC_SUCCESS) {
      RPC_LOG(WHO, "send completion error: %s (WR %llu)", ibv_wc_status_str(wc[i].status),
              (unsigned long long)wc[i].wr_id);
      s->broken = true;
      return -1;
    }
    sq_retire(&s->sq, wc[i].wr_id);
  }
  return n;
}

static int reply(struct server *s, const struct rpc_rep *rep, bool last) {
  /* One SQE credit per reply; if none is free, retire WRs first (bounded:
   * the signaling policy guarantees a signaled WR is outstanding). */
  double end = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  while (!sq_reserve(&s->sq)) {
    int n = poll_send_cq(s);
    if (n < 0) return -1;
    if (n == 0) {
      if (rpc_now() > end) return RPC_LOG(WHO, "no SQE credit for %.0f s", RPC_WAIT_S), -1;
      rpc_backoff(&idle);
    }
  }
  const uint32_t held = s->sq.per_rpc;
  sq_check_post(&s->sq, 1, held);
  uint64_t seq = s->sq.posted;
  assert(seq < s->sq.retired + s->sq.depth); /* WR seq - depth, the buffer's last user, retired */
  uint8_t *buf = s->ring + (size_t)(seq % s->sq.depth) * RPC_MSG_MAX;
  memcpy(buf, rep, sizeof(*rep));
  struct ibv_sge sge = {.addr = (uintptr_t)buf, .length = sizeof(*rep), .lkey = s->ring_mr->lkey};
  struct ibv_send_wr wr = {.wr_id = seq, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
  wr.send_flags = sq_signal_flag(&s->sq, 0, held, last);
  int rc = ibv_post_send(s->d.qp, &wr, &bad);
  if (rc) return RPC_LOG(WHO, "ibv_post_send: %s", strerror(rc)), -1;
  sq_commit(&s->sq, 1, held);
  return 0;
}

static int handle_request(struct server *s, const struct ibv_wc *wc) {
  uint32_t idx = (uint32_t)(wc->wr_id & ~RECV_TAG);
  const uint8_t *buf = s->rbufs + (size_t)idx * RPC_MSG_MAX;
  struct rpc_req q;
  struct rpc_rep rep = {.magic = RPC_REP_MAGIC, .status = RPC_ST_OK};
  memset(&q, 0, sizeof(q));
  if (wc->byte_len >= sizeof(q)) memcpy(&q, buf, sizeof(q));
  rep.id = q.id;
  rep.slot = q.slot;
  if (wc->byte_len < sizeof(q) || q.magic != RPC_REQ_MAGIC || q.len > RPC_PAYLOAD_MAX ||
      sizeof(q) + q.len != wc->byte_len || q.slot >= RPC_SLOTS || q.wlen > RPC_WRITE_MAX) {
    rep.status = RPC_ST_BAD_HEADER;
  } else {
    rep.psum = rpc_hash(buf + sizeof(q), q.len);
    rep.wsum = rpc_hash(s->wregion + (size_t)q.slot * RPC_WRITE_MAX, q.wlen);
    if (rep.wsum != q.wsum) rep.status = RPC_ST_BAD_WRITE;
  }
  if (rep.status != RPC_ST_OK) RPC_LOG(WHO, "request %u: bad request (status %u)", q.id, rep.status);
  /* The request buffer is consumed: back on the RQ before replying, so the
   * client's next request always finds a receive. */
  if (post_recv(s, idx)) return -1;
  bool last = rep.status == RPC_ST_OK && (q.flags & RPC_FLAG_LAST);
  if (reply(s, &rep, last)) return -1;
  s->served++;
  if (last) s->last_seen = true;
  return 0;
}

/* Serve until the client's last request; 1 if the client went away first. */
static int serve(struct server *s) {
  double last_progress = rpc_now();
  unsigned idle = 0;
  while (!s->last_seen) {
    struct ibv_wc wc[16];
    int n = ibv_poll_cq(s->d.rcq, 16, wc);
    if (n < 0) return RPC_LOG(WHO, "ibv_poll_cq failed"), -1;
    for (int i = 0; i < n; i++) {
      if (wc[i].status != IBV_WC_SUCCESS) {
        RPC_LOG(WHO, "receive completion error: %s", ibv_wc_status_str(wc[i].status));
        s->broken = true;
        return -1;
      }
      if (handle_request(s, &wc[i])) return -1;
    }
    if (n > 0) {
      idle = 0;
      last_progress = rpc_now();
      continue;
    }
    if (rpc_peer_readable(s->tcp)) return 1; /* EOF: the client is gone (it writes nothing before the end) */
    if (rpc_now() - last_progress > IDLE_LIMIT_S) {
      RPC_LOG(WHO, "no request for %.0f s", IDLE_LIMIT_S);
      return -1;
    }
    rpc_backoff(&idle);
  }
  return 0;
}

static int drain_sq(struct server *s) {
  double end = rpc_now() + RPC_WAIT_S;
  unsigned idle = 0;
  while (sq_completion_pending(&s->sq) && !s->broken) {
    int n = poll_send_cq(s);
    if (n < 0) return -1;
    if (n == 0) {
      if (rpc_now() > end) return RPC_LOG(WHO, "%u WRs never retired", sq_used(&s->sq)), -1;
      rpc_backoff(&idle);
    }
  }
  /* Normally the last reply was signaled and retired everything.  If the
   * client left early, unsignaled replies may remain: destroying the QP
   * halts them (docs/checks.md#unsignaled-deadlock: "or tearing down the QP and
   * halting the send side"). */
  if (sq_used(&s->sq) == 0) return 0;
  RPC_LOG(WHO, "%u unsignaled replies left; destroying the QP halts them", sq_used(&s->sq));
  return -1;
}

static void usage(void) {
  fprintf(stderr, "usage: rpc_server -p PORT [--mode M] [-d DEV]\n");
  exit(2);
}

int main(int argc, char **argv) {
  struct server sv;
  memset(&sv, 0, sizeof(sv));
  struct server *s = &sv;
  int port = 0;
  const char *devname = NULL;
  static const struct option opts[] = {{"port", required_argument, 0, 'p'},
                                       {"mode", required_argument, 0, 'm'},
                                       {"dev", required_argument, 0, 'd'},
                                       {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  for (int o; (o = getopt_long(argc, argv, "p:m:d:h", opts, NULL)) != -1;) {
    switch (o) {
      case 'p':
        port = atoi(optarg);
        break;
      case 'd':
        devname = optarg;
        break;
      case 'm':
        if (rpc_parse_mode(optarg) < 0) usage(); /* the server always runs correctly */
        break;
      default:
        usage();
    }
  }
  if (port <= 0 || optind != argc) usage();

  int lfd = rpc_tcp_listen(port);
  if (lfd < 0) return 1;
  const uint32_t want_sq =
      2 * RPC_SERVER_WRS_PER_RPC * RPC_SLOTS; /* 2*N*slots, as the linux-rdma advice sizes it */
  if (rpc_dev_open(&s->d, devname, want_sq, RPC_RECVS, (int)want_sq, RPC_RECVS, false)) return 1;
  s->sq = (struct sq_credits){
      .depth = s->d.cap.max_send_wr, .per_rpc = RPC_SERVER_WRS_PER_RPC, .mode = MODE_CORRECT};
  if (s->d.scq->cqe < (int)s->sq.depth) return RPC_LOG(WHO, "send CQ smaller than the SQ"), 1;

  const size_t ring_len = (size_t)s->sq.depth * RPC_MSG_MAX, rlen = (size_t)RPC_RECVS * RPC_MSG_MAX,
               wlen = (size_t)RPC_SLOTS * RPC_WRITE_MAX;
  s->ring = rpc_alloc_pages(ring_len);
  s->rbufs = rpc_alloc_pages(rlen);
  s->wregion = rpc_alloc_pages(wlen);
  if (!s->ring || !s->rbufs || !s->wregion) return RPC_LOG(WHO, "out of memory"), 1;
  memset(s->ring, 0, ring_len);
  memset(s->rbufs, 0, rlen);
  memset(s->wregion, 0, wlen);
  s->ring_mr = ibv_reg_mr(s->d.pd, s->ring, ring_len, 0);
  s->rbufs_mr = ibv_reg_mr(s->d.pd, s->rbufs, rlen, IBV_ACCESS_LOCAL_WRITE);
  s->wregion_mr = ibv_reg_mr(s->d.pd, s->wregion, wlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!s->ring_mr || !s->rbufs_mr || !s->wregion_mr) return perror("ibv_reg_mr"), 1;
  for (uint32_t i = 0; i < RPC_RECVS; i++)
    if (post_recv(s, i)) return 1;

  RPC_LOG(WHO, "listening on port %d", port);
  s->tcp = rpc_tcp_accept(lfd, 30.0);
  close(lfd);
  if (s->tcp < 0) return 1;
  struct rpc_conn_info local, remote;
  rpc_dev_local_info(&s->d, &local);
  local.addr = (uintptr_t)s->wregion;
  local.rkey = s->wregion_mr->rkey;
  if (rpc_send_info(s->tcp, &local) || rpc_recv_info(s->tcp, &remote, 10.0)) return 1;
  if (rpc_dev_connect(&s->d, &remote)) return 1;
  /* Our QP is in RTR now: only from here on may the client send. */
  uint8_t ready = 'R';
  if (write(s->tcp, &ready, 1) != 1) return perror("write"), 1;

  int rc = serve(s);
  int status = 0;
  if (rc == 1) {
    RPC_LOG(WHO, "the client went away after %u requests", s->served);
  } else if (rc < 0) {
    status = 1;
  }
  /* Retire every reply (bounded).  A client that went away may never
   * acknowledge the last ones; destroying the QP below halts them. */
  if (drain_sq(s) && rc == 0) status = 1;
  if (rc == 0 && status == 0) { /* the client says when it is done with our replies */
    uint8_t b;
    if (rpc_recv_byte(s->tcp, &b, 10.0) < 0) RPC_LOG(WHO, "no goodbye from the client");
  }
  /* Destroying the QP halts its send side and takes its posted receives,
   * so nothing references the MRs any more, even after a failure. */
  rpc_dev_destroy_qp(&s->d);
  struct ibv_mr *mrs[] = {s->ring_mr, s->rbufs_mr, s->wregion_mr};
  for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
    if (ibv_dereg_mr(mrs[i])) perror("ibv_dereg_mr");
  free(s->ring);
  free(s->rbufs);
  free(s->wregion);
  rpc_dev_close(&s->d);
  close(s->tcp);
  printf("rpc_server: served %u requests\n", s->served);
  return status;
}
