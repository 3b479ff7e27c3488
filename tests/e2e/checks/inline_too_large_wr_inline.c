/* inline-too-large through the ibv_wr_* API: ibv_wr_set_inline_data with
 * one byte more than the returned max_inline_data.  softnic refuses the
 * batch at ibv_wr_complete (EINVAL); the check must still see the WR as the
 * program built it, reported at the ibv_wr_complete call. */
#include "qp_ex.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp_ex *x = make_qp_ex(&r, 32);
  const uint32_t max_inline = r.cap[0].max_inline_data;
  static char src[4096], dst[4096];
  if (max_inline + 1 > sizeof src) DIE("max_inline_data %u larger than the test expects", max_inline);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  ibv_wr_start(x);
  x->wr_id = 1;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_rdma_write(x, dmr->rkey, (uintptr_t)dst);
  ibv_wr_set_inline_data(x, src, max_inline + 1);
  int ret = ibv_wr_complete(x);  // CHECK: inline-too-large
  printf("ibv_wr_complete of %u inline bytes (max %u) returned %d\n", max_inline + 1, max_inline, ret);
  if (ret == 0) rig_drain(&r);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
