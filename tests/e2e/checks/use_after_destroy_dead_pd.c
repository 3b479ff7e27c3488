/* use-after-destroy: objects made on a deallocated PD.  Every creation
 * verb that takes the PD is refused (NULL, errno EINVAL) and reported,
 * none hands back an object. */
#include "common.h"

int main(void) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  struct ibv_context *ctx = rig_open_first_device();
  struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
  struct ibv_pd *pd = ibv_alloc_pd(ctx);
  if (!cq || !pd) DIE("setup failed");
  if (ibv_dealloc_pd(pd)) DIE("ibv_dealloc_pd failed");
  struct ibv_qp_init_attr ia;
  memset(&ia, 0, sizeof ia);
  ia.send_cq = ia.recv_cq = cq;
  ia.qp_type = IBV_QPT_RC;
  ia.cap.max_send_wr = ia.cap.max_recv_wr = 4;
  ia.cap.max_send_sge = ia.cap.max_recv_sge = 1;
  errno = 0;
  struct ibv_qp *qp = ibv_create_qp(pd, &ia);  // CHECK: use-after-destroy
  if (qp || errno != EINVAL) DIE("create_qp on a deallocated PD: %p, %s", (void *)qp, strerror(errno));
  static char buf[64];
  errno = 0;
  if (ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE) || errno != EINVAL) DIE("reg_mr accepted");
  struct ibv_srq_init_attr sa;
  memset(&sa, 0, sizeof sa);
  sa.attr.max_wr = 4;
  sa.attr.max_sge = 1;
  errno = 0;
  if (ibv_create_srq(pd, &sa) || errno != EINVAL) DIE("create_srq accepted");
  struct ibv_ah_attr aa;
  memset(&aa, 0, sizeof aa);
  aa.dlid = 1;
  aa.port_num = 1;
  errno = 0;
  if (ibv_create_ah(pd, &aa) || errno != EINVAL) DIE("create_ah accepted");
  printf("every creation on the deallocated PD was refused\n");
  if (ibv_dealloc_pd(pd) != EINVAL) DIE("a second dealloc_pd was not refused");
  ibv_destroy_cq(cq);
  ibv_close_device(ctx);
  printf("DONE\n");
  return 0;
}
