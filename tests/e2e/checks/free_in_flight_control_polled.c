/* Control for free-in-flight: the WR's completion is polled and its MR
 * deregistered, then the buffer is freed; a page-sized mmap buffer goes the
 * same way with munmap. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char dst[4096];
  char *src = malloc(4096);
  if (!src) DIE("malloc failed");
  char *map = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) DIE("mmap failed");
  memset(src, 'x', 4096);
  memset(map, 'y', 8192);
  struct ibv_mr *smr = rig_reg(&r, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mmr = rig_reg(&r, map, 8192, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 4096);
  struct ibv_sge msge = rig_sge(mmr, map, 4096);
  struct ibv_send_wr wr = rig_write_wr(7, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  struct ibv_send_wr mwr = rig_write_wr(8, &msge, (uintptr_t)dst, dmr->rkey, 1);
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");
  if (ibv_post_send(r.qp[0], &mwr, &bad)) DIE("post failed");
  rig_poll_ok(r.cq[0], 2);
  if (ibv_dereg_mr(smr) || ibv_dereg_mr(mmr)) DIE("dereg failed");
  free(src);
  if (munmap(map, 8192)) DIE("munmap failed");
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
