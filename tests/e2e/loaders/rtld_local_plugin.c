/* rtld_local_plugin: the library half of rtld_local.c, a plugin linked
 * against libibverbs as pyverbs' extension modules are, and loaded by its
 * host with dlopen(RTLD_LOCAL), so libibverbs is in no global scope.  Its
 * verbs calls bind to the shim; the shim must find the real library
 * anyway: ibv_fork_init really initializes fork support, and a planted
 * dereg-in-flight on softnic is reported at the marked line. */
// CHECK-NOT: buffer-modified-in-flight
#include "../checks/common.h"

__attribute__((visibility("default"))) int plugin_run(void);

int plugin_run(void) {
  if (ibv_fork_init()) DIE("ibv_fork_init failed");
  enum ibv_fork_status fork = ibv_is_fork_initialized();
  if (fork != IBV_FORK_ENABLED && fork != IBV_FORK_UNNEEDED)
    DIE("fork support: %d after ibv_fork_init", fork);
  printf("fork: %s\n", fork == IBV_FORK_ENABLED ? "enabled" : "unneeded");

  struct rig r;
  rig_setup(&r, NULL);
  static char src[64], dst[64];
  struct ibv_mr *smr =
      rig_reg(&r, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: dereg-in-flight
  struct ibv_mr *dmr = rig_reg(&r, dst, sizeof dst, RIG_ALL_ACCESS);
  struct ibv_sge sge = rig_sge(smr, src, 8);
  struct ibv_send_wr wr = rig_write_wr(0x2a, &sge, (uintptr_t)dst, dmr->rkey, 1), *bad;
  if (ibv_post_send(r.qp[0], &wr, &bad)) DIE("post failed");  // POSTED-AT: dereg-in-flight
  if (ibv_dereg_mr(smr)) DIE("dereg failed");                 // CHECK: dereg-in-flight
  struct ibv_wc wc;
  rig_poll_n(r.cq[0], &wc, 1);
  ibv_dereg_mr(dmr);
  rig_teardown(&r);
  return 0;
}
