/* dereg-in-flight: a TM SRQ's tagged buffer (ibv_post_srq_ops TAG_ADD) is
 * the device's until the message that matches it has landed (TM_RECV with
 * TM_DATA_VALID) or a removal of it has completed.  Here its MR is
 * deregistered while the tag is still posted: a message for the tag could
 * land in it at any moment. */
#include "tm.h"

int main(void) {
  struct tm_rig t;
  tm_setup(&t);
  static char buf[256];
  struct ibv_mr *mr =
      rig_reg(&t.r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: dereg-in-flight
  struct ibv_sge sge = rig_sge(mr, buf, sizeof buf);
  struct ibv_ops_wr op = tm_add_wr(0x11, &sge, 0x42, 0x1001, 0), *bad;
  if (ibv_post_srq_ops(t.srq, &op, &bad)) DIE("TAG_ADD failed");  // POSTED-AT: dereg-in-flight
  if (ibv_dereg_mr(mr)) DIE("dereg failed");                      // CHECK: dereg-in-flight
  tm_teardown(&t);
  printf("DONE\n");
  return 0;
}
