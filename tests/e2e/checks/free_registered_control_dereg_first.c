/* Control for free-registered: memory is freed/unmapped only after its MR is
 * deregistered, and memory next to a live MR (outside its range) is freed
 * and unmapped while that MR is live. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = malloc(4096), *other = malloc(4096);
  if (!buf || !other) DIE("malloc failed");
  char *map = mmap(NULL, 3 * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) DIE("mmap failed");
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, IBV_ACCESS_LOCAL_WRITE);
  struct ibv_mr *mmr = rig_reg(&r, map + 4096, 4096, IBV_ACCESS_LOCAL_WRITE); /* middle page only */
  free(other);                                                                /* not registered */
  if (munmap(map + 2 * 4096, 4096)) DIE("munmap failed");                     /* the page after the MR */
  if (munmap(map, 4096)) DIE("munmap failed");                                /* the page before it */
  if (ibv_dereg_mr(mr) || ibv_dereg_mr(mmr)) DIE("dereg failed");
  free(buf);
  if (munmap(map + 4096, 4096)) DIE("munmap failed");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
