/* sge-count: a receive with num_sge = 1000 whose list holds one entry at
 * the end of the mapping: reported, no SGE read past the QP's limit, the
 * post refused with bad_wr set. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_recv_sge = 2});
  static char dst[64];
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  long page = sysconf(_SC_PAGESIZE);
  char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || mprotect(map + page, page, PROT_NONE)) DIE("mmap failed");
  struct ibv_sge *sge = (struct ibv_sge *)(map + page) - 1;
  *sge = rig_sge(dmr, dst, 8);
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = sge, .num_sge = 1000}, *bad = NULL;
  int ret = ibv_post_recv(r.qp[1], &wr, &bad);  // CHECK: sge-count
  printf("post_recv with num_sge=1000 returned %d (bad_wr %s)\n", ret, bad == &wr ? "set" : "not set");
  if (ret == 0) DIE("the receive of 1000 SGEs was accepted");
  if (bad != &wr) DIE("bad_wr does not name the refused WR");
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
