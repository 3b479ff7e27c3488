/* sge-count: num_sge = 1000 on a WR whose list holds one entry, which ends
 * where the mapping ends.  The shim must report it and read no SGE past
 * what the QP allows (it used to copy up to 1024 and crash); the provider
 * refuses the post. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_send_sge = 2});
  static char src[64], dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  /* One SGE at the very end of a page whose next page is inaccessible. */
  long page = sysconf(_SC_PAGESIZE);
  char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || mprotect(map + page, page, PROT_NONE)) DIE("mmap failed");
  struct ibv_sge *sge = (struct ibv_sge *)(map + page) - 1;
  *sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(1, sge, (uintptr_t)dst, dmr->rkey, 1), *bad = NULL;
  wr.num_sge = 1000;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: sge-count
  printf("post with num_sge=1000 returned %d (bad_wr %s)\n", ret, bad == &wr ? "set" : "not set");
  if (ret == 0) DIE("the post of 1000 SGEs was accepted");
  if (bad != &wr) DIE("bad_wr does not name the refused WR");
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
