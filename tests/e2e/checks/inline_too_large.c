/* inline-too-large: an IBV_SEND_INLINE WR one byte larger than the QP's
 * returned max_inline_data. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_inline = 64});  // CREATED-AT: inline-too-large
  const uint32_t max = r.cap[0].max_inline_data;
  char *src = calloc(1, max + 1), *dst = calloc(1, max + 1);
  if (!src || !dst) DIE("calloc failed");
  struct ibv_mr *dmr = rig_reg(&r, dst, max + 1, RIG_ALL_ACCESS);
  struct ibv_sge sge = {.addr = (uintptr_t)src, .length = max + 1, .lkey = 0};
  struct ibv_send_wr wr = rig_write_wr(1, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  wr.send_flags |= IBV_SEND_INLINE;
  int ret = ibv_post_send(r.qp[0], &wr, &bad);  // CHECK: inline-too-large
  printf("inline post of %u bytes (max %u) returned %d\n", max + 1, max, ret);
  struct ibv_wc wc;
  if (ret == 0) rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  free(src);
  free(dst);
  printf("DONE\n");
  return 0;
}
