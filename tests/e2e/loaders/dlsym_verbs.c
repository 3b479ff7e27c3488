/* dlsym_verbs: a loader in NCCL's style.  It is not linked against
 * libibverbs: it dlopens the library RTLD_LOCAL and takes every verb it
 * calls from the handle with dlvsym or dlsym.  Under `rdmasan run` each
 * pointer must be the shim's (so the calls are seen), lookups of anything
 * else must be what they would be without the shim, and a tiny RC flow
 * with a planted dereg-in-flight must be reported at the marked line.
 *
 * Built twice (CMakeLists.txt): over the real libibverbs on softnic0, and
 * with VERBS_PATH naming the stub library (stub_verbs.c) and DEVICE
 * "stub0", so the calls pass through the shim to a real, non-softnic
 * library and provider. */
// CHECK-NOT: buffer-modified-in-flight
#define _GNU_SOURCE
#include <dlfcn.h>
#include <infiniband/verbs.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#ifndef VERBS_PATH
#define VERBS_PATH "libibverbs.so.1"
#define REAL_VERBS 1
#endif
#ifndef DEVICE
#define DEVICE "softnic0"
#endif

#define DIE(...)                                          \
  do {                                                    \
    fprintf(stderr, "FATAL %s:%d: ", __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                         \
    fputc('\n', stderr);                                  \
    exit(3);                                              \
  } while (0)

static struct {
  struct ibv_device **(*get_device_list)(int *);
  void (*free_device_list)(struct ibv_device **);
  const char *(*get_device_name)(struct ibv_device *);
  struct ibv_context *(*open_device)(struct ibv_device *);
  int (*close_device)(struct ibv_context *);
  struct ibv_pd *(*alloc_pd)(struct ibv_context *);
  int (*dealloc_pd)(struct ibv_pd *);
  struct ibv_mr *(*reg_mr)(struct ibv_pd *, void *, size_t, int);
  int (*dereg_mr)(struct ibv_mr *);
  struct ibv_cq *(*create_cq)(struct ibv_context *, int, void *, struct ibv_comp_channel *, int);
  int (*destroy_cq)(struct ibv_cq *);
  struct ibv_qp *(*create_qp)(struct ibv_pd *, struct ibv_qp_init_attr *);
  int (*modify_qp)(struct ibv_qp *, struct ibv_qp_attr *, int);
  int (*destroy_qp)(struct ibv_qp *);
  int (*fork_init)(void);
  enum ibv_fork_status (*is_fork_initialized)(void);
} v;

static void *verbs;

/* The object that defines `p`, by file name. */
static const char *owner(void *p) {
  Dl_info di;
  return p && dladdr(p, &di) && di.dli_fname ? di.dli_fname : "(none)";
}

/* One verb from the handle: with dlvsym when `ver` is given (NCCL's
 * ASSIGN_SYM), else dlsym.  Under the shim, the shim's definition. */
static void load(void *slot, const char *name, const char *ver) {
  void *f = ver ? dlvsym(verbs, name, ver) : dlsym(verbs, name);
  if (!f) DIE("%s: %s", name, dlerror());
  if (!strstr(owner(f), "librdmasan")) DIE("%s comes from %s, not the shim", name, owner(f));
  memcpy(slot, &f, sizeof f);
}
#define LOAD(field, name, ver) load(&v.field, name, ver)

/* Lookups the shim must leave alone. */
static void check_unchanged(void) {
  /* RTLD_NEXT from here: the first definition after this program (which
   * defines no free), the first preloaded library's: the shim's, or the
   * sanitizer runtime's where a sanitizer build preloads one ahead of it;
   * were the caller taken to be the shim, libc's. */
  const char *first_free = owner(dlsym(RTLD_DEFAULT, "free"));
  if (strstr(first_free, "libc.so")) DIE("free is libc's: nothing is preloaded");
  if (strcmp(owner(dlsym(RTLD_NEXT, "free")), first_free) != 0) DIE("dlsym(RTLD_NEXT) lost its caller");
  void *libc = dlopen("libc.so.6", RTLD_NOLOAD | RTLD_LAZY);
  if (!libc || !strstr(owner(dlsym(libc, "malloc")), "libc.so")) DIE("dlsym(libc, malloc) changed");
  if (!strstr(owner(dlvsym(libc, "dlsym", "GLIBC_2.2.5")), "libc.so")) DIE("dlvsym(libc, dlsym) changed");
  if (dlsym(verbs, "no_such_verb") || !dlerror()) DIE("a missing symbol is not missing");
#ifdef REAL_VERBS
  /* libibverbs is not in the global scope (else this tests nothing). */
  if (dlsym(RTLD_DEFAULT, "ibv_cmd_create_qp")) DIE("libibverbs is global");
  /* An old ABI version and a name the shim does not define stay the
   * library's own. */
  if (!strstr(owner(dlvsym(verbs, "ibv_create_qp", "IBVERBS_1.0")), "libibverbs"))
    DIE("ibv_create_qp@IBVERBS_1.0 is not libibverbs' own");
  if (!strstr(owner(dlsym(verbs, "ibv_cmd_create_qp")), "libibverbs")) DIE("ibv_cmd_create_qp changed");
#endif
}

static void connect_qp(struct ibv_qp *qp, uint32_t remote) {
  struct ibv_qp_attr a;
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  if (v.modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS)) DIE("INIT");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_1024;
  a.dest_qp_num = remote;
  a.ah_attr.dlid = 1;
  a.ah_attr.port_num = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  if (v.modify_qp(qp, &a,
                  IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                      IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    DIE("RTR");
  memset(&a, 0, sizeof a);
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  if (v.modify_qp(qp, &a,
                  IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                      IBV_QP_MAX_QP_RD_ATOMIC))
    DIE("RTS");
}

int main(void) {
  setvbuf(stdout, NULL, _IONBF, 0);
  verbs = dlopen(VERBS_PATH, RTLD_NOW | RTLD_LOCAL);
  if (!verbs) DIE("dlopen %s: %s", VERBS_PATH, dlerror());
  LOAD(get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
  LOAD(free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
  LOAD(get_device_name, "ibv_get_device_name", NULL);
  LOAD(open_device, "ibv_open_device", "IBVERBS_1.1");
  LOAD(close_device, "ibv_close_device", NULL);
  LOAD(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
  LOAD(dealloc_pd, "ibv_dealloc_pd", NULL);
  LOAD(reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
  LOAD(dereg_mr, "ibv_dereg_mr", NULL);
  LOAD(create_cq, "ibv_create_cq", "IBVERBS_1.1");
  LOAD(destroy_cq, "ibv_destroy_cq", NULL);
  LOAD(create_qp, "ibv_create_qp", "IBVERBS_1.1");
  LOAD(modify_qp, "ibv_modify_qp", NULL);
  LOAD(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1");
  LOAD(fork_init, "ibv_fork_init", "IBVERBS_1.1");
  LOAD(is_fork_initialized, "ibv_is_fork_initialized", NULL);
  check_unchanged();

  /* ibv_fork_init through the pointer is the real one. */
  if (v.fork_init()) DIE("ibv_fork_init failed");
  enum ibv_fork_status fork = v.is_fork_initialized();
  if (fork != IBV_FORK_ENABLED && fork != IBV_FORK_UNNEEDED)
    DIE("fork support: %d after ibv_fork_init", fork);
  printf("fork: %s\n", fork == IBV_FORK_ENABLED ? "enabled" : "unneeded");

  int n = 0;
  struct ibv_device **list = v.get_device_list(&n);
  struct ibv_context *ctx = NULL;
  for (int i = 0; list && i < n; ++i)
    if (!strcmp(v.get_device_name(list[i]), DEVICE)) ctx = v.open_device(list[i]);
  if (list) v.free_device_list(list);
  if (!ctx) DIE("no device %s", DEVICE);
  struct ibv_pd *pd = v.alloc_pd(ctx);
  struct ibv_cq *cq[2];
  struct ibv_qp *qp[2];
  for (int i = 0; i < 2; ++i) {
    cq[i] = v.create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof qa);
    qa.send_cq = qa.recv_cq = cq[i];
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
    qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
    qp[i] = pd && cq[i] ? v.create_qp(pd, &qa) : NULL;
    if (!qp[i]) DIE("create_qp");
  }
  connect_qp(qp[0], qp[1]->qp_num);
  connect_qp(qp[1], qp[0]->qp_num);

  static char src[64], dst[64];
  struct ibv_mr *smr =
      v.reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);  // REGISTERED-AT: dereg-in-flight
  struct ibv_mr *dmr = v.reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
  if (!smr || !dmr) DIE("reg_mr");
  struct ibv_sge sge = {(uintptr_t)src, 8, smr->lkey};
  struct ibv_send_wr wr, *bad;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = 0x2a;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.wr.rdma.remote_addr = (uintptr_t)dst;
  wr.wr.rdma.rkey = dmr->rkey;
  if (ibv_post_send(qp[0], &wr, &bad)) DIE("post failed");  // POSTED-AT: dereg-in-flight
  if (v.dereg_mr(smr)) DIE("dereg failed");                 // CHECK: dereg-in-flight
  struct ibv_wc wc;
  time_t end = time(NULL) + 10;
  while (ibv_poll_cq(cq[0], 1, &wc) == 0)
    if (time(NULL) > end) DIE("no completion");
  v.dereg_mr(dmr);
  for (int i = 0; i < 2; ++i) {
    v.destroy_qp(qp[i]);
    v.destroy_cq(cq[i]);
  }
  v.dealloc_pd(pd);
  v.close_device(ctx);
  printf("DONE\n");
  return 0;
}
