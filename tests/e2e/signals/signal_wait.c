/* signal_wait.c: a blocking verb and a signal, as the kernel does them.
 *
 *   signal_wait cq|async|cm restart|norestart PORT
 *
 * The main thread blocks in ibv_get_cq_event (cq), ibv_get_async_event
 * (async) or rdma_get_cm_event (cm) with nothing to report; a SIGALRM from
 * an interval timer arrives 100 ms later.  With a handler installed
 * without SA_RESTART the call must return -1 with errno EINTR (a real
 * completion channel, async fd or rdma_cm fd is read with read(2), which
 * ends so; latency tools end their timed tests this way).  With SA_RESTART
 * it must go on waiting: a second thread, once the handler ran, makes the
 * event happen (a completion on the CQ, an async event of a QP on an SRQ
 * moved to the error state, an address resolution), and the call returns
 * it.  Prints "signal_wait: PASS ..." and exits 0, or says what went
 * wrong and exits 1 (3: the setup failed).  PORT is unused but for cm,
 * whose resolution needs none; it keeps the command lines alike. */
#include "../checks/common.h"

#include <netinet/in.h>
#include <pthread.h>
#include <rdma/rdma_cma.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/time.h>

static atomic_int g_alarms;
static void on_alarm(int sig) {
  (void)sig;
  atomic_fetch_add(&g_alarms, 1);
}

static void arm_timer(void) {
  struct itimerval it;
  memset(&it, 0, sizeof(it));
  it.it_value.tv_usec = 100 * 1000;
  if (setitimer(ITIMER_REAL, &it, NULL) != 0) DIE("setitimer: %s", strerror(errno));
}

/* The second thread: waits for the handler to have run, then 100 ms more
 * (the waiting call must still be waiting), then makes the event. */
typedef void (*maker_fn)(void* arg);
struct maker {
  maker_fn fn;
  void* arg;
};
static void* maker_main(void* p) {
  struct maker* m = p;
  while (atomic_load(&g_alarms) == 0) usleep(1000);
  usleep(100 * 1000);
  m->fn(m->arg);
  return NULL;
}

/* ---- cq: a SEND from qp[0] to qp[1], whose CQ is on the channel. */
struct cq_case {
  struct rig r;
  struct ibv_mr* mr;
  char buf[64];
};
static void cq_send(void* arg) {
  struct cq_case* c = arg;
  struct ibv_sge sge = rig_sge(c->mr, c->buf, 8);
  struct ibv_send_wr wr, *bad = NULL;
  memset(&wr, 0, sizeof(wr));
  wr.wr_id = 2;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  if (ibv_post_send(c->r.qp[0], &wr, &bad)) DIE("post_send");
}

static int run_cq(int restart) {
  static struct cq_case c;
  struct rig_opts o = {0};
  o.channel = 1;
  rig_setup(&c.r, &o);
  c.mr = rig_reg(&c.r, c.buf, sizeof(c.buf), IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge sge = rig_sge(c.mr, c.buf + 32, 32);
  struct ibv_recv_wr rwr, *rbad = NULL;
  memset(&rwr, 0, sizeof(rwr));
  rwr.wr_id = 1;
  rwr.sg_list = &sge;
  rwr.num_sge = 1;
  if (ibv_post_recv(c.r.qp[1], &rwr, &rbad)) DIE("post_recv");
  if (ibv_req_notify_cq(c.r.cq[1], 0)) DIE("req_notify_cq");
  struct ibv_wc none;
  if (ibv_poll_cq(c.r.cq[1], 1, &none) != 0) DIE("a completion before any send"); /* armed, then polled */
  struct maker m = {cq_send, &c};
  pthread_t t;
  if (restart && pthread_create(&t, NULL, maker_main, &m)) DIE("pthread_create");
  arm_timer();
  struct ibv_cq* ev_cq = NULL;
  void* ev_ctx = NULL;
  errno = 0;
  int rc = ibv_get_cq_event(c.r.ch, &ev_cq, &ev_ctx);
  int err = errno;
  if (restart) pthread_join(t, NULL);
  if (!restart) {
    if (rc == -1 && err == EINTR) {
      printf("signal_wait: PASS cq norestart: ibv_get_cq_event returned -1, EINTR\n");
      return 0;
    }
    printf("signal_wait: FAIL cq norestart: rc=%d errno=%d\n", rc, err);
    return 1;
  }
  if (rc != 0 || ev_cq != c.r.cq[1]) {
    printf("signal_wait: FAIL cq restart: rc=%d errno=%d\n", rc, err);
    return 1;
  }
  ibv_ack_cq_events(ev_cq, 1);
  struct ibv_wc wc[2];
  rig_poll_n(c.r.cq[1], wc, 1);
  rig_poll_n(c.r.cq[0], wc, 1);
  printf("signal_wait: PASS cq restart: the event after the signal (%d alarm)\n", atomic_load(&g_alarms));
  return 0;
}

/* ---- async: a QP on an SRQ moved to the error state raises
 * IBV_EVENT_QP_LAST_WQE_REACHED. */
static void async_error(void* arg) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_ERR;
  if (ibv_modify_qp(arg, &a, IBV_QP_STATE)) DIE("modify_qp ERR");
}

static int run_async(int restart) {
  struct ibv_context* ctx = rig_open_first_device();
  struct ibv_pd* pd = ibv_alloc_pd(ctx);
  struct ibv_cq* cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_srq_init_attr sa;
  memset(&sa, 0, sizeof(sa));
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  struct ibv_srq* srq = pd ? ibv_create_srq(pd, &sa) : NULL;
  if (!pd || !cq || !srq) DIE("pd/cq/srq");
  struct ibv_qp_init_attr qa;
  memset(&qa, 0, sizeof(qa));
  qa.send_cq = cq;
  qa.recv_cq = cq;
  qa.srq = srq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 4;
  qa.cap.max_send_sge = 1;
  struct ibv_qp* qp = ibv_create_qp(pd, &qa);
  if (!qp) DIE("create_qp: %s", strerror(errno));
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof(a));
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    DIE("modify_qp INIT");
  struct maker m = {async_error, qp};
  pthread_t t;
  if (restart && pthread_create(&t, NULL, maker_main, &m)) DIE("pthread_create");
  arm_timer();
  struct ibv_async_event ev;
  errno = 0;
  int rc = ibv_get_async_event(ctx, &ev);
  int err = errno;
  if (restart) pthread_join(t, NULL);
  int ok;
  if (!restart) {
    ok = rc == -1 && err == EINTR;
  } else {
    ok = rc == 0 && ev.event_type == IBV_EVENT_QP_LAST_WQE_REACHED && ev.element.qp == qp;
    if (rc == 0) ibv_ack_async_event(&ev);
  }
  printf("signal_wait: %s async %s: rc=%d errno=%d\n", ok ? "PASS" : "FAIL",
         restart ? "restart" : "norestart", rc, err);
  ibv_destroy_qp(qp);
  ibv_destroy_srq(srq);
  ibv_destroy_cq(cq);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  return !ok;
}

/* ---- cm: an address resolution on the channel. */
static void cm_resolve(void* arg) {
  struct sockaddr_in dst;
  memset(&dst, 0, sizeof(dst));
  dst.sin_family = AF_INET;
  dst.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (rdma_resolve_addr(arg, NULL, (struct sockaddr*)&dst, 2000))
    DIE("rdma_resolve_addr: %s", strerror(errno));
}

static int run_cm(int restart) {
  struct rdma_event_channel* ch = rdma_create_event_channel();
  if (!ch) DIE("rdma_create_event_channel: %s", strerror(errno));
  struct rdma_cm_id* id = NULL;
  if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP)) DIE("rdma_create_id: %s", strerror(errno));
  struct maker m = {cm_resolve, id};
  pthread_t t;
  if (restart && pthread_create(&t, NULL, maker_main, &m)) DIE("pthread_create");
  arm_timer();
  struct rdma_cm_event* ev = NULL;
  errno = 0;
  int rc = rdma_get_cm_event(ch, &ev);
  int err = errno;
  if (restart) pthread_join(t, NULL);
  int ok;
  if (!restart) {
    ok = rc == -1 && err == EINTR;
  } else {
    ok = rc == 0 && ev->event == RDMA_CM_EVENT_ADDR_RESOLVED;
    if (rc == 0) rdma_ack_cm_event(ev);
  }
  printf("signal_wait: %s cm %s: rc=%d errno=%d\n", ok ? "PASS" : "FAIL", restart ? "restart" : "norestart",
         rc, err);
  rdma_destroy_id(id);
  rdma_destroy_event_channel(ch);
  return !ok;
}

int main(int argc, char** argv) {
  if (argc < 3) DIE("usage: signal_wait cq|async|cm restart|norestart [PORT]");
  setvbuf(stdout, NULL, _IONBF, 0);
  const int restart = strcmp(argv[2], "restart") == 0;
  struct sigaction sa;
  memset(&sa, 0, sizeof(sa));
  sa.sa_handler = on_alarm;
  sa.sa_flags = restart ? SA_RESTART : 0;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGALRM, &sa, NULL)) DIE("sigaction");
  if (strcmp(argv[1], "cq") == 0) return run_cq(restart);
  if (strcmp(argv[1], "async") == 0) return run_async(restart);
  if (strcmp(argv[1], "cm") == 0) return run_cm(restart);
  DIE("unknown call '%s'", argv[1]);
}
