/* Control for fork-with-mrs: ibv_fork_init() first, then fork() with an MR
 * registered; and a second fork() after every MR is deregistered. */
#include "common.h"

static void fork_and_wait(void) {
  fflush(stdout);
  pid_t pid = fork();
  if (pid < 0) DIE("fork failed");
  if (pid == 0) _exit(0);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) DIE("child failed");
}

int main(void) {
  int ret = ibv_fork_init();
  if (ret) DIE("ibv_fork_init returned %d", ret);
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[4096];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  fork_and_wait();
  ibv_dereg_mr(mr);
  fork_and_wait();
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
