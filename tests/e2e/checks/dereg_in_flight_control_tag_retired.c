/* dereg-in-flight near-miss: tag matching as a program should drive it.
 * A tagged buffer is added (signaled: its TM_ADD completion comes first),
 * an eager message matches it (TM_RECV, TM_MATCH | TM_DATA_VALID), a
 * message for a tag nobody posted lands in an ordinary receive of the SRQ
 * (TM_RECV, no TM flags), and a second tag is removed with a signaled
 * TAG_DEL whose TM_DEL completion is polled.  Every buffer is then the
 * program's again: deregistering their MRs is silent. */
#include "tm.h"

int main(void) {
  struct tm_rig t;
  tm_setup(&t);
  static char tagged[256], spare[256], unexpected[256];
  struct ibv_mr *mr = rig_reg(&t.r, tagged, sizeof tagged, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *smr = rig_reg(&t.r, spare, sizeof spare, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *umr = rig_reg(&t.r, unexpected, sizeof unexpected, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_sge usge = rig_sge(umr, unexpected, sizeof unexpected);
  struct ibv_recv_wr rwr, *rbad;
  memset(&rwr, 0, sizeof rwr);
  rwr.wr_id = 0x77;
  rwr.sg_list = &usge;
  rwr.num_sge = 1;
  if (ibv_post_srq_recv(t.srq, &rwr, &rbad)) DIE("post_srq_recv failed");

  struct ibv_sge sge = rig_sge(mr, tagged, sizeof tagged);
  struct ibv_ops_wr op = tm_add_wr(0x11, &sge, 0x42, 0x1001, 1), *bad;
  if (ibv_post_srq_ops(t.srq, &op, &bad)) DIE("TAG_ADD failed");
  struct ibv_wc wc = tm_poll(&t, 0);
  if (wc.opcode != IBV_WC_TM_ADD || wc.wr_id != 0x11) DIE("expected TM_ADD, got opcode %d", wc.opcode);

  tm_send(&t, IBV_TMH_EAGER, 0x42, "hello");
  wc = tm_poll(&t, 0);
  if (wc.opcode != IBV_WC_TM_RECV || wc.wr_id != 0x1001 ||
      (wc.wc_flags & (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID)) != (IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID))
    DIE("expected the tagged buffer's TM_RECV, got opcode %d wr_id 0x%llx", wc.opcode,
        (unsigned long long)wc.wr_id);
  if (memcmp(tagged, "hello", 5)) DIE("the tagged buffer does not hold the message");

  tm_send(&t, IBV_TMH_EAGER, 0x43, "nobody asked");
  wc = tm_poll(&t, 0);
  if (wc.opcode != IBV_WC_TM_RECV || wc.wr_id != 0x77 || (wc.wc_flags & IBV_WC_TM_MATCH))
    DIE("expected the unexpected message in the SRQ receive, got opcode %d", wc.opcode);

  struct ibv_sge ssge = rig_sge(smr, spare, sizeof spare);
  op = tm_add_wr(0x12, &ssge, 0x44, 0x1002, 0);
  op.tm.unexpected_cnt = 1; /* in phase: one unexpected message seen */
  if (ibv_post_srq_ops(t.srq, &op, &bad)) DIE("TAG_ADD failed");
  struct ibv_ops_wr del;
  memset(&del, 0, sizeof del);
  del.wr_id = 0x13;
  del.opcode = IBV_WR_TAG_DEL;
  del.flags = IBV_OPS_SIGNALED;
  del.tm.handle = op.tm.handle;
  if (ibv_post_srq_ops(t.srq, &del, &bad)) DIE("TAG_DEL failed");
  wc = tm_poll(&t, 0);
  if (wc.opcode != IBV_WC_TM_DEL || wc.wr_id != 0x13) DIE("expected TM_DEL, got opcode %d", wc.opcode);

  if (ibv_dereg_mr(mr) || ibv_dereg_mr(smr) || ibv_dereg_mr(umr)) DIE("dereg failed");
  tm_teardown(&t);
  printf("DONE\n");
  return 0;
}
