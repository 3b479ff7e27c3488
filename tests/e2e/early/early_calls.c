/* early_calls.c: a shared library whose ELF constructor calls every libc
 * function librdmasan hooks and the verbs a library's constructor might
 * (device list, open, a registration, a CQ), before librdmasan's own
 * initialisers have run: loaded as a dependency of the program, or as a
 * second LD_PRELOAD after librdmasan (the dynamic loader runs the
 * constructors of later-loaded objects first).  It keeps the context, PD,
 * CQ and MR it made, so the program can use them from main, after the
 * shim's initialisers ran: nothing the shim recorded early may be lost.
 *
 * Prints "early: ctor: STEP ok" or "early: ctor: STEP FAILED (...)" per
 * step, and "early: ctor: done" at the end.  early_use() repeats the verbs
 * on the objects kept, from main. */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <infiniband/verbs.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "early_calls.h"

static struct ibv_context* g_ctx;
static struct ibv_pd* g_pd;
static struct ibv_cq* g_cq;
static struct ibv_mr* g_mr;
static char* g_buf;
static int g_failed;

static void step(const char* where, const char* what, int ok) {
  char line[256];
  int n = snprintf(line, sizeof(line), "early: %s: %s %s%s%s\n", where, what, ok ? "ok" : "FAILED (",
                   ok ? "" : strerror(errno), ok ? "" : ")");
  /* write(2): stdio may not be set up for this library yet either. */
  if (n > 0) (void)!write(2, line, (size_t)n);
  if (!ok) g_failed = 1;
}

static void libc_calls(const char* where) {
  struct stat st;
  /* The paths libfabric's and UCX's dependencies stat from constructors. */
  (void)stat("/sys/class/infiniband/qib0", &st);
  step(where, "stat", 1);
  (void)lstat("/sys/class/infiniband", &st);
  (void)fstatat(AT_FDCWD, "/dev/infiniband/uverbs0", &st, 0);
  step(where, "lstat/fstatat", 1);
  (void)access("/dev/infiniband/rdma_cm", R_OK);
  (void)faccessat(AT_FDCWD, "/sys/class/infiniband", R_OK, 0);
  step(where, "access", 1);
  int fd = open("/proc/self/stat", O_RDONLY);
  step(where, "open", fd >= 0);
  if (fd >= 0) {
    step(where, "fstat", fstat(fd, &st) == 0);
    step(where, "close", close(fd) == 0);
  }
  fd = open("/dev/infiniband/rdma_cm", O_RDWR);
  if (fd >= 0) close(fd);
  DIR* d = opendir("/sys/class/infiniband");
  if (d) closedir(d);
  d = opendir("/proc/self");
  step(where, "opendir", d != NULL);
  if (d) closedir(d);
  FILE* f = fopen("/proc/self/status", "r");
  step(where, "fopen", f != NULL);
  if (f) fclose(f);
  char link[PATH_MAX];
  step(where, "readlink", readlink("/proc/self/exe", link, sizeof(link)) > 0);
  char* rp = realpath("/proc/self/exe", NULL);
  step(where, "realpath", rp != NULL);
  free(rp);
  void* h = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
  step(where, "dlopen", h != NULL);
  if (h) {
    step(where, "dlsym", dlsym(h, "ibv_get_device_list") != NULL);
    step(where, "dlvsym", dlvsym(h, "ibv_open_device", "IBVERBS_1.1") != NULL);
    dlclose(h);
  }
  char* p = malloc(64);
  p = realloc(p, 4096);
  step(where, "malloc/realloc", p != NULL);
  free(p);
  void* m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  step(where, "mmap", m != MAP_FAILED);
  if (m != MAP_FAILED) step(where, "munmap", munmap(m, 1 << 16) == 0);
  if (g_mr) return; /* a fork with an MR registered is a finding (fork-with-mrs) */
  pid_t pid = fork();
  if (pid == 0) _exit(7);
  int status = 0;
  step(where, "fork",
       pid > 0 && waitpid(pid, &status, 0) == pid && WIFEXITED(status) && WEXITSTATUS(status) == 7);
}

/* Opens the first device and makes a PD, an MR and a CQ on it, kept in the
 * globals.  With no device (softnic=off on a machine without a NIC) says
 * so and makes nothing. */
static void verbs_calls(const char* where) {
  int n = -1;
  struct ibv_device** list = ibv_get_device_list(&n);
  step(where, "ibv_get_device_list", list != NULL);
  if (!list) return;
  if (n <= 0) {
    char line[64];
    int len = snprintf(line, sizeof(line), "early: %s: no device\n", where);
    (void)!write(2, line, (size_t)len);
    ibv_free_device_list(list);
    return;
  }
  const char* name = ibv_get_device_name(list[0]);
  step(where, "ibv_get_device_name", name != NULL && name[0] != '\0');
  char line[128];
  int len = snprintf(line, sizeof(line), "early: %s: device %s\n", where, name ? name : "(null)");
  (void)!write(2, line, (size_t)len);
  g_ctx = ibv_open_device(list[0]);
  step(where, "ibv_open_device", g_ctx != NULL);
  ibv_free_device_list(list);
  if (!g_ctx) return;
  struct ibv_device_attr attr;
  step(where, "ibv_query_device", ibv_query_device(g_ctx, &attr) == 0);
  g_pd = ibv_alloc_pd(g_ctx);
  step(where, "ibv_alloc_pd", g_pd != NULL);
  g_buf = malloc(4096);
  if (g_pd && g_buf) {
    g_mr = ibv_reg_mr(g_pd, g_buf, 4096, IBV_ACCESS_LOCAL_WRITE);
    step(where, "ibv_reg_mr", g_mr != NULL);
  }
  g_cq = ibv_create_cq(g_ctx, 16, NULL, NULL, 0);
  step(where, "ibv_create_cq", g_cq != NULL);
  if (g_cq) {
    struct ibv_wc wc;
    step(where, "ibv_poll_cq", ibv_poll_cq(g_cq, 1, &wc) == 0);
  }
}

__attribute__((constructor)) static void early_ctor(void) {
  libc_calls("ctor");
  verbs_calls("ctor");
  step("ctor", "done", !g_failed);
}

int early_failed(void) { return g_failed; }

/* From main: the objects made in the constructor still work through the
 * shim (a QP on the early CQ, posts and polls through the wrapped data
 * path, a second registration), then go in order. */
void early_use(void) {
  libc_calls("main");
  if (!g_ctx) {
    verbs_calls("main");
  }
  if (g_ctx && g_pd && g_cq && g_mr) {
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = g_cq;
    qa.recv_cq = g_cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    struct ibv_qp* qp = ibv_create_qp(g_pd, &qa);
    step("main", "ibv_create_qp on the early CQ", qp != NULL);
    if (qp) {
      struct ibv_qp_attr a;
      memset(&a, 0, sizeof(a));
      a.qp_state = IBV_QPS_INIT;
      a.port_num = 1;
      a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
      step("main", "ibv_modify_qp INIT",
           ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) == 0);
      struct ibv_sge sge = {(uintptr_t)g_buf, 64, g_mr->lkey};
      struct ibv_recv_wr wr, *bad = NULL;
      memset(&wr, 0, sizeof(wr));
      wr.wr_id = 1;
      wr.sg_list = &sge;
      wr.num_sge = 1;
      step("main", "ibv_post_recv with the early MR", ibv_post_recv(qp, &wr, &bad) == 0);
      struct ibv_wc wc;
      step("main", "ibv_poll_cq on the early CQ", ibv_poll_cq(g_cq, 1, &wc) == 0);
      step("main", "ibv_destroy_qp", ibv_destroy_qp(qp) == 0);
    }
    step("main", "ibv_dereg_mr of the early MR", ibv_dereg_mr(g_mr) == 0);
  }
  if (g_cq) step("main", "ibv_destroy_cq", ibv_destroy_cq(g_cq) == 0);
  if (g_pd) step("main", "ibv_dealloc_pd", ibv_dealloc_pd(g_pd) == 0);
  if (g_ctx) step("main", "ibv_close_device", ibv_close_device(g_ctx) == 0);
  free(g_buf);
  step("main", "done", !g_failed);
}
