/* Control for inline-too-large: an IBV_SEND_INLINE WR of exactly
 * max_inline_data bytes from unregistered memory (lkey 0), split over two
 * SGEs. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, &(struct rig_opts){.max_inline = 64});
  const uint32_t max = r.cap[0].max_inline_data;
  if (max < 2) DIE("max_inline_data %u", max);
  char *src = calloc(1, max), *dst = calloc(1, max);
  if (!src || !dst) DIE("calloc failed");
  memset(src, 'i', max);
  struct ibv_mr *dmr = rig_reg(&r, dst, max, RIG_ALL_ACCESS);
  struct ibv_sge sge[2] = {{.addr = (uintptr_t)src, .length = max / 2, .lkey = 0},
                           {.addr = (uintptr_t)src + max / 2, .length = max - max / 2, .lkey = 0}};
  struct ibv_send_wr wr = rig_write_wr(1, sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  wr.num_sge = 2;
  wr.send_flags |= IBV_SEND_INLINE;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("inline post failed");
  rig_poll_ok(r.cq[0], 1);
  if (memcmp(src, dst, max)) DIE("inline data did not arrive");
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  free(src);
  free(dst);
  printf("DONE\n");
  return 0;
}
