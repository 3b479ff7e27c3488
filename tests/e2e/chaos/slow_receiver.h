/* slow_receiver.h: a receiver that posts its receive late, shared by the
 * chaos programs.  The SEND of qp[0] then waits (RNR, retried forever)
 * until the receive is there: its completion comes later than the
 * sender's first wait, as with a busy peer.  Setup only, as in
 * ../checks/common.h: the calls a test is about stay in its own file. */
#ifndef RDMASAN_E2E_CHAOS_SLOW_RECEIVER_H
#define RDMASAN_E2E_CHAOS_SLOW_RECEIVER_H

#include "../checks/common.h" /* first: it defines _GNU_SOURCE */

#include <pthread.h>

struct slow_receiver {
  struct rig *r;
  struct ibv_mr *mr;
  char *buf;
  uint32_t len;
  pthread_t thread;
};

static void *slow_receiver_main(void *arg) {
  struct slow_receiver *s = arg;
  struct timespec nap = {0, 100 * 1000 * 1000}; /* 100 ms */
  nanosleep(&nap, NULL);
  struct ibv_sge sge = rig_sge(s->mr, s->buf, s->len);
  struct ibv_recv_wr wr = {.wr_id = 0x77, .sg_list = &sge, .num_sge = 1}, *bad;
  if (ibv_post_recv(s->r->qp[1], &wr, &bad)) DIE("post_recv");
  return NULL;
}

static inline void slow_receiver_start(struct slow_receiver *s) {
  if (pthread_create(&s->thread, NULL, slow_receiver_main, s)) DIE("pthread_create");
}

static inline void slow_receiver_join(struct slow_receiver *s) {
  if (pthread_join(s->thread, NULL)) DIE("pthread_join");
}

/* The receive's completion on qp[1]'s CQ within `seconds`: 1, else 0. */
static inline int slow_receiver_got(struct slow_receiver *s, double seconds) {
  struct ibv_wc wc;
  double end = rig_now() + seconds;
  while (rig_now() < end) {
    int n = ibv_poll_cq(s->r->cq[1], 1, &wc);
    if (n < 0) DIE("poll_cq");
    if (n == 1) return wc.status == IBV_WC_SUCCESS;
  }
  return 0;
}

#endif
