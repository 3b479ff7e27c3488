/* Control for thread-domain-race: two threads drive the QPs and CQs of one
 * thread domain as hard as they can, each call under one mutex, as the
 * promise of ibv_alloc_td(3) asks: posts, ibv_wr_* batches, ibv_poll_cq and
 * extended polls, 300 rounds each, never two threads inside at once. */
#include "td.h"

static struct td_rig t;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

/* One signaled RDMA WRITE on qp[i], posted one way or the other. */
static void post_one(int i, int round) {
  if (round % 2) {
    struct ibv_sge sge;
    struct ibv_send_wr wr = td_write_wr(&t, i, (uint64_t)round, &sge), *bad;
    if (ibv_post_send(t.qp[i], &wr, &bad)) DIE("ibv_post_send failed");
    return;
  }
  struct ibv_qp_ex *x = t.qpx[i];
  ibv_wr_start(x);
  x->wr_id = (uint64_t)round;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, t.mr->rkey, (uintptr_t)t.buf[1 - i]);
  ibv_wr_set_sge(x, t.mr->lkey, (uintptr_t)t.buf[i], 8);
  if (ibv_wr_complete(x)) DIE("ibv_wr_complete failed");
}

/* Its completion on cq[i], polled one way or the other; 1 when it came. */
static int poll_one(int i, int round) {
  if (round % 2) {
    struct ibv_wc wc;
    int n = ibv_poll_cq(ibv_cq_ex_to_cq(t.cq[i]), 1, &wc);
    if (n < 0 || (n == 1 && wc.status != IBV_WC_SUCCESS)) DIE("ibv_poll_cq: a bad completion");
    return n;
  }
  struct ibv_poll_cq_attr attr = {0};
  int rc = ibv_start_poll(t.cq[i], &attr);
  if (rc == ENOENT) return 0;
  if (rc) DIE("ibv_start_poll returned %d", rc);
  if (t.cq[i]->status != IBV_WC_SUCCESS) DIE("completion: %s", ibv_wc_status_str(t.cq[i]->status));
  ibv_end_poll(t.cq[i]);
  return 1;
}

static void *worker(void *arg) {
  const int i = (int)(intptr_t)arg;
  for (int round = 0; round < 300; ++round) {
    pthread_mutex_lock(&mu);
    post_one(i, round);
    pthread_mutex_unlock(&mu);
    int got = 0;
    double end = rig_now() + 2.0;
    while (!got && rig_now() < end) {
      pthread_mutex_lock(&mu);
      got = poll_one(i, round);
      pthread_mutex_unlock(&mu);
    }
    if (!got) DIE("thread %d: no completion in round %d", i, round);
  }
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
  struct ibv_pd *parent = ibv_alloc_parent_domain(t.r.ctx, &pa);
  if (!parent) DIE("ibv_alloc_parent_domain failed: %s", strerror(errno));
  struct ibv_pd *parents[2] = {parent, parent};
  td_make_queues(&t, parents);
  pthread_t th[2];
  for (int i = 0; i < 2; ++i)
    if (pthread_create(&th[i], NULL, worker, (void *)(intptr_t)i)) DIE("pthread_create failed");
  for (int i = 0; i < 2; ++i) pthread_join(th[i], NULL);
  td_teardown(&t, &parent, &td, 1);
  printf("DONE\n");
  return 0;
}
