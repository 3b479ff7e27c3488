/* chaos fence, planted (second kind): a forwarder READs a remote buffer
 * into a local one and SENDs the local buffer on, the SEND posted right
 * behind the READ without IBV_SEND_FENCE.  The IB ordering rules let the
 * SEND start, and gather its source, before the READ's response has
 * landed (ibv_post_send(3): IBV_SEND_FENCE holds a WR until the READs
 * ahead of it are done).  softnic without chaos executes in post order,
 * so the receiver gets what was read; under --chaos=fence the SEND runs
 * first and forwards the buffer's old bytes: abort() at the `crash` line.
 * The check unfenced-read-use reports the unfenced SEND with no chaos at
 * all (its marker below); the tests that look for the program's own break
 * turn it off (--checks=-unfenced-read-use).  fence_control_fenced_put.c
 * shows the fence that fixes both kinds. */
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "../checks/common.h"

#define ROUNDS 4 /* a campaign's run breaks in any one of them */

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t remote[8], local[8], in[8]; /* the source, the forwarder's buffer, the receiver's */
  struct ibv_mr *mremote = rig_reg(&r, remote, sizeof remote, RIG_ALL_ACCESS);
  struct ibv_mr *mlocal =
      rig_reg(&r, local, sizeof local, RIG_ALL_ACCESS);  // REGISTERED-AT: unfenced-read-use
  struct ibv_mr *min = rig_reg(&r, in, sizeof in, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    for (int i = 0; i < 8; ++i) remote[i] = 0x100 * (uint64_t)(k + 1) + (uint64_t)i; /* what is read */
    struct ibv_sge rs = rig_sge(min, in, sizeof in);
    struct ibv_recv_wr rw = {.wr_id = 100 + (uint64_t)k, .sg_list = &rs, .num_sge = 1}, *rbad;
    if (ibv_post_recv(r.qp[1], &rw, &rbad)) DIE("post_recv failed");
    struct ibv_sge sl = rig_sge(mlocal, local, sizeof local);
    struct ibv_send_wr rd = rig_write_wr(2 * (uint64_t)k + 1, &sl, (uintptr_t)remote, mremote->rkey, 1), *bad;
    rd.opcode = IBV_WR_RDMA_READ;
    struct ibv_send_wr fw = {.wr_id = 2 * (uint64_t)k + 2,
                             .sg_list = &sl,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED};              /* BUG: no IBV_SEND_FENCE */
    if (ibv_post_send(r.qp[0], &rd, &bad)) DIE("post_send (READ) failed");  // POSTED-AT: unfenced-read-use
    if (ibv_post_send(r.qp[0], &fw, &bad)) DIE("post_send (SEND) failed");  // CHECK: unfenced-read-use
    rig_poll_ok(r.cq[0], 2);
    rig_poll_ok(r.cq[1], 1);
    if (in[0] != remote[0]) abort();  // CHECK: crash
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mremote);
  ibv_dereg_mr(mlocal);
  ibv_dereg_mr(min);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
