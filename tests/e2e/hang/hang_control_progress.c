/* hang, control: RDMA WRITEs posted and polled one by one for 3 s, with
 * hang_timeout=1; most polls are empty (the completion is not there yet)
 * but the program makes progress all along: no report.  Then one thread
 * blocks in ibv_get_async_event (an async-event thread, idle by design)
 * while the main thread computes for 2.5 s without verbs: no report
 * either. */
// RUN-OPTS: --hang_timeout=1
// SILENT
// STATUS: 0
#include "../checks/common.h"

#include <pthread.h>

static void *async_thread(void *ctx) {
  struct ibv_async_event ev;
  if (ibv_get_async_event(ctx, &ev) == 0) ibv_ack_async_event(&ev);
  return NULL;
}

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  long n = 0;
  double end = rig_now() + 3.0;
  while (rig_now() < end) {
    struct ibv_send_wr wr = rig_write_wr((uint64_t)n, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
    if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
    rig_poll_ok(r.cq[0], 1);
    ++n;
    struct timespec ts = {0, 1000000};
    nanosleep(&ts, NULL);
  }
  printf("%ld writes\n", n);
  pthread_t t;
  if (pthread_create(&t, NULL, async_thread, r.ctx)) DIE("pthread_create failed");
  volatile double x = 0;
  end = rig_now() + 2.5;
  while (rig_now() < end) x += 1;
  printf("computed\n");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_destroy_qps(&r);
  printf("DONE\n");
  fflush(stdout);
  _exit(0); /* the async thread still waits */
}
