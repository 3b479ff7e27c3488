/* crash, control: the program handles SIGSEGV itself, installed before any
 * verbs call: rdmasan leaves it alone (it handles only signals the program
 * left at their default), reports nothing, and the program's handler ends
 * it. */
// SILENT
// EXPECT: ^own handler ran$
// NO-DONE
// STATUS: 7
#include "../checks/common.h"

#include <signal.h>

static void on_segv(int sig) {
  (void)sig;
  static const char msg[] = "own handler ran\n";
  (void)!write(1, msg, sizeof msg - 1);
  _exit(7);
}

int main(void) {
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_segv;
  if (sigaction(SIGSEGV, &sa, NULL)) DIE("sigaction failed");
  struct rig r;
  rig_setup(&r, NULL);
  volatile int *volatile p = getenv("CRASH_NEVER_SET") ? malloc(sizeof(int)) : NULL;
  *p = 1;
  printf("DONE\n");
  return 0;
}
