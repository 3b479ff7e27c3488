/* big_cq: creates CQs of 65535 entries until the device refuses one; on a
 * small tmpfs under the fabric (64 MiB, a container's /dev/shm) that must
 * be ENOMEM from ibv_create_cq, never a SIGBUS (issue 10 item 8).  Prints
 * "ENOMEM after N CQs" and exits 0; exits 4 if the refusal is not ENOMEM,
 * 5 if all 64 CQs were created (the tmpfs was not small). */
#include "../checks/common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_cq *cqs[64];
  int n = 0;
  for (; n < 64; ++n) {
    cqs[n] = ibv_create_cq(ctx, 65535, NULL, NULL, 0);
    if (!cqs[n]) break;
  }
  int e = errno;
  for (int i = 0; i < n; ++i)
    if (ibv_destroy_cq(cqs[i])) DIE("ibv_destroy_cq failed");
  if (ibv_close_device(ctx)) DIE("ibv_close_device failed");
  if (n == 64) {
    printf("FAIL: 64 CQs of 65535 entries fit\n");
    return 5;
  }
  if (e != ENOMEM) {
    printf("FAIL: CQ %d refused with %s, want ENOMEM\n", n, strerror(e));
    return 4;
  }
  printf("ENOMEM after %d CQs\n", n);
  return 0;
}
