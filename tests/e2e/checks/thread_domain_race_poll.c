/* thread-domain-race, on the CQs: both CQs are made with one parent domain
 * (ibv_create_cq_ex's parent_domain), so one thread domain.  The main
 * thread holds cq[0] in an extended poll (from a successful ibv_start_poll
 * to ibv_end_poll) while the other thread polls cq[1] with ibv_poll_cq.
 * The overlap is certain: the other thread polls only once the extended
 * poll has begun, which ends only after that poll returned.
 * LIVE-ONLY: thread-domain-race
 * REPORT-HAS: entered ibv_poll_cq on CQ
 * REPORT-HAS: an extended poll (ibv_start_poll to ibv_end_poll) on CQ
 */
#include "td.h"

static struct td_rig t;
static int stage;

static void *poller(void *arg) {
  (void)arg;
  td_wait_stage(&stage, 1);
  struct ibv_wc wc;
  struct ibv_cq *cq = ibv_cq_ex_to_cq(t.cq[1]);
  int n = ibv_poll_cq(cq, 1, &wc);  // CHECK: thread-domain-race
  if (n < 0) DIE("ibv_poll_cq failed");
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

  struct ibv_sge sge;
  struct ibv_send_wr wr = td_write_wr(&t, 0, 1, &sge), *bad;
  if (ibv_post_send(t.qp[0], &wr, &bad)) DIE("ibv_post_send failed");
  pthread_t th;
  if (pthread_create(&th, NULL, poller, NULL)) DIE("pthread_create failed");
  struct ibv_poll_cq_attr attr = {0};
  int rc;
  double end = rig_now() + 2.0;
  do {
    rc = ibv_start_poll(t.cq[0], &attr);  // IN-VERBS-AT: thread-domain-race
  } while (rc == ENOENT && rig_now() < end);
  if (rc) DIE("no completion: ibv_start_poll returned %d", rc);
  if (t.cq[0]->status != IBV_WC_SUCCESS) DIE("completion: %s", ibv_wc_status_str(t.cq[0]->status));
  td_set_stage(&stage, 1);
  td_wait_stage(&stage, 2); /* the other thread's poll returned */
  ibv_end_poll(t.cq[0]);
  pthread_join(th, NULL);
  td_teardown(&t, &parent, &td, 1);
  printf("DONE\n");
  return 0;
}
