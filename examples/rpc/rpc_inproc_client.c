/* rpc_inproc_client.c: rpc_client.c without its main, and the entry points
 * rpc_inproc.c drives it by (rpc_inproc.h).  Setup and teardown follow
 * rpc_client.c's main step by step, minus the TCP exchange. */
#define main rpc_client_main
#include "rpc_client.c"
#undef main

#include "rpc_inproc.h"

struct client *rpc_inproc_client_open(enum rpc_mode mode, const char *devname) {
  struct client *c = calloc(1, sizeof(*c));
  if (!c) return NULL;
  c->mode = mode;
  c->tcp = -1;
  const uint32_t want_sq = 2 * RPC_CLIENT_WRS_PER_RPC * RPC_SLOTS;
  const bool shared = c->mode == MODE_CQ_OVERRUN || c->mode == MODE_REPLY_BEFORE_SEND;
  const int rcqe = RPC_RECVS + (c->mode == MODE_REPLY_BEFORE_SEND ? (int)want_sq : 0);
  if (rpc_dev_open(&c->d, devname, want_sq, RPC_RECVS, (int)want_sq, rcqe, shared)) goto fail;
  c->sq =
      (struct sq_credits){.depth = c->d.cap.max_send_wr, .per_rpc = RPC_CLIENT_WRS_PER_RPC, .mode = c->mode};
  if (c->sq.depth < want_sq) goto fail;
  c->ring_len = ((size_t)c->sq.depth + 1) * RPC_WRITE_MAX;
  c->ring = rpc_alloc_pages(c->ring_len);
  c->rbufs = rpc_alloc_pages((size_t)RPC_RECVS * RPC_MSG_MAX);
  if (!c->ring || !c->rbufs) goto fail;
  memset(c->ring, 0, c->ring_len);
  memset(c->rbufs, 0, (size_t)RPC_RECVS * RPC_MSG_MAX);
  c->ring_mr = ibv_reg_mr(c->d.pd, c->ring, c->ring_len, 0);
  c->rbufs_mr = ibv_reg_mr(c->d.pd, c->rbufs, (size_t)RPC_RECVS * RPC_MSG_MAX, IBV_ACCESS_LOCAL_WRITE);
  if (!c->ring_mr || !c->rbufs_mr) goto fail;
  for (uint32_t i = 0; i < RPC_RECVS; i++)
    if (post_recv(c, i)) goto fail;
  return c;
fail:
  RPC_LOG(WHO, "in-process setup failed");
  rpc_inproc_client_close(c);
  return NULL;
}

void rpc_inproc_client_info(struct client *c, struct rpc_conn_info *out) { rpc_dev_local_info(&c->d, out); }

int rpc_inproc_client_connect(struct client *c, const struct rpc_conn_info *remote) {
  c->remote = *remote;
  return rpc_dev_connect(&c->d, &c->remote);
}

int rpc_inproc_client_run(struct client *c, uint32_t n) {
  /* Every run from zero: RPC 0.., WR 0.. (the last run retired every WR). */
  c->n = n;
  c->issued = c->done = 0;
  c->sq.posted = c->sq.retired = c->sq.signaled_end = 0;
  c->sq.unsignaled = c->sq.reserved = 0;
  if (run_rpcs(c))
    return RPC_LOG(WHO, "FAILED after %u of %u RPCs (mode %s)", c->done, c->n, rpc_mode_names[c->mode]), -1;
  return drain_sq(c);
}

void rpc_inproc_client_close(struct client *c) {
  if (!c) return;
  rpc_dev_destroy_qp(&c->d);
  if (c->ring_mr) ibv_dereg_mr(c->ring_mr);
  if (c->rbufs_mr) ibv_dereg_mr(c->rbufs_mr);
  free(c->ring);
  free(c->rbufs);
  if (c->d.ctx) rpc_dev_close(&c->d);
  free(c);
}
