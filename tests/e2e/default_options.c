/* The public interface header as a user includes it: the program sets its
 * own defaults with __rdmasan_default_options() (exported with -rdynamic),
 * here an exit status of 42 after Error findings, then frees memory inside
 * a live MR (free-registered).  Under `rdmasan run` it must exit
 * 42; with --exitcode=43 on the command line, 43 (the command line wins). */
#include <rdmasan/rdmasan_interface.h>

#include "checks/common.h"

const char *__rdmasan_default_options(void) { return "exitcode=42"; }

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = malloc(4096);
  if (!buf) DIE("malloc failed");
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  free(buf); /* free-registered: an Error finding */
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
