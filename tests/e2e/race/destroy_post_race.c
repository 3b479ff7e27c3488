/* destroy_post_race: a program bug rdmasan must survive.  One thread
 * destroys a QP (plain, or an ibv_qp_ex) while another posts to it, round
 * after round; rdmasan may report the posts that come after the destroy
 * (use-after-destroy), but its own books must stay whole: no crash, no
 * heap corruption, no sanitizer report against rdmasan's code (the test
 * runs in the asan and tsan presets too).  Prints "race: PASS" at the end.
 *
 * usage: destroy_post_race [rounds] */
#include "../checks/common.h"

#include <pthread.h>
#include <stdatomic.h>

struct round {
  struct rig *r;
  struct ibv_qp *qp;
  struct ibv_qp_ex *qpx; /* non-null: post with the ibv_wr_* API */
  struct ibv_mr *smr, *dmr;
  char *src, *dst;
  atomic_int go, destroyed;
};

static void *poster(void *arg) {
  struct round *rd = arg;
  while (!atomic_load(&rd->go)) {}
  int outstanding = 0; /* within the SQ's 16: no sq-overflow to report */
  for (int i = 0; i < 200000; ++i) {
    struct ibv_wc wc[16];
    int got = ibv_poll_cq(rd->r->cq[0], 16, wc); /* the CQ outlives the round */
    if (got > 0) outstanding -= got;
    if (outstanding >= 8) {
      if (atomic_load(&rd->destroyed)) break;
      continue;
    }
    struct ibv_sge sge = rig_sge(rd->smr, rd->src, 8);
    int ret;
    if (rd->qpx) {
      ibv_wr_start(rd->qpx);
      rd->qpx->wr_id = i;
      rd->qpx->wr_flags = IBV_SEND_SIGNALED;
      ibv_wr_rdma_write(rd->qpx, rd->dmr->rkey, (uintptr_t)rd->dst);
      ibv_wr_set_sge(rd->qpx, sge.lkey, sge.addr, sge.length);
      ret = ibv_wr_complete(rd->qpx);
    } else {
      struct ibv_send_wr wr = rig_write_wr(i, &sge, (uintptr_t)rd->dst, rd->dmr->rkey, 1), *bad;
      ret = ibv_post_send(rd->qp, &wr, &bad);
    }
    if (!ret) ++outstanding;
    if (ret && atomic_load(&rd->destroyed)) break;
  }
  return NULL;
}

static struct ibv_qp *new_qp(struct rig *r, int ex) {
  struct ibv_qp_init_attr_ex ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = r->cq[0];
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 16;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 2;
  ia.pd = r->pd;
  ia.comp_mask = IBV_QP_INIT_ATTR_PD;
  if (ex) {
    ia.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    ia.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE;
  }
  struct ibv_qp *qp = ibv_create_qp_ex(r->ctx, &ia);
  if (!qp) DIE("ibv_create_qp_ex failed: %s", strerror(errno));
  return qp;
}

int main(int argc, char **argv) {
  int rounds = argc > 1 ? atoi(argv[1]) : 40;
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  rig_destroy_qps(&r);
  for (int n = 0; n < rounds; ++n) {
    const int ex = n % 2;
    struct ibv_qp *a = new_qp(&r, ex), *b = new_qp(&r, 0);
    rig_connect_qp(&r, a, b->qp_num, 0);
    rig_connect_qp(&r, b, a->qp_num, 0);
    struct round rd = {.r = &r,
                       .qp = a,
                       .qpx = ex ? ibv_qp_to_qp_ex(a) : NULL,
                       .smr = smr,
                       .dmr = dmr,
                       .src = src,
                       .dst = dst};
    pthread_t t;
    if (pthread_create(&t, NULL, poster, &rd)) DIE("pthread_create failed");
    atomic_store(&rd.go, 1);
    for (volatile int spin = 0; spin < (n * 7919) % 20000; ++spin) {}
    if (ibv_destroy_qp(a)) DIE("ibv_destroy_qp failed");
    atomic_store(&rd.destroyed, 1);
    pthread_join(t, NULL);
    if (ibv_destroy_qp(b)) DIE("ibv_destroy_qp failed");
    struct ibv_wc wc[16];
    while (ibv_poll_cq(r.cq[0], 16, wc) > 0) {}
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("race: PASS %d rounds\n", rounds);
  return 0;
}
