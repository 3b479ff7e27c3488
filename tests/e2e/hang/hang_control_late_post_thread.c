/* hang, control: the main thread polls a CQ with nothing outstanding on it
 * (no WR, no receive) while a second thread, which has made no verbs call
 * yet, sleeps a second and then posts the signaled RDMA WRITE whose
 * completion the main thread waits for (hang_timeout=10).  For that
 * second the books show a CQ on which nothing can complete, but a thread
 * of the program does not wait in verbs and may post: it does.  No
 * report: a proof needs every thread of the program waiting. */
// RUN-OPTS: --hang_timeout=10
// SILENT
// STATUS: 0
#include "../checks/common.h"

#include <pthread.h>

static struct rig r;
static struct ibv_mr *smr, *dmr;
static char src[64], dst[64];

static void *late_poster(void *arg) {
  (void)arg;
  sleep(1);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  return NULL;
}

int main(void) {
  rig_setup(&r, NULL);
  smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  pthread_t t;
  if (pthread_create(&t, NULL, late_poster, NULL)) DIE("pthread_create failed");
  struct ibv_wc wc;
  int got = 0;
  double end = rig_now() + 10.0;
  while (!got && rig_now() < end) {
    got = ibv_poll_cq(r.cq[0], 1, &wc);
    if (got < 0) DIE("poll failed");
  }
  if (!got || wc.status != IBV_WC_SUCCESS) DIE("the late WRITE did not complete");
  pthread_join(t, NULL);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
