/* chaos gather, planted: a SEND's buffer is rewritten for the next
 * message after ibv_post_send and before the SEND's completion (Linux
 * xprtrdma commit 01bb35c89d90: a retransmission sent bytes the
 * sender had already changed).  ibv_post_send(3): the buffer may be
 * reused only after the completion; the NIC reads it by DMA at a moment of
 * its own in between, and again for a retransmission.  softnic without
 * chaos reads it at the post, so the receiver gets the value posted; under
 * --chaos=gather it reads it a step later (or twice, the second time
 * after the rewrite) and the receiver gets the next message's value:
 * abort() at the `crash` line.  The check buffer-modified-in-flight
 * reports the rewrite with no chaos at all, at the poll that retires the
 * SEND (its marker below): the tests that look for the program's own
 * break turn that check off (--checks=-buffer-modified-in-flight).
 * gather_control_wait_completion.c is the near miss. */
// EXPECT: crash: SIGABRT \(pc 0x[0-9a-f]+ bp 0x[0-9a-f]+ sp 0x[0-9a-f]+ T[0-9]+\); raised by the program
// SUMMARY: ^SUMMARY: rdmasan: crash [^ ]+ in [^ ]+$
// NO-DONE
// STATUS: 134
#include "../checks/common.h"

#define ROUNDS 4 /* a campaign's run breaks in any one of them */
#define LEN 64

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t msg[LEN / 8], in[LEN / 8];
  struct ibv_mr *mmsg =
      rig_reg(&r, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: buffer-modified-in-flight
  struct ibv_mr *min = rig_reg(&r, in, sizeof in, IBV_ACCESS_LOCAL_WRITE);
  for (int k = 0; k < ROUNDS; ++k) {
    struct ibv_sge rs = rig_sge(min, in, sizeof in);
    struct ibv_recv_wr rw = {.wr_id = 100 + (uint64_t)k, .sg_list = &rs, .num_sge = 1}, *rbad;
    if (ibv_post_recv(r.qp[1], &rw, &rbad)) DIE("post_recv failed");
    for (int i = 0; i < LEN / 8; ++i) msg[i] = 0x100 * (uint64_t)k + (uint64_t)i; /* message k */
    struct ibv_sge s = rig_sge(mmsg, msg, sizeof msg);
    struct ibv_send_wr w = {.wr_id = 1 + (uint64_t)k,
                            .sg_list = &s,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(r.qp[0], &w, &bad)) DIE("post_send failed");  // POSTED-AT: buffer-modified-in-flight
    /* BUG: the next message is prepared in the buffer of the SEND still
     * outstanding. */
    for (int i = 0; i < LEN / 8; ++i) msg[i] = 0x100 * (uint64_t)(k + 1) + (uint64_t)i;
    struct ibv_wc wc;
    int n;
    double end = rig_now() + 2.0;
    while ((n = ibv_poll_cq(r.cq[0], 1, &wc)) == 0 && rig_now() < end) {}  // CHECK: buffer-modified-in-flight
    if (n != 1 || wc.status != IBV_WC_SUCCESS) DIE("round %d: no good send completion", k);
    rig_poll_ok(r.cq[1], 1);                    /* the receiver has message k, it expects */
    if (in[0] != 0x100 * (uint64_t)k) abort();  // CHECK: crash
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mmsg);
  ibv_dereg_mr(min);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
