/* Control for thread-domain-race: the shape of thread_domain_race.c (one
 * thread inside an ibv_wr_* batch on qp[0] while another posts to qp[1]),
 * but each QP made with a parent domain of its own thread domain: each
 * thread domain is used by one thread at a time, as promised. */
#include "td.h"

static struct td_rig t;
static int stage;

static void *poster(void *arg) {
  (void)arg;
  td_wait_stage(&stage, 1);
  struct ibv_sge sge;
  struct ibv_send_wr wr = td_write_wr(&t, 1, 2, &sge), *bad;
  if (ibv_post_send(t.qp[1], &wr, &bad)) DIE("ibv_post_send failed");
  td_set_stage(&stage, 2);
  return NULL;
}

int main(void) {
  td_open(&t);
  struct ibv_td_init_attr ta = {0};
  struct ibv_td *tds[2];
  struct ibv_pd *parents[2];
  for (int i = 0; i < 2; ++i) {
    tds[i] = ibv_alloc_td(t.r.ctx, &ta);
    if (!tds[i]) DIE("ibv_alloc_td failed: %s", strerror(errno));
    struct ibv_parent_domain_init_attr pa;
    memset(&pa, 0, sizeof pa);
    pa.pd = t.r.pd;
    pa.td = tds[i];
    parents[i] = ibv_alloc_parent_domain(t.r.ctx, &pa);
    if (!parents[i]) DIE("ibv_alloc_parent_domain failed: %s", strerror(errno));
  }
  td_make_queues(&t, parents);

  pthread_t th;
  if (pthread_create(&th, NULL, poster, NULL)) DIE("pthread_create failed");
  struct ibv_qp_ex *x = t.qpx[0];
  ibv_wr_start(x);
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
  td_teardown(&t, parents, tds, 2);
  printf("DONE\n");
  return 0;
}
