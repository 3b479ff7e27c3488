/* free-registered, munmap flavour: the second page of a registered
 * two-page mapping is unmapped while the MR is live. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *map = mmap(NULL, 8192, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) DIE("mmap failed");
  struct ibv_mr *mr = rig_reg(&r, map, 8192, IBV_ACCESS_LOCAL_WRITE);
  if (munmap(map + 4096, 4096)) DIE("munmap failed");  // CHECK: free-registered
  ibv_dereg_mr(mr);
  munmap(map, 4096);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
