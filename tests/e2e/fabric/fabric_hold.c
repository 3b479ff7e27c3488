/* fabric_hold: attaches to the softnic fabric (a device, a PD, a CQ and a
 * QP), prints READY, and holds on until the file argv[1] exists (or 30 s
 * pass), then exits normally.  The fabric tests start several of these on
 * one fabric to see who removes the fabric file (issue 10 item 16). */
#include "../checks/common.h"

int main(int argc, char **argv) {
  if (argc != 2) DIE("usage: fabric_hold GO_FILE");
  struct rig r;
  rig_setup(&r, NULL);
  printf("READY\n");
  double end = rig_now() + 30;
  while (access(argv[1], F_OK) != 0 && rig_now() < end) usleep(2000);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
