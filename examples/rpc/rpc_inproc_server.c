/* rpc_inproc_server.c: rpc_server.c without its main, and the entry points
 * rpc_inproc.c drives it by (rpc_inproc.h).  Setup and teardown follow
 * rpc_server.c's main, minus the TCP exchange; a step is one pass of
 * serve()'s loop. */
#define main rpc_server_main
#include "rpc_server.c"
#undef main

#include "rpc_inproc.h"

struct server *rpc_inproc_server_open(const char *devname) {
  struct server *s = calloc(1, sizeof(*s));
  if (!s) return NULL;
  s->tcp = -1;
  const uint32_t want_sq = 2 * RPC_SERVER_WRS_PER_RPC * RPC_SLOTS;
  if (rpc_dev_open(&s->d, devname, want_sq, RPC_RECVS, (int)want_sq, RPC_RECVS, false)) goto fail;
  s->sq = (struct sq_credits){
      .depth = s->d.cap.max_send_wr, .per_rpc = RPC_SERVER_WRS_PER_RPC, .mode = MODE_CORRECT};
  if (s->d.scq->cqe < (int)s->sq.depth) goto fail;
  const size_t ring_len = (size_t)s->sq.depth * RPC_MSG_MAX, rlen = (size_t)RPC_RECVS * RPC_MSG_MAX,
               wlen = (size_t)RPC_SLOTS * RPC_WRITE_MAX;
  s->ring = rpc_alloc_pages(ring_len);
  s->rbufs = rpc_alloc_pages(rlen);
  s->wregion = rpc_alloc_pages(wlen);
  if (!s->ring || !s->rbufs || !s->wregion) goto fail;
  memset(s->ring, 0, ring_len);
  memset(s->rbufs, 0, rlen);
  memset(s->wregion, 0, wlen);
  s->ring_mr = ibv_reg_mr(s->d.pd, s->ring, ring_len, 0);
  s->rbufs_mr = ibv_reg_mr(s->d.pd, s->rbufs, rlen, IBV_ACCESS_LOCAL_WRITE);
  s->wregion_mr = ibv_reg_mr(s->d.pd, s->wregion, wlen, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!s->ring_mr || !s->rbufs_mr || !s->wregion_mr) goto fail;
  for (uint32_t i = 0; i < RPC_RECVS; i++)
    if (post_recv(s, i)) goto fail;
  return s;
fail:
  RPC_LOG(WHO, "in-process setup failed");
  rpc_inproc_server_close(s);
  return NULL;
}

void rpc_inproc_server_info(struct server *s, struct rpc_conn_info *out) {
  rpc_dev_local_info(&s->d, out);
  out->addr = (uintptr_t)s->wregion;
  out->rkey = s->wregion_mr->rkey;
}

int rpc_inproc_server_connect(struct server *s, const struct rpc_conn_info *remote) {
  return rpc_dev_connect(&s->d, remote);
}

/* One pass of serve()'s loop: requests handled, or -1. */
int rpc_inproc_server_step(struct server *s) {
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
  return n;
}

/* After the client's last RPC: every reply retired, the books back to zero. */
int rpc_inproc_server_finish(struct server *s) {
  if (!s->last_seen) return RPC_LOG(WHO, "the client's last request never came"), -1;
  if (drain_sq(s)) return -1;
  s->sq.posted = s->sq.retired = s->sq.signaled_end = 0;
  s->sq.unsignaled = s->sq.reserved = 0;
  s->served = 0;
  s->last_seen = false;
  return 0;
}

void rpc_inproc_server_close(struct server *s) {
  if (!s) return;
  rpc_dev_destroy_qp(&s->d);
  struct ibv_mr *mrs[] = {s->ring_mr, s->rbufs_mr, s->wregion_mr};
  for (size_t i = 0; i < sizeof(mrs) / sizeof(mrs[0]); i++)
    if (mrs[i]) ibv_dereg_mr(mrs[i]);
  free(s->ring);
  free(s->rbufs);
  free(s->wregion);
  if (s->d.ctx) rpc_dev_close(&s->d);
  free(s);
}
