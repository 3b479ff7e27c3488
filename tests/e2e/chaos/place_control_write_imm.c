/* chaos place, control: the reader of place_last_byte_flag.c done right.
 * The writer sends each buffer with RDMA WRITE_WITH_IMM, and the reader
 * uses the bytes only after the receive completion of the immediate, which
 * a NIC writes after the whole message has landed.  Silent under
 * --chaos=place: softnic places each message in chunks over several steps,
 * and writes both completions only after the last chunk. */
// RUN-OPTS: --chaos=place:p=1
// SILENT
// STATUS: 0
#include "place_pair.h"

static int reader(struct side *s) {
  static uint8_t buf[ROUNDS * MSG];
  side_open(s, buf, sizeof buf);
  side_connect(s);
  for (int k = 0; k < ROUNDS; ++k) { /* WRITE_WITH_IMM consumes a receive: no buffer needed */
    struct ibv_recv_wr rwr = {.wr_id = (uint64_t)k, .sg_list = NULL, .num_sge = 0}, *rbad;
    if (ibv_post_recv(s->qp, &rwr, &rbad)) DIE("post_recv failed");
  }
  if (write(s->to, "r", 1) != 1) DIE("write: %s", strerror(errno));
  for (int k = 0; k < ROUNDS; ++k) {
    struct ibv_wc wc;
    int got = 0;
    double end = rig_now() + 20.0;
    while (!got && rig_now() < end) got = ibv_poll_cq(s->cq, 1, &wc);
    if (got != 1) DIE("round %d never completed", k);
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM ||
        ntohl(wc.imm_data) != (uint32_t)k)
      DIE("round %d: %s, opcode %d", k, ibv_wc_status_str(wc.status), (int)wc.opcode);
    int whole = round_complete(buf + (size_t)k * MSG, k);
    char c;
    if (read(s->from, &c, 1) != 1) DIE("the writer is gone");
    if (!whole) abort();
    if (write(s->to, "k", 1) != 1) DIE("write: %s", strerror(errno));
  }
  side_close(s);
  return 0;
}

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  int up[2], down[2];
  if (pipe(up) || pipe(down)) DIE("pipe: %s", strerror(errno));
  pid_t child = fork();
  if (child < 0) DIE("fork: %s", strerror(errno));
  if (child == 0) {
    close(up[0]);
    close(down[1]);
    struct side s = {.to = up[1], .from = down[0]};
    _exit(reader(&s));
  }
  close(up[1]);
  close(down[0]);
  struct side s = {.to = down[1], .from = up[0]};
  return run_writer(&s, child, 1);
}
