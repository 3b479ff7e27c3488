/* listen_race_sim: the shape of perftest -R's listen race (docs/softnic.md),
 * played on purpose, so that tests/e2e/CMakeLists.txt can test
 * run_pair.sh's --listen-race: the proven race run again (and passing),
 * and proven twice (a failure).
 *
 * perftest -R connects twice on one port: its exchange connection, then,
 * after a handshake over it, the test's own, to a listener the server
 * creates only after that handshake.  Nothing orders the client's second
 * connect after the server's second listen; a client that wins gets
 * RDMA_CM_EVENT_REJECTED with status 8 (invalid service id: nobody listens),
 * on a kernel's rdma_cm as on softnic's.
 *
 * Here the server accepts the first connection, then either (normal)
 * listens again and disconnects, or (late, -L) disconnects, waits (-W ms,
 * 1000 unless given) and only then listens again.  The client connects, waits for the disconnect
 * and connects again at once: after a late server's disconnect it is
 * rejected (status 8), prints perftest's words for it and exits 1; the late
 * server listens on for a peer that is gone.  softnic's CM holds a connect
 * that finds no listener for softnic_cm_listen_wait (docs/softnic.md): a
 * server late by less connects on the first try; the harness tests of the
 * retry turn that wait off.  Both sides print
 * "sim: connected twice" when the second connection is established.
 *
 * May not: be late unless told (-L), or pass with a connection missing.
 *
 * usage: listen_race_sim -p PORT [-L always|once:MARKER|never] [-W MS] [SERVER_IPV4]
 *   -L always       the server listens late;
 *   -L once:MARKER  late unless MARKER exists, and creates it (a second
 *                   run of the pair passes);
 *   -L never        the server never listens again: it exits 0 after the
 *                   first connection (a rejected client, but no race);
 *   -W MS           how late a late server listens again (default 1000). */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <rdma/rdma_cma.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static struct rdma_event_channel *ch;

#define CHECK(cond, ...)                          \
  do {                                            \
    if (!(cond)) {                                \
      fprintf(stderr, "listen_race_sim: FAIL: "); \
      fprintf(stderr, __VA_ARGS__);               \
      fprintf(stderr, "\n");                      \
      exit(2);                                    \
    }                                             \
  } while (0)

/* Whether the server listens late this run (-L); never: -1. */
static int late(const char *how) {
  if (!how) return 0;
  if (strcmp(how, "never") == 0) return -1;
  if (strcmp(how, "always") == 0) return 1;
  CHECK(strncmp(how, "once:", 5) == 0 && how[5], "bad -L '%s'", how);
  const int fd = open(how + 5, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    close(fd);
    return 1; /* the first run: the marker is new */
  }
  return 0;
}

/* The next event, which must be `want` (REJECTED is returned to the
 * caller, with its status, when `want` is ESTABLISHED). */
static struct rdma_cm_event next_event(enum rdma_cm_event_type want) {
  struct rdma_cm_event *ev;
  CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
  struct rdma_cm_event copy = *ev;
  copy.param.conn.private_data = NULL; /* freed with the event */
  rdma_ack_cm_event(ev);
  if (!(want == RDMA_CM_EVENT_ESTABLISHED && copy.event == RDMA_CM_EVENT_REJECTED))
    CHECK(copy.event == want, "got %s (status %d), want %s", rdma_event_str(copy.event), copy.status,
          rdma_event_str(want));
  return copy;
}

static struct sockaddr_in addr_of(const char *ip, int port) {
  struct sockaddr_in a;
  memset(&a, 0, sizeof(a));
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  CHECK(inet_pton(AF_INET, ip, &a.sin_addr) == 1, "bad address '%s'", ip);
  return a;
}

static void make_qp(struct rdma_cm_id *id) {
  struct ibv_qp_init_attr attr;
  memset(&attr, 0, sizeof(attr));
  attr.qp_type = IBV_QPT_RC;
  attr.cap.max_send_wr = attr.cap.max_recv_wr = 1;
  attr.cap.max_send_sge = attr.cap.max_recv_sge = 1;
  CHECK(rdma_create_qp(id, NULL, &attr) == 0, "rdma_create_qp: %s", strerror(errno));
}

static struct rdma_cm_id *listen_on(int port) {
  struct rdma_cm_id *id;
  struct sockaddr_in a = addr_of("0.0.0.0", port);
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create listener: %s", strerror(errno));
  CHECK(rdma_bind_addr(id, (struct sockaddr *)&a) == 0, "bind: %s", strerror(errno));
  CHECK(rdma_listen(id, 1) == 0, "listen: %s", strerror(errno));
  return id;
}

/* A connect request that came while the server waited for a disconnect. */
static struct rdma_cm_id *pending;

/* Waits for DISCONNECTED, keeping a connect request that comes first. */
static void wait_disconnected(void) {
  for (;;) {
    struct rdma_cm_event *ev;
    CHECK(rdma_get_cm_event(ch, &ev) == 0, "rdma_get_cm_event: %s", strerror(errno));
    const enum rdma_cm_event_type type = ev->event;
    struct rdma_cm_id *id = ev->id;
    rdma_ack_cm_event(ev);
    if (type == RDMA_CM_EVENT_DISCONNECTED) return;
    CHECK(type == RDMA_CM_EVENT_CONNECT_REQUEST && !pending, "got %s, want DISCONNECTED",
          rdma_event_str(type));
    pending = id;
  }
}

/* Accepts the next request; returns its id once established. */
static struct rdma_cm_id *accept_one(void) {
  struct rdma_cm_id *id = pending ? pending : next_event(RDMA_CM_EVENT_CONNECT_REQUEST).id;
  pending = NULL;
  make_qp(id);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  CHECK(rdma_accept(id, &cp) == 0, "accept: %s", strerror(errno));
  next_event(RDMA_CM_EVENT_ESTABLISHED);
  return id;
}

static void drop(struct rdma_cm_id *id) {
  rdma_destroy_qp(id);
  CHECK(rdma_destroy_id(id) == 0, "rdma_destroy_id: %s", strerror(errno));
}

static int server(int port, int how, int late_ms) {
  struct rdma_cm_id *lid = listen_on(port);
  struct rdma_cm_id *first = accept_one();
  CHECK(rdma_destroy_id(lid) == 0, "rdma_destroy_id: %s", strerror(errno));
  if (how == 0) lid = listen_on(port);
  CHECK(rdma_disconnect(first) == 0, "disconnect: %s", strerror(errno));
  wait_disconnected();
  drop(first);
  if (how < 0) return 0;
  if (how > 0) {
    usleep((useconds_t)late_ms * 1000);
    lid = listen_on(port);
  }
  struct rdma_cm_id *second = accept_one();
  printf("sim: connected twice\n");
  CHECK(rdma_disconnect(second) == 0, "disconnect: %s", strerror(errno));
  next_event(RDMA_CM_EVENT_DISCONNECTED);
  drop(second);
  rdma_destroy_id(lid);
  return 0;
}

/* Connects to ip:port; returns the id once established, or NULL (with
 * perftest's words) when rejected. */
static struct rdma_cm_id *connect_to(const char *ip, int port) {
  struct rdma_cm_id *id;
  struct sockaddr_in dst = addr_of(ip, port);
  CHECK(rdma_create_id(ch, &id, NULL, RDMA_PS_TCP) == 0, "create: %s", strerror(errno));
  CHECK(rdma_resolve_addr(id, NULL, (struct sockaddr *)&dst, 2000) == 0, "resolve_addr: %s", strerror(errno));
  next_event(RDMA_CM_EVENT_ADDR_RESOLVED);
  CHECK(rdma_resolve_route(id, 2000) == 0, "resolve_route: %s", strerror(errno));
  next_event(RDMA_CM_EVENT_ROUTE_RESOLVED);
  make_qp(id);
  struct rdma_conn_param cp;
  memset(&cp, 0, sizeof(cp));
  CHECK(rdma_connect(id, &cp) == 0, "connect: %s", strerror(errno));
  struct rdma_cm_event ev = next_event(RDMA_CM_EVENT_ESTABLISHED);
  if (ev.event == RDMA_CM_EVENT_REJECTED) {
    fprintf(stderr, "RDMA CM event error:\nEvent: %s; error: %d.\n", rdma_event_str(ev.event), ev.status);
    drop(id);
    return NULL;
  }
  return id;
}

static int client(const char *ip, int port) {
  struct rdma_cm_id *first = connect_to(ip, port);
  CHECK(first, "the first connect was rejected");
  next_event(RDMA_CM_EVENT_DISCONNECTED);
  drop(first);
  struct rdma_cm_id *second = connect_to(ip, port);
  if (!second) return 1;
  printf("sim: connected twice\n");
  next_event(RDMA_CM_EVENT_DISCONNECTED);
  drop(second);
  return 0;
}

int main(int argc, char **argv) {
  int port = 0, late_ms = 1000, opt;
  const char *how = NULL;
  while ((opt = getopt(argc, argv, "p:L:W:")) != -1) {
    if (opt == 'p')
      port = atoi(optarg);
    else if (opt == 'L')
      how = optarg;
    else if (opt == 'W')
      late_ms = atoi(optarg);
    else
      return 2;
  }
  CHECK(port > 0 && port < 65536 && late_ms >= 0 && late_ms <= 60000,
        "usage: listen_race_sim -p PORT [-L always|once:MARKER|never] [-W MS] [SERVER_IPV4]");
  setvbuf(stdout, NULL, _IONBF, 0);
  ch = rdma_create_event_channel();
  CHECK(ch, "rdma_create_event_channel: %s", strerror(errno));
  const int rc = optind < argc ? client(argv[optind], port) : server(port, late(how), late_ms);
  rdma_destroy_event_channel(ch);
  return rc;
}
