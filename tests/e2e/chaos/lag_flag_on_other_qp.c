/* chaos lag, planted: data WRITTEN on one QP (in PARTS WRITEs), a "ready"
 * flag WRITTEN on another right after, without waiting for the data's
 * completions
 * (FlagCX#461, DeepEP#74: a signal on one connection overtook the data on
 * another).  Nothing orders two QPs: the IB spec orders the WRs of one QP
 * only, so the flag may land first, and the reader that trusts it reads
 * stale data.  Here the writer waits for the flag's completion, then the
 * reader (the same thread, between the writer's verbs calls) finds the
 * flag and checks the data; the writer reaps the data's completion last.
 * softnic without chaos executes each WRITE at its post, so plain
 * `rdmasan run` is silent; under --chaos=lag each QP's head WR waits a
 * step: the flag's QP one step, the data's QP one per part, so the flag
 * lands while parts are missing: abort() at the `crash` line.
 * lag_control_wait_data.c is the near miss.
 * Two QP pairs, each connected within the process (two rigs). */
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "../checks/common.h"

#define ROUNDS 4 /* a campaign's run breaks in any one of them */
#define DATA 256
#define PARTS 3 /* the data's WRITEs, posted as one chain */

static uint8_t pattern(int k, size_t i) { return (uint8_t)((i * 11 + (size_t)k * 29) % 251 + 1); }

int main(void) {
  struct rig a, b; /* a: the data's QPs, b: the flag's */
  rig_setup(&a, NULL);
  rig_setup(&b, NULL);
  static uint8_t data[DATA], src[DATA]; /* the reader's data, the writer's */
  static volatile uint64_t flag[1];     /* the reader's flag */
  static uint64_t flag_src[1];          /* the writer's flag value */
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
    /* BUG: the flag goes out on the other QP at once, the data's
     * completion not waited for. */
    if (ibv_post_send(b.qp[0], &wf, &bad)) DIE("post_send (flag) failed");
    rig_poll_ok(b.cq[0], 1); /* the flag's completion */
    if (flag[0] != (uint64_t)k + 1) DIE("round %d: the flag completed but is not there", k);
    int whole = 1; /* the reader: the flag is up, so the data is here, it assumes */
    for (size_t i = 0; i < DATA; ++i) whole &= data[i] == pattern(k, i);
    rig_poll_ok(a.cq[0], PARTS); /* the writer reaps the data's completions */
    if (!whole) abort();         // CHECK: crash
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
