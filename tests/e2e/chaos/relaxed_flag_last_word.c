/* chaos relaxed, planted: data then a "ready" flag, two RDMA WRITEs into
 * memory registered with IBV_ACCESS_RELAXED_ORDERING, and a target that
 * polls the flag in memory, then uses the data.  ibv_reg_mr(3): relaxed
 * ordering lets the system reorder the accesses to such an MR (PCIe
 * relaxed-ordering writes pass each other), so the flag WRITE may land
 * before the data WRITE posted ahead of it; only a completion, or the
 * receive completion of an immediate, says the data is there.  softnic
 * without chaos lands them in post order, so plain `rdmasan run` is
 * silent; under --chaos=relaxed the flag lands first and the data a step
 * later: the target, polling between the writer's verbs calls (one
 * thread plays both sides), finds the flag and stale data: abort() at the
 * `crash` line.  relaxed_control_write_imm.c is the near miss. */
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "../checks/common.h"

#define ROUNDS 4  /* a campaign's run breaks in any one of them */
#define DATA 1024 /* the data; the flag is the target's last word */

struct target {
  uint8_t data[DATA];
  volatile uint64_t flag;
};

static uint8_t pattern(int k, size_t i) { return (uint8_t)((i * 7 + (size_t)k * 31) % 251 + 1); }

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static struct target t;      /* the target side's memory */
  static uint8_t src[DATA];    /* the writer's data */
  static uint64_t flag_src[1]; /* and its flag value */
  struct ibv_mr *mt = rig_reg(&r, &t, sizeof t, RIG_ALL_ACCESS | IBV_ACCESS_RELAXED_ORDERING);
  struct ibv_mr *msrc = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mflag = rig_reg(&r, flag_src, sizeof flag_src, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    for (size_t i = 0; i < DATA; ++i) src[i] = pattern(k, i);
    flag_src[0] = (uint64_t)k + 1;
    struct ibv_sge sd = rig_sge(msrc, src, DATA), sf = rig_sge(mflag, flag_src, 8);
    struct ibv_send_wr wf = rig_write_wr(2 * (uint64_t)k + 2, &sf, (uintptr_t)&t.flag, mt->rkey, 1), *bad;
    struct ibv_send_wr wd = rig_write_wr(2 * (uint64_t)k + 1, &sd, (uintptr_t)t.data, mt->rkey, 1);
    wd.next = &wf; /* BUG: a plain WRITE for the flag, into the relaxed MR */
    if (ibv_post_send(r.qp[0], &wd, &bad)) DIE("post_send failed");
    /* The target: the flag says the data is here, it assumes. */
    struct ibv_wc wc[2];
    int done = 0;
    double end = rig_now() + 2.0;
    while (t.flag != (uint64_t)k + 1) {
      if (rig_now() > end) DIE("round %d: the flag never arrived", k);
      int n = ibv_poll_cq(r.cq[0], 2 - done, wc + done); /* the writer's progress */
      if (n < 0) DIE("poll_cq failed");
      done += n;
    }
    int whole = 1;
    for (size_t i = 0; i < DATA; ++i) whole &= t.data[i] == pattern(k, i);
    if (done < 2) done += rig_poll_n(r.cq[0], wc + done, 2 - done); /* the writer reaps */
    if (done != 2) DIE("round %d: %d completions", k, done);
    if (!whole) abort();  // CHECK: crash
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mt);
  ibv_dereg_mr(msrc);
  ibv_dereg_mr(mflag);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
