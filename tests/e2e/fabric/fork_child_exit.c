/* fork_child_exit: a forked child that calls exit() must leave its parent's
 * softnic state alone (issue 10 item 5).
 *
 * The parent sets up two connected RC QPs, makes one Error finding
 * (sge-count) and forks with live MRs (fork-with-mrs).  The child exits at
 * once through exit(), so every atexit handler runs in it.  Afterwards the
 * parent's fabric file (argv[1]) must still exist, a SEND/RECV between the
 * parent's QPs must complete, and the child must have exited 0 without
 * printing the parent's findings (the runner checks its pid, printed as
 * "CHILD <pid>", against the output).
 *
 * Exit status: rdmasan's exitcode (the parent's finding), 3 setup failure,
 * 4 the child failed, 5 the fabric file vanished, 6 SEND/RECV did not
 * complete. */
#include "../checks/common.h"

int main(int argc, char **argv) {
  if (argc != 2) DIE("usage: fork_child_exit FABRIC_FILE");
  struct rig r;
  rig_setup(&r, NULL);
  static char src[64] = "hello through the fabric", dst[64];
  struct ibv_mr *smr = rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);

  /* One Error finding of the parent: more SGEs than the QP allows. */
  struct ibv_sge three[3] = {rig_sge(dmr, dst, 8), rig_sge(dmr, dst + 8, 8), rig_sge(dmr, dst + 16, 8)};
  struct ibv_recv_wr rwr = {.wr_id = 7, .sg_list = three, .num_sge = 3}, *rbad;
  if (ibv_post_recv(r.qp[1], &rwr, &rbad) == 0) DIE("post_recv with 3 SGEs on a 2-SGE QP succeeded");

  pid_t child = fork();
  if (child < 0) DIE("fork: %s", strerror(errno));
  if (child == 0) exit(0);
  printf("CHILD %d\n", (int)child);
  int status = 0;
  if (waitpid(child, &status, 0) != child) DIE("waitpid: %s", strerror(errno));
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    printf("FAIL: the child ended with status 0x%x\n", status);
    return 4;
  }
  if (access(argv[1], F_OK) != 0) {
    printf("FAIL: the fabric file %s is gone after the child's exit\n", argv[1]);
    return 5;
  }

  struct ibv_sge rs = rig_sge(dmr, dst, sizeof dst), ss = rig_sge(smr, src, sizeof src);
  struct ibv_recv_wr recv = {.wr_id = 1, .sg_list = &rs, .num_sge = 1};
  struct ibv_send_wr send = {.wr_id = 2,
                             .sg_list = &ss,
                             .num_sge = 1,
                             .opcode = IBV_WR_SEND,
                             .send_flags = IBV_SEND_SIGNALED},
                     *sbad;
  if (ibv_post_recv(r.qp[1], &recv, &rbad)) DIE("post_recv failed");
  if (ibv_post_send(r.qp[0], &send, &sbad)) DIE("post_send failed");
  struct ibv_wc wc[2];
  int got_send = rig_poll_n(r.cq[0], &wc[0], 1), got_recv = rig_poll_n(r.cq[1], &wc[1], 1);
  if (got_send != 1 || got_recv != 1 || wc[0].status != IBV_WC_SUCCESS || wc[1].status != IBV_WC_SUCCESS ||
      strcmp(dst, src) != 0) {
    printf("FAIL: SEND/RECV after the child's exit: %d/%d completions (%s, %s)\n", got_send, got_recv,
           got_send ? ibv_wc_status_str(wc[0].status) : "-",
           got_recv ? ibv_wc_status_str(wc[1].status) : "-");
    return 6;
  }
  ibv_dereg_mr(smr);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
