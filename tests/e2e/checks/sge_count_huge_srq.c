/* sge-count: ibv_post_srq_recv with num_sge = 1000 whose list holds one
 * entry at the end of the mapping: reported, no SGE read past the SRQ's
 * max_sge, the post refused with bad_wr set. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char dst[64];
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_srq_init_attr sa = {.attr = {.max_wr = 16, .max_sge = 2}};
  struct ibv_srq *srq = ibv_create_srq(r.pd, &sa);
  if (!srq) DIE("ibv_create_srq failed: %s", strerror(errno));
  long page = sysconf(_SC_PAGESIZE);
  char *map = mmap(NULL, 2 * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED || mprotect(map + page, page, PROT_NONE)) DIE("mmap failed");
  struct ibv_sge *sge = (struct ibv_sge *)(map + page) - 1;
  *sge = rig_sge(dmr, dst, 8);
  struct ibv_recv_wr wr = {.wr_id = 1, .sg_list = sge, .num_sge = 1000}, *bad = NULL;
  int ret = ibv_post_srq_recv(srq, &wr, &bad);  // CHECK: sge-count
  printf("post_srq_recv with num_sge=1000 returned %d (bad_wr %s)\n", ret, bad == &wr ? "set" : "not set");
  if (ret == 0) DIE("the receive of 1000 SGEs was accepted");
  if (bad != &wr) DIE("bad_wr does not name the refused WR");
  if (ibv_destroy_srq(srq)) DIE("ibv_destroy_srq failed");
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
