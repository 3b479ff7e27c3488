/* free-in-flight: the heap buffer of an outstanding RDMA WRITE is freed
 * before the WR's completion is polled (its MR is still registered, so
 * free-registered may be reported too; this test is about its own id). */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char dst[4096];
  char *src = malloc(4096);
  if (!src) DIE("malloc failed");
  memset(src, 'x', 4096);
  struct ibv_mr *smr = rig_reg(&r, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 4096);
  struct ibv_send_wr wr = rig_write_wr(7, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");  // POSTED-AT: free-in-flight
  usleep(10000); /* let softnic move the data; the completion stays unpolled */
  free(src);     // CHECK: free-in-flight
  struct ibv_wc wc;
  rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
