/* cm_events: librdmacm's documented events and errors on softnic's rdma_cm,
 * in one process (a server channel and a client channel, driven in turn):
 *   - a second bind of a port: EADDRINUSE;
 *   - resolving an address of another host: RDMA_CM_EVENT_ADDR_ERROR;
 *   - a connect nobody listens for: RDMA_CM_EVENT_REJECTED, status 8 (after
 *     softnic_cm_listen_wait);
 *   - a connect before the listen (the listener comes within that wait):
 *     the request reaches it, and its reject reaches the client (status 28);
 *   - a reject with private data: REJECTED, status 28, the data arrives;
 *   - private data on connect and accept, both ends ESTABLISHED, one SEND
 *     over the QPs rdma_cm set up, then DISCONNECTED on both ends;
 *   - data before disconnect: SENDs that completed before their sender
 *     destroyed its QP and id are in the receiver's CQ when it reads
 *     DISCONNECTED;
 *   - UD: a SIDR to nobody: RDMA_CM_EVENT_UNREACHABLE; then a UD service
 *     resolved (qp_num, qkey) and a datagram sent to it.
 * Each step prints "ok: <step>"; the last line is "cm_events: PASS". */
#include <arpa/inet.h>
#include <errno.h>
#include <rdma/rdma_cma.h>
#include <rdma/rdma_verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static struct rdma_event_channel *server_ch, *client_ch;
static int port;

#define CHECK(cond, ...)                    \
  do {                                      \
    if (!(cond)) {                          \
      fprintf(stderr, "cm_events: FAIL: "); \
      fprintf(stderr, __VA_ARGS__);         \
      fprintf(stderr, "\n");                \
      exit(1);                              \
    }                                       \
  } while (0)

/* The next event of `ch`, which must be `want`; copied, then acked. */
static struct rdma_cm_event next_event(struct rdma_event_channel *ch, enum rdma_cm_event_type want,
                                       char *pdata, size_t pdata_len) {
  struct rdma_cm_event *ev;
  CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
  struct rdma_cm_event copy = *ev;
  CHECK(ev->event == want, "got %s (status %d), want %s", rdma_event_str(ev->event), ev->status,
        rdma_event_str(want));
  if (pdata && ev->param.conn.private_data)
    memcpy(pdata, ev->param.conn.private_data,
           ev->param.conn.private_data_len < pdata_len ? ev->param.conn.private_data_len : pdata_len);
  copy.param.conn.private_data = NULL; /* freed with the event */
  rdma_ack_cm_event(ev);
  return copy;
}

static struct sockaddr_in addr_of(const char *ip, int p) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(p);
  inet_pton(AF_INET, ip, &a.sin_addr);
  return a;
}

static struct rdma_cm_id *listener(enum rdma_port_space ps) {
  struct rdma_cm_id *id;
  struct sockaddr_in a = addr_of("0.0.0.0", port);
  CHECK(rdma_create_id(server_ch, &id, NULL, ps) == 0, "create listener: %s", strerror(errno));
  CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind listener: %s", strerror(errno));
  CHECK(rdma_listen(id, 4) == 0, "listen: %s", strerror(errno));
  return id;
}

/* A client id with its address and route resolved to 127.0.0.1:port. */
static struct rdma_cm_id *resolved_client(enum rdma_port_space ps) {
  struct rdma_cm_id *id;
  struct sockaddr_in dst = addr_of("127.0.0.1", port);
  CHECK(rdma_create_id(client_ch, &id, NULL, ps) == 0, "create client: %s", strerror(errno));
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve_addr: %s", strerror(errno));
  next_event(client_ch, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, 0);
  CHECK(id->verbs != NULL, "resolved id has no device");
  CHECK(rdma_resolve_route(id, 1000) == 0, "resolve_route: %s", strerror(errno));
  next_event(client_ch, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, 0);
  return id;
}

static void make_qp(struct rdma_cm_id *id, enum ibv_qp_type type) {
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_type = type;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 4;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  attr.sq_sig_all = 1;
  CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp: %s", strerror(errno));
}

/* A resolved RC client with its QP, connecting with `pdata` (a string, its
 * NUL included) as the request's private data. */
static struct rdma_cm_id *connecting_client(const char *pdata) {
  struct rdma_cm_id *id = resolved_client(RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  cp.private_data = pdata;
  cp.private_data_len = (uint8_t)(strlen(pdata) + 1);
  CHECK(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
  return id;
}

static void wait_wc(struct ibv_cq *cq, enum ibv_wc_opcode op) {
  struct ibv_wc wc;
  int n;
  for (long spins = 0; (n = ibv_poll_cq(cq, 1, &wc)) == 0; ++spins)
    CHECK(spins < 100000000L, "no completion");
  CHECK(n == 1 && wc.status == IBV_WC_SUCCESS, "completion status %s", ibv_wc_status_str(wc.status));
  CHECK(wc.opcode == op, "completion opcode %d, want %d", wc.opcode, op);
}

static void step_bind_twice(void) {
  struct rdma_cm_id *a, *b;
  struct sockaddr_in s = addr_of("127.0.0.1", port);
  CHECK(rdma_create_id(server_ch, &a, NULL, RDMA_PS_TCP) == 0, "create");
  CHECK(rdma_create_id(server_ch, &b, NULL, RDMA_PS_TCP) == 0, "create");
  CHECK(rdma_bind_addr(a, (struct sockaddr *)&s) == 0, "first bind: %s", strerror(errno));
  CHECK(a->verbs != NULL, "an id bound to 127.0.0.1 has softnic0");
  CHECK(rdma_bind_addr(b, (struct sockaddr *)&s) == -1 && errno == EADDRINUSE, "second bind: %s",
        strerror(errno));
  rdma_destroy_id(a);
  CHECK(rdma_bind_addr(b, (struct sockaddr *)&s) == 0, "bind after the first went: %s", strerror(errno));
  rdma_destroy_id(b);
  printf("ok: bind twice\n");
}

static void step_addr_error(void) {
  struct rdma_cm_id *id;
  struct sockaddr_in dst = addr_of("192.0.2.1", port); /* TEST-NET-1: never this host */
  CHECK(rdma_create_id(client_ch, &id, NULL, RDMA_PS_TCP) == 0, "create");
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 1000) == 0, "resolve_addr: %s", strerror(errno));
  struct rdma_cm_event ev = next_event(client_ch, RDMA_CM_EVENT_ADDR_ERROR, NULL, 0);
  CHECK(ev.status != 0, "ADDR_ERROR with status 0");
  rdma_destroy_id(id);
  printf("ok: addr error\n");
}

static void step_no_listener(void) {
  struct rdma_cm_id *id = resolved_client(RDMA_PS_TCP);
  make_qp(id, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  CHECK(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
  struct rdma_cm_event ev = next_event(client_ch, RDMA_CM_EVENT_REJECTED, NULL, 0);
  CHECK(ev.status == 8, "REJECTED status %d, want 8 (invalid service id)", ev.status);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  printf("ok: no listener\n");
}

/* The REQ of a connect made before the listen waits for the listener
 * (docs/softnic.md): the listener gets it, with its private data, and its
 * reject is the client's answer, not the "nobody listens" one. */
static void step_listen_late(void) {
  struct rdma_cm_id *id = connecting_client("early");
  struct rdma_cm_id *lid = listener(RDMA_PS_TCP);
  char got[64] = {0};
  struct rdma_cm_event req = next_event(server_ch, RDMA_CM_EVENT_CONNECT_REQUEST, got, sizeof(got));
  CHECK(strcmp(got, "early") == 0, "request private data '%s'", got);
  CHECK(req.listen_id == lid, "request not on the late listener");
  CHECK(rdma_reject(req.id, NULL, 0) == 0, "reject: %s", strerror(errno));
  struct rdma_cm_event ev = next_event(client_ch, RDMA_CM_EVENT_REJECTED, NULL, 0);
  CHECK(ev.status == 28, "REJECTED status %d, want 28 (the late listener's reject)", ev.status);
  rdma_destroy_id(req.id);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  rdma_destroy_id(lid);
  printf("ok: listen after the connect\n");
}

static void step_reject(struct rdma_cm_id *lid) {
  struct rdma_cm_id *id = connecting_client("hello");
  char got[64] = {0};
  struct rdma_cm_event req = next_event(server_ch, RDMA_CM_EVENT_CONNECT_REQUEST, got, sizeof(got));
  CHECK(strcmp(got, "hello") == 0, "request private data '%s'", got);
  CHECK(req.listen_id == lid, "request not on the listener");
  CHECK(req.param.conn.private_data_len == 56, "request private_data_len %d, want 56",
        req.param.conn.private_data_len);
  CHECK(rdma_reject(req.id, "nope", 5) == 0, "reject: %s", strerror(errno));
  char rej[64] = {0};
  struct rdma_cm_event ev = next_event(client_ch, RDMA_CM_EVENT_REJECTED, rej, sizeof(rej));
  CHECK(ev.status == 28, "REJECTED status %d, want 28 (consumer)", ev.status);
  CHECK(strcmp(rej, "nope") == 0, "reject private data '%s'", rej);
  rdma_destroy_id(req.id);
  rdma_destroy_qp(id);
  rdma_destroy_id(id);
  printf("ok: reject with private data\n");
}

static void step_connect_send_disconnect(void) {
  struct rdma_cm_id *cid = resolved_client(RDMA_PS_TCP);
  make_qp(cid, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  cp.private_data = "hi";
  cp.private_data_len = 3;
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(cid, &cp) == 0, "connect: %s", strerror(errno));
  struct rdma_cm_event req = next_event(server_ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, 0);
  struct rdma_cm_id *sid = req.id;
  CHECK(sid->verbs != NULL, "request id has no device");
  make_qp(sid, IBV_QPT_RC);
  static char rbuf[64], sbuf[64] = "payload over rdma_cm";
  struct ibv_mr *rmr = rdma_reg_msgs(sid, rbuf, sizeof(rbuf));
  struct ibv_mr *smr = rdma_reg_msgs(cid, sbuf, sizeof(sbuf));
  CHECK(rmr && smr, "reg_msgs: %s", strerror(errno));
  CHECK(rdma_post_recv(sid, NULL, rbuf, sizeof(rbuf), rmr) == 0, "post_recv");
  memset(&cp, 0, sizeof(cp));
  cp.private_data = "welcome";
  cp.private_data_len = 8;
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  CHECK(rdma_accept(sid, &cp) == 0, "accept: %s", strerror(errno));
  char got[64] = {0};
  next_event(client_ch, RDMA_CM_EVENT_ESTABLISHED, got, sizeof(got));
  CHECK(strcmp(got, "welcome") == 0, "accept private data '%s'", got);
  next_event(server_ch, RDMA_CM_EVENT_ESTABLISHED, NULL, 0);
  struct ibv_qp_attr qa;
  struct ibv_qp_init_attr qi;
  CHECK(ibv_query_qp(cid->qp, &qa, IBV_QP_STATE | IBV_QP_DEST_QPN, &qi) == 0 && qa.qp_state == IBV_QPS_RTS,
        "client QP not in RTS");
  CHECK(qa.dest_qp_num == sid->qp->qp_num, "client QP faces qpn %#x, not the server's %#x", qa.dest_qp_num,
        sid->qp->qp_num);
  CHECK(rdma_post_send(cid, NULL, sbuf, sizeof(sbuf), smr, IBV_SEND_SIGNALED) == 0, "post_send");
  wait_wc(cid->send_cq, IBV_WC_SEND);
  wait_wc(sid->recv_cq, IBV_WC_RECV);
  CHECK(strcmp(rbuf, sbuf) == 0, "received '%s'", rbuf);
  CHECK(rdma_disconnect(cid) == 0, "disconnect: %s", strerror(errno));
  next_event(server_ch, RDMA_CM_EVENT_DISCONNECTED, NULL, 0);
  next_event(client_ch, RDMA_CM_EVENT_DISCONNECTED, NULL, 0);
  CHECK(rdma_disconnect(sid) == 0, "server's disconnect after the client's: %s", strerror(errno));
  /* The disconnect moved the QPs to ERR: the server's flushed nothing (its
   * one receive was consumed); deregister after the QPs are gone. */
  rdma_destroy_qp(cid);
  rdma_destroy_qp(sid);
  rdma_dereg_mr(rmr);
  rdma_dereg_mr(smr);
  rdma_destroy_id(sid);
  rdma_destroy_id(cid);
  printf("ok: connect, send, disconnect\n");
}

/* The sender closes as rdma_destroy_ep does (its QP, then its id: the id's
 * destruction sends the DREQ, as the kernel's does for a connected id).  An
 * RC SEND completes only once the responder has placed it, so every message
 * whose completion the sender saw is in the receiver's CQ before the DREQ
 * leaves: a receiver that reads DISCONNECTED and then drains its CQ before
 * destroying its own QP gets them all.  (libfabric 1.17's ofi_rxm destroys
 * the QP on the peer's shutdown first and polls after, rxm_close_conn; on a
 * device whose destroy_qp cleans the CQ, mlx5 or softnic, what it had not
 * polled yet is gone: fi_pingpong -e rdm then waits forever for the peer's
 * "fin".) */
static void step_data_before_disconnect(void) {
  enum { kMsgs = 3, kLen = 16 };
  struct rdma_cm_id *cid = resolved_client(RDMA_PS_TCP);
  make_qp(cid, IBV_QPT_RC);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  cp.retry_count = 7;
  cp.rnr_retry_count = 7;
  CHECK(rdma_connect(cid, &cp) == 0, "connect: %s", strerror(errno));
  struct rdma_cm_id *sid = next_event(server_ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, 0).id;
  make_qp(sid, IBV_QPT_RC);
  static char rbuf[kMsgs][kLen], sbuf[kMsgs][kLen];
  struct ibv_mr *rmr = rdma_reg_msgs(sid, rbuf, sizeof(rbuf));
  struct ibv_mr *smr = rdma_reg_msgs(cid, sbuf, sizeof(sbuf));
  CHECK(rmr && smr, "reg_msgs: %s", strerror(errno));
  for (int i = 0; i < kMsgs; ++i)
    CHECK(rdma_post_recv(sid, (void *)(uintptr_t)(i + 1), rbuf[i], kLen, rmr) == 0, "post_recv");
  memset(&cp, 0, sizeof(cp));
  cp.responder_resources = 1;
  cp.initiator_depth = 1;
  CHECK(rdma_accept(sid, &cp) == 0, "accept: %s", strerror(errno));
  next_event(client_ch, RDMA_CM_EVENT_ESTABLISHED, NULL, 0);
  next_event(server_ch, RDMA_CM_EVENT_ESTABLISHED, NULL, 0);
  for (int i = 0; i < kMsgs; ++i) {
    snprintf(sbuf[i], kLen, "message %d", i);
    CHECK(rdma_post_send(cid, NULL, sbuf[i], kLen, smr, IBV_SEND_SIGNALED) == 0, "post_send");
    wait_wc(cid->send_cq, IBV_WC_SEND);
  }
  rdma_destroy_qp(cid);
  rdma_dereg_mr(smr);
  rdma_destroy_id(cid);
  /* The receiver has not polled since it accepted. */
  next_event(server_ch, RDMA_CM_EVENT_DISCONNECTED, NULL, 0);
  for (int i = 0; i < kMsgs; ++i) {
    struct ibv_wc wc;
    CHECK(ibv_poll_cq(sid->recv_cq, 1, &wc) == 1, "receive %d of %d not in the CQ after DISCONNECTED", i + 1,
          kMsgs);
    CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == (uint64_t)(i + 1) &&
              wc.byte_len == kLen,
          "receive %d: status %s, opcode %d, wr_id %llu, byte_len %u", i + 1, ibv_wc_status_str(wc.status),
          wc.opcode, (unsigned long long)wc.wr_id, wc.byte_len);
    char want[kLen];
    snprintf(want, sizeof(want), "message %d", i);
    CHECK(strcmp(rbuf[i], want) == 0, "receive %d holds '%s'", i + 1, rbuf[i]);
  }
  struct ibv_wc extra;
  CHECK(ibv_poll_cq(sid->recv_cq, 1, &extra) == 0, "a completion beyond the %d receives", kMsgs);
  rdma_destroy_qp(sid);
  rdma_dereg_mr(rmr);
  rdma_destroy_id(sid);
  printf("ok: data before disconnect\n");
}

static void step_ud(void) {
  struct rdma_cm_id *cid = resolved_client(RDMA_PS_UDP);
  make_qp(cid, IBV_QPT_UD);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  CHECK(rdma_connect(cid, &cp) == 0, "connect: %s", strerror(errno));
  next_event(client_ch, RDMA_CM_EVENT_UNREACHABLE, NULL, 0);
  struct rdma_cm_id *lid = listener(RDMA_PS_UDP);
  CHECK(rdma_connect(cid, &cp) == 0, "connect: %s", strerror(errno));
  struct rdma_cm_event req = next_event(server_ch, RDMA_CM_EVENT_CONNECT_REQUEST, NULL, 0);
  CHECK(req.param.ud.qp_num == cid->qp->qp_num, "request qp_num %#x, want %#x", req.param.ud.qp_num,
        cid->qp->qp_num);
  struct rdma_cm_id *sid = req.id;
  make_qp(sid, IBV_QPT_UD);
  static char rbuf[40 + 32], sbuf[32] = "datagram";
  struct ibv_mr *rmr = rdma_reg_msgs(sid, rbuf, sizeof(rbuf));
  struct ibv_mr *smr = rdma_reg_msgs(cid, sbuf, sizeof(sbuf));
  CHECK(rdma_post_recv(sid, NULL, rbuf, sizeof(rbuf), rmr) == 0, "post_recv");
  memset(&cp, 0, sizeof(cp));
  cp.qp_num = sid->qp->qp_num;
  CHECK(rdma_accept(sid, &cp) == 0, "accept: %s", strerror(errno));
  struct rdma_cm_event est = next_event(client_ch, RDMA_CM_EVENT_ESTABLISHED, NULL, 0);
  CHECK(est.param.ud.qp_num == sid->qp->qp_num, "established qp_num %#x, want %#x", est.param.ud.qp_num,
        sid->qp->qp_num);
  CHECK(est.param.ud.qkey == RDMA_UDP_QKEY, "qkey %#x", est.param.ud.qkey);
  struct ibv_ah *ah = ibv_create_ah(cid->pd, &est.param.ud.ah_attr);
  CHECK(ah != NULL, "create_ah: %s", strerror(errno));
  CHECK(
      rdma_post_ud_send(cid, NULL, sbuf, sizeof(sbuf), smr, IBV_SEND_SIGNALED, ah, est.param.ud.qp_num) == 0,
      "post_ud_send");
  wait_wc(cid->send_cq, IBV_WC_SEND);
  wait_wc(sid->recv_cq, IBV_WC_RECV);
  CHECK(strcmp(rbuf + 40, "datagram") == 0, "received '%s'", rbuf + 40);
  ibv_destroy_ah(ah);
  rdma_destroy_qp(cid);
  rdma_destroy_qp(sid);
  rdma_dereg_mr(rmr);
  rdma_dereg_mr(smr);
  rdma_destroy_id(sid);
  rdma_destroy_id(lid);
  rdma_destroy_id(cid);
  printf("ok: ud unreachable, resolve, send\n");
}

int main(int argc, char **argv) {
  port = argc > 1 ? atoi(argv[1]) : 20079;
  server_ch = rdma_create_event_channel();
  client_ch = rdma_create_event_channel();
  CHECK(server_ch && client_ch, "rdma_create_event_channel: %s", strerror(errno));
  step_bind_twice();
  step_addr_error();
  step_no_listener();
  step_listen_late();
  struct rdma_cm_id *lid = listener(RDMA_PS_TCP);
  step_reject(lid);
  step_connect_send_disconnect();
  step_data_before_disconnect();
  rdma_destroy_id(lid);
  step_ud();
  rdma_destroy_event_channel(client_ch);
  rdma_destroy_event_channel(server_ch);
  printf("cm_events: PASS\n");
  return 0;
}
