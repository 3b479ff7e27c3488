/* fork-with-mrs: fork() while an MR is registered and ibv_fork_init was
 * never called. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[4096];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  fflush(stdout);
  pid_t pid = fork();  // CHECK: fork-with-mrs
  if (pid < 0) DIE("fork failed");
  if (pid == 0) _exit(0);
  int st;
  if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) DIE("child failed");
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
