/* hang, not provable: the main thread polls a CQ on which nothing can
 * complete (nothing was posted), but another thread of the program sleeps
 * outside verbs and could post when it wakes.  The books cannot prove the
 * hang, so it is left to hang_timeout=1: reported then, without the
 * proof's words.  The main thread gives up after 3 s. */
// RUN-OPTS: --hang_timeout=1
// EXPECT: hang: no verbs progress for [0-9]+ s while 1 thread waits: thread [0-9]+ polls CQ 0x[0-9a-f]+ with
// EXPECT-NOT: proven by the books
// STATUS: 66
#include "../checks/common.h"

#include <pthread.h>

static void *sleeper(void *arg) {
  (void)arg;
  sleep(30);
  return NULL;
}

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  pthread_t t;
  if (pthread_create(&t, NULL, sleeper, NULL)) DIE("pthread_create failed");
  struct ibv_wc wc;
  int got = 0;
  double end = rig_now() + 3.0;
  while (!got && rig_now() < end) {
    got = ibv_poll_cq(r.cq[0], 1, &wc);  // CHECK: hang
    if (got < 0) DIE("poll failed");
  }
  printf("completion %s\n", got ? "arrived" : "never came");
  rig_teardown(&r);
  printf("DONE\n");
  return 0; /* the sleeper still sleeps: exit() ends it */
}
