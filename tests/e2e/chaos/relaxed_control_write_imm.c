/* chaos relaxed, control: relaxed_flag_last_word.c with the flag sent as
 * RDMA WRITE_WITH_IMM and the target waiting for the receive completion of
 * the immediate before it looks at the data, into the same relaxed-ordering
 * MR.  A WRITE_WITH_IMM never overtakes the WRITEs ahead of it (its
 * completion is ordered after their data), so under --chaos=relaxed the
 * data is always whole when the target looks, and the run is silent. */
#include "../checks/common.h"

#include <arpa/inet.h>

#define ROUNDS 4
#define DATA 1024

struct target {
  uint8_t data[DATA];
  volatile uint64_t flag;
};

static uint8_t pattern(int k, size_t i) { return (uint8_t)((i * 7 + (size_t)k * 31) % 251 + 1); }

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static struct target t;
  static uint8_t src[DATA];
  static uint64_t flag_src[1];
  struct ibv_mr *mt = rig_reg(&r, &t, sizeof t, RIG_ALL_ACCESS | IBV_ACCESS_RELAXED_ORDERING);
  struct ibv_mr *msrc = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mflag = rig_reg(&r, flag_src, sizeof flag_src, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    struct ibv_recv_wr rw = {.wr_id = 100 + (uint64_t)k}, *rbad; /* no SGE: the immediate only */
    if (ibv_post_recv(r.qp[1], &rw, &rbad)) DIE("post_recv failed");
    for (size_t i = 0; i < DATA; ++i) src[i] = pattern(k, i);
    flag_src[0] = (uint64_t)k + 1;
    struct ibv_sge sd = rig_sge(msrc, src, DATA), sf = rig_sge(mflag, flag_src, 8);
    struct ibv_send_wr wf = rig_write_wr(2 * (uint64_t)k + 2, &sf, (uintptr_t)&t.flag, mt->rkey, 1), *bad;
    struct ibv_send_wr wd = rig_write_wr(2 * (uint64_t)k + 1, &sd, (uintptr_t)t.data, mt->rkey, 1);
    wf.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    wf.imm_data = htonl((uint32_t)k + 1);
    wd.next = &wf;
    if (ibv_post_send(r.qp[0], &wd, &bad)) DIE("post_send failed");
    /* The target waits for the immediate's receive completion; the
     * writer's polls drive its WRs meanwhile. */
    struct ibv_wc wc[2], rc;
    int done = 0, got = 0;
    double end = rig_now() + 2.0;
    while (!got) {
      if (rig_now() > end) DIE("round %d: no receive completion", k);
      int n = ibv_poll_cq(r.cq[0], 2 - done, wc + done);
      if (n < 0) DIE("poll_cq failed");
      done += n;
      got = ibv_poll_cq(r.cq[1], 1, &rc);
      if (got < 0) DIE("poll_cq failed");
    }
    if (rc.status != IBV_WC_SUCCESS || ntohl(rc.imm_data) != (uint32_t)k + 1) DIE("round %d: bad receive", k);
    if (t.flag != (uint64_t)k + 1) DIE("round %d: the flag is not there", k);
    for (size_t i = 0; i < DATA; ++i)
      if (t.data[i] != pattern(k, i)) DIE("round %d: byte %zu is stale", k, i);
    if (done < 2) done += rig_poll_n(r.cq[0], wc + done, 2 - done);
    if (done != 2) DIE("round %d: %d completions", k, done);
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mt);
  ibv_dereg_mr(msrc);
  ibv_dereg_mr(mflag);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
