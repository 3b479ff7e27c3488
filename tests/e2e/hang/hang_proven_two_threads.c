/* hang, proven by the books, two threads: one polls the first QP's CQ, the
 * other blocks in ibv_get_cq_event on the completion channel both CQs
 * share, and nothing was posted: no WR outstanding, no receive posted, on
 * either CQ.  Every thread of the program waits, so nothing can ever
 * complete: reported a quarter second in, not at hang_timeout=10. */
// RUN-OPTS: --hang_timeout=10 --halt_on_error=1
// EXPECT: hang: no verbs progress for [0-9.]+ s while 2 threads wait: thread [0-9]+
// EXPECT: proven by the books: CQs 0x[0-9a-f]+, 0x[0-9a-f]+ have nothing outstanding that can complete
// EXPECT: blocks in ibv_get_cq_event on channel 0x[0-9a-f]+ \(CQ 0x[0-9a-f]+, CQ 0x[0-9a-f]+\)
// EXPECT: polls CQ 0x[0-9a-f]+ with no completion
// WITHIN: 3
// NO-DONE
// STATUS: 66
#include "../checks/common.h"

#include <pthread.h>

static struct rig r;

static void *waiter(void *arg) {
  (void)arg;
  struct ibv_cq *ev_cq;
  void *ev_ctx;
  if (ibv_req_notify_cq(r.cq[1], 0)) DIE("req_notify failed");
  if (ibv_get_cq_event(r.ch, &ev_cq, &ev_ctx) == 0) ibv_ack_cq_events(ev_cq, 1);
  return NULL;
}

int main(void) {
  rig_setup(&r, &(struct rig_opts){.channel = 1});
  struct ibv_wc wc;
  int got = 0;
  long polls = 0;
  while (!got) {
    got = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: hang
    if (got < 0) DIE("poll failed");
    /* The other thread starts once this one polls (the report's first
     * stack is the oldest wait's). */
    pthread_t t;
    if (++polls == 100 && pthread_create(&t, NULL, waiter, NULL)) DIE("pthread_create failed");
  }
  printf("DONE\n");
  return 0;
}
