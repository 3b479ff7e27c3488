/* thread-domain-race: two QPs made with one parent domain, so one thread
 * domain: the program promised the provider to serialise their verbs
 * (ibv_alloc_td(3)), and breaks it.  The main thread opens an ibv_wr_*
 * batch on qp[0] (ibv_wr_post(3): from ibv_wr_start to ibv_wr_complete is
 * the critical region, unlocked under a thread domain) and, inside it, lets
 * the other thread post to qp[1].  The overlap is certain, not a matter of
 * timing: the post starts only once the batch is open, and the batch ends
 * only after the post returned.
 * LIVE-ONLY: thread-domain-race
 * REPORT-HAS: of the same thread domain (#1)
 * REPORT-HAS: an ibv_wr_* batch (ibv_wr_start to ibv_wr_complete) on QP
 */
#include "td.h"

static struct td_rig t;
static int stage;

static void *poster(void *arg) {
  (void)arg;
  td_wait_stage(&stage, 1);
  struct ibv_sge sge;
  struct ibv_send_wr wr = td_write_wr(&t, 1, 2, &sge), *bad;
  if (ibv_post_send(t.qp[1], &wr, &bad)) DIE("ibv_post_send failed");  // CHECK: thread-domain-race
  td_set_stage(&stage, 2);
  return NULL;
}

int main(void) {
  td_open(&t);
  struct ibv_td_init_attr ta = {0};
  struct ibv_td *td = ibv_alloc_td(t.r.ctx, &ta);
  if (!td) DIE("ibv_alloc_td failed: %s", strerror(errno));
  struct ibv_parent_domain_init_attr pa;
  memset(&pa, 0, sizeof pa);
  pa.pd = t.r.pd;
  pa.td = td;
  struct ibv_pd *parent = ibv_alloc_parent_domain(t.r.ctx, &pa);  // CREATED-AT: thread-domain-race
  if (!parent) DIE("ibv_alloc_parent_domain failed: %s", strerror(errno));
  struct ibv_pd *parents[2] = {parent, parent};
  td_make_queues(&t, parents);

  pthread_t th;
  if (pthread_create(&th, NULL, poster, NULL)) DIE("pthread_create failed");
  struct ibv_qp_ex *x = t.qpx[0];
  ibv_wr_start(x);  // IN-VERBS-AT: thread-domain-race
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, t.mr->rkey, (uintptr_t)t.buf[1]);
  ibv_wr_set_sge(x, t.mr->lkey, (uintptr_t)t.buf[0], 8);
  td_set_stage(&stage, 1);
  td_wait_stage(&stage, 2); /* the other thread's post returned */
  if (ibv_wr_complete(x)) DIE("ibv_wr_complete failed");
  pthread_join(th, NULL);
  td_poll_one(&t, 0);
  td_poll_one(&t, 1);
  td_teardown(&t, &parent, &td, 1);
  printf("DONE\n");
  return 0;
}
