/* The public interface header as a user includes it: the program sets its
 * own defaults with __rdmasan_default_options() (exported with -rdynamic),
 * here an exit status of 42 after Error findings, then deallocates a PD
 * that still holds an MR (destroy-in-use).  Under `rdmasan run` it must exit
 * 42; with --exitcode=43 on the command line, 43 (the command line wins). */
#include <rdmasan/rdmasan_interface.h>

#include "checks/common.h"

const char *__rdmasan_default_options(void) { return "exitcode=42"; }

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  static char buf[64];
  struct ibv_mr *mr = rig_reg(&r, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
  for (int i = 0; i < 2; ++i) {
    if (ibv_destroy_qp(r.qp[i])) DIE("destroy_qp failed");
    r.qp[i] = NULL;
  }
  if (ibv_dealloc_pd(r.pd) == 0) r.pd = NULL;
  ibv_dereg_mr(mr);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
