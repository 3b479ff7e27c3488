/* The error path of a setup that registers two buffers: when the second
 * registration fails, the cleanup deallocates the PD before deregistering
 * the first MR (destroy-in-use: a real provider refuses with EBUSY and the
 * MR leaks).  Only a failed ibv_reg_mr reaches that path.
 */
// FAULT-OPTS: --faults=reg_mr:nth=2
#include "../checks/common.h"

int main(void) {
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  if (!pd) DIE("ibv_alloc_pd: %s", strerror(errno));
  static char tx[4096], rx[4096];
  struct ibv_mr *txmr = ibv_reg_mr(pd, tx, sizeof tx, IBV_ACCESS_LOCAL_WRITE);
  if (!txmr) DIE("ibv_reg_mr(tx): %s", strerror(errno));
  struct ibv_mr *rxmr = ibv_reg_mr(pd, rx, sizeof rx, IBV_ACCESS_LOCAL_WRITE);
  if (!rxmr) {
    fprintf(stderr, "ibv_reg_mr(rx): %s; cleaning up\n", strerror(errno));
    ibv_dealloc_pd(pd);  // CHECK: destroy-in-use
    ibv_dereg_mr(txmr);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    printf("DONE\n");
    return 1;
  }
  ibv_dereg_mr(rxmr);
  ibv_dereg_mr(txmr);
  ibv_dealloc_pd(pd);
  ibv_close_device(ctx);
  printf("DONE\n");
  return 0;
}
