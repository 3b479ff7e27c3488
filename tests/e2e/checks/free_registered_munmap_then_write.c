/* free-registered, munmap flavour, then the device uses the MR: the page
 * under a live MR is unmapped and an RDMA WRITE is posted from it.  The
 * shim reports the munmap; the device must not fault the process (issue 10
 * item 7): the WRITE completes with a local protection error. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *src = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (src == MAP_FAILED) DIE("mmap failed");
  static char dst[4096];
  struct ibv_mr *smr = rig_reg(&r, src, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  if (munmap(src, 4096)) DIE("munmap failed");  // CHECK: free-registered
  struct ibv_sge sge = rig_sge(smr, src, 64);
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad = NULL;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("ibv_post_send failed");
  struct ibv_wc wc;
  if (rig_poll_n(r.cq[0], &wc, 1) != 1) DIE("no completion for the WRITE");
  if (wc.status != IBV_WC_LOC_PROT_ERR) DIE("WRITE from unmapped memory: %s", ibv_wc_status_str(wc.status));
  rig_drain(&r);
  rig_destroy_qps(&r);
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
