/* post_poll_race: a correct program rdmasan must stay silent about.  The
 * main thread posts signaled RDMA WRITEs (every third round an unsignaled
 * WRITE chained before the signaled one) and waits for each to be seen; a
 * second thread does nothing but poll the CQ.  A timer interrupts the main
 * thread every 31 us, and its handler works for 20 us: wherever it lands,
 * the main thread stops there.  softnic places a WRITE's completion inside
 * the post, so when the signal lands after the device's post and before
 * ibv_post_send returns, the poller takes the completion first: the books
 * must still retire the WR (checkers/state_early.cc), or the deregistration
 * of the WRITE's source that follows its completion is a false
 * dereg-in-flight.  Prints "race: PASS" at the end.
 *
 * usage: post_poll_race [rounds [timer period in ns]] */
#include "../checks/common.h"

#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

static struct rig r;
static struct ibv_mr *smr, *dmr;
static char src[64], dst[64];
static atomic_long polled; /* completions the poller took */
static atomic_int stop;

static void *poller(void *arg) {
  (void)arg;
  struct ibv_wc wc[4];
  while (!atomic_load(&stop)) {
    int got = ibv_poll_cq(r.cq[0], 4, wc);
    if (got < 0) DIE("ibv_poll_cq failed");
    for (int i = 0; i < got; ++i)
      if (wc[i].status != IBV_WC_SUCCESS)
        DIE("completion of %lu: %s", (unsigned long)wc[i].wr_id, ibv_wc_status_str(wc[i].status));
    if (got > 0) atomic_fetch_add(&polled, got);
  }
  return NULL;
}

/* The main thread's interruption: 20 us of work, wherever it stood. */
static void busy(int sig) {
  (void)sig;
  struct timespec a, b;
  clock_gettime(CLOCK_MONOTONIC, &a);
  do clock_gettime(CLOCK_MONOTONIC, &b);
  while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 20000);
}

static void interrupt_me_every(long ns) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = busy;
  sa.sa_flags = SA_RESTART;
  if (sigaction(SIGRTMIN, &sa, NULL)) DIE("sigaction failed");
  struct sigevent ev;
  memset(&ev, 0, sizeof ev);
  ev.sigev_notify = SIGEV_THREAD_ID;
  ev.sigev_signo = SIGRTMIN;
  ev._sigev_un._tid = gettid();
  timer_t t;
  if (timer_create(CLOCK_MONOTONIC, &ev, &t)) DIE("timer_create failed: %s", strerror(errno));
  struct itimerspec its = {{0, ns}, {0, ns}};
  if (timer_settime(t, 0, &its, NULL)) DIE("timer_settime failed");
}

int main(int argc, char **argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 20000;
  const long period_ns = argc > 2 ? atol(argv[2]) : 100000;
  rig_setup(&r, NULL);
  dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  pthread_t t;
  if (pthread_create(&t, NULL, poller, NULL)) DIE("pthread_create failed");
  interrupt_me_every(period_ns);
  for (long i = 0; i < rounds; ++i) {
    /* A source registered for this WRITE alone, deregistered once its
     * completion is seen: a WR the books still hold is a dereg-in-flight. */
    smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge sge = rig_sge(smr, src, 8);
    struct ibv_send_wr first = rig_write_wr(2 * i, &sge, (uintptr_t)dst, dmr->rkey, 0);
    struct ibv_send_wr last = rig_write_wr(2 * i + 1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
    if (i % 3 == 2) first.next = &last;
    if (ibv_post_send(r.qp[0], i % 3 == 2 ? &first : &last, &bad)) DIE("round %ld: post failed", i);
    const double end = rig_now() + 10.0;
    while (atomic_load(&polled) <= i)
      if (rig_now() > end) DIE("round %ld: no completion in 10 s", i);
    if (ibv_dereg_mr(smr)) DIE("round %ld: ibv_dereg_mr failed", i);
  }
  atomic_store(&stop, 1);
  pthread_join(t, NULL);
  if (ibv_dereg_mr(dmr)) DIE("ibv_dereg_mr failed");
  rig_teardown(&r);
  printf("race: PASS (%ld rounds)\n", rounds);
  return 0;
}
