/* use-after-destroy: modify, query and the other QP verbs on a destroyed
 * QP.  Each is refused with EINVAL (not 0) and reported. */
#include "common.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  struct ibv_qp *qp = r.qp[0];
  if (ibv_destroy_qp(qp)) DIE("ibv_destroy_qp failed");
  r.qp[0] = NULL;
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_ERR;
  int ret = ibv_modify_qp(qp, &a, IBV_QP_STATE);  // CHECK: use-after-destroy
  printf("modify_qp of a destroyed QP returned %d\n", ret);
  if (ret != EINVAL) DIE("modify_qp of a destroyed QP was not refused");
  struct ibv_qp_init_attr ia;
  if (ibv_query_qp(qp, &a, IBV_QP_STATE, &ia) != EINVAL) DIE("query_qp of a destroyed QP was not refused");
  union ibv_gid gid;
  memset(&gid, 0, sizeof gid);
  if (ibv_attach_mcast(qp, &gid, 0) != EINVAL) DIE("attach_mcast of a destroyed QP was not refused");
  errno = 0;
  if (ibv_qp_to_qp_ex(qp) || errno != EINVAL) DIE("qp_to_qp_ex of a destroyed QP was not refused");
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
