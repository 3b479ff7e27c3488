/* chaos gather, control: gather_send_buffer_reused.c done right: the
 * next message is written into the SEND's buffer only after the SEND's
 * completion (ibv_post_send(3)).  Under --chaos=gather the source is read
 * late or twice, but it holds the posted message until the completion:
 * the receiver gets each message as posted, and the run is silent (the
 * check buffer-modified-in-flight included). */
#include "../checks/common.h"

#define ROUNDS 4
#define LEN 64

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static uint64_t msg[LEN / 8], in[LEN / 8];
  struct ibv_mr *mmsg = rig_reg(&r, msg, sizeof msg, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *min = rig_reg(&r, in, sizeof in, IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < LEN / 8; ++i) msg[i] = (uint64_t)i; /* message 0 */
  for (int k = 0; k < ROUNDS; ++k) {
    struct ibv_sge rs = rig_sge(min, in, sizeof in);
    struct ibv_recv_wr rw = {.wr_id = 100 + (uint64_t)k, .sg_list = &rs, .num_sge = 1}, *rbad;
    if (ibv_post_recv(r.qp[1], &rw, &rbad)) DIE("post_recv failed");
    struct ibv_sge s = rig_sge(mmsg, msg, sizeof msg);
    struct ibv_send_wr w = {.wr_id = 1 + (uint64_t)k,
                            .sg_list = &s,
                            .num_sge = 1,
                            .opcode = IBV_WR_SEND,
                            .send_flags = IBV_SEND_SIGNALED},
                       *bad;
    if (ibv_post_send(r.qp[0], &w, &bad)) DIE("post_send failed");
    rig_poll_ok(r.cq[0], 1); /* the SEND completed: its buffer is ours again */
    for (int i = 0; i < LEN / 8; ++i) msg[i] = 0x100 * (uint64_t)(k + 1) + (uint64_t)i;
    rig_poll_ok(r.cq[1], 1);
    if (in[0] != 0x100 * (uint64_t)k)
      DIE("round %d: received 0x%llx, posted 0x%llx", k, (unsigned long long)in[0],
          (unsigned long long)(0x100 * (uint64_t)k));
  }
  rig_destroy_qps(&r);
  ibv_dereg_mr(mmsg);
  ibv_dereg_mr(min);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
