/* chaos lag, control: lag_flag_on_other_qp.c done right: the writer
 * waits for the data WRITEs' completions on their QP before it posts the
 * flag on the other QP (a completion says the data is placed at the
 * target, whatever order two QPs keep).  Under --chaos=lag either QP may
 * wait a step, but the flag never lands before the data: the reader finds
 * the data whole in every round, and the run is silent. */
#include "../checks/common.h"

#define ROUNDS 4
#define DATA 256
#define PARTS 3

static uint8_t pattern(int k, size_t i) { return (uint8_t)((i * 11 + (size_t)k * 29) % 251 + 1); }

int main(void) {
  struct rig a, b;
  rig_setup(&a, NULL);
  rig_setup(&b, NULL);
  static uint8_t data[DATA], src[DATA];
  static volatile uint64_t flag[1];
  static uint64_t flag_src[1];
  struct ibv_mr *mdata = rig_reg(&a, data, sizeof data, RIG_ALL_ACCESS);
  struct ibv_mr *msrc = rig_reg(&a, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mflag = rig_reg(&b, (void *)flag, sizeof flag, RIG_ALL_ACCESS);
  struct ibv_mr *mfsrc = rig_reg(&b, flag_src, sizeof flag_src, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    for (size_t i = 0; i < DATA; ++i) src[i] = pattern(k, i);
    flag_src[0] = (uint64_t)k + 1;
    struct ibv_sge sd[PARTS], sf = rig_sge(mfsrc, flag_src, 8);
    struct ibv_send_wr wd[PARTS], *bad;
    for (int j = 0; j < PARTS; ++j) {
      const size_t off = (size_t)j * DATA / PARTS, len = (size_t)(j + 1) * DATA / PARTS - off;
      sd[j] = rig_sge(msrc, src + off, (uint32_t)len);
      wd[j] = rig_write_wr(PARTS * (uint64_t)k + (uint64_t)j + 1, &sd[j], (uintptr_t)(data + off),
                           mdata->rkey, 1);
      wd[j].next = j + 1 < PARTS ? &wd[j + 1] : NULL;
    }
    struct ibv_send_wr wf = rig_write_wr(1 + (uint64_t)k, &sf, (uintptr_t)flag, mflag->rkey, 1);
    if (ibv_post_send(a.qp[0], wd, &bad)) DIE("post_send (data) failed");
    rig_poll_ok(a.cq[0], PARTS); /* the data's completions first */
    if (ibv_post_send(b.qp[0], &wf, &bad)) DIE("post_send (flag) failed");
    rig_poll_ok(b.cq[0], 1);
    if (flag[0] != (uint64_t)k + 1) DIE("round %d: the flag completed but is not there", k);
    for (size_t i = 0; i < DATA; ++i)
      if (data[i] != pattern(k, i)) DIE("round %d: byte %zu is stale", k, i);
  }
  rig_destroy_qps(&a);
  rig_destroy_qps(&b);
  ibv_dereg_mr(mdata);
  ibv_dereg_mr(msrc);
  ibv_dereg_mr(mflag);
  ibv_dereg_mr(mfsrc);
  rig_teardown(&a);
  rig_teardown(&b);
  printf("DONE\n");
  return 0;
}
