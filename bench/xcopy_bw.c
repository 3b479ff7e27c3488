/* xcopy_bw: the ceiling of a copy from one process into another's private
 * memory on this machine, beside bench/speed.sh's WRITE goal (issue 33).
 *
 * softnic moves an RDMA WRITE's payload into the responder's registered
 * memory, private memory of another process, with process_vm_writev(2):
 * the kernel pins each page of the destination and copies into it.  This
 * program times that system call alone, no verbs and no shim, against
 * memcpy() of the same buffers in the same cache state, so the WRITE row
 * can be read against what the kernel's copy allows:
 *   cached: one S-byte source and one S-byte destination, reused;
 *   stream: source and destination walk R-MiB regions, S bytes further
 *           each message, far larger than any cache.
 * The destination of process_vm_writev is the same buffer in a forked
 * child (its copy-on-write pages broken by a warm-up pass, as the
 * responder's are faulted in before a WRITE).  Repetitions alternate
 * memcpy and process_vm_writev; each figure is its best repetition.
 *
 * May not: print a figure after a short or failed copy, or leave the child
 * behind (it dies with the parent: PR_SET_PDEATHSIG, and is killed and
 * reaped at the end).
 *
 * usage: xcopy_bw [cached|stream] [S bytes (65536)] [N messages] [REPS (3)] [R MiB (256)]
 * The last line is "xcopy_bw: result pvw_gbps=P memcpy_gbps=M ratio=P/M". */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void fail(const char *what) {
  perror(what);
  exit(1);
}

static uint8_t *map_region(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) fail("xcopy_bw: mmap");
  return p;
}

static uint64_t parse(const char *s, const char *what) {
  char *end;
  const unsigned long long v = strtoull(s, &end, 0);
  if (!*s || *end || v == 0) {
    fprintf(stderr, "xcopy_bw: bad %s '%s'\n", what, s);
    exit(2);
  }
  return v;
}

struct run {
  uint8_t *src, *dst;
  uint64_t size, region, n;
  int cached;
  pid_t child;
};

static uint64_t offset(const struct run *r, uint64_t i) { return r->cached ? 0 : (i * r->size) % r->region; }

/* One pass of n messages; GB/s (10^9 bytes of data a second). */
static double memcpy_pass(struct run *r) {
  const double t0 = now_s();
  for (uint64_t i = 0; i < r->n; i++) {
    const uint64_t o = offset(r, i);
    memcpy(r->dst + o, r->src + o, r->size);
    __asm__ volatile("" : : "r"(r->dst) : "memory"); /* each copy is done */
  }
  return (double)(r->n * r->size) / (now_s() - t0) / 1e9;
}

static double pvw_pass(struct run *r, uint64_t n) {
  const double t0 = now_s();
  for (uint64_t i = 0; i < n; i++) {
    const uint64_t o = offset(r, i);
    struct iovec l = {r->src + o, r->size}, d = {r->dst + o, r->size};
    const ssize_t got = process_vm_writev(r->child, &l, 1, &d, 1, 0);
    if (got != (ssize_t)r->size) {
      if (got < 0) fail("xcopy_bw: process_vm_writev");
      fprintf(stderr, "xcopy_bw: process_vm_writev copied %zd of %llu bytes\n", got,
              (unsigned long long)r->size);
      exit(1);
    }
  }
  return (double)(n * r->size) / (now_s() - t0) / 1e9;
}

int main(int argc, char **argv) {
  struct run r = {.size = 65536, .cached = 1};
  if (argc > 1) {
    if (strcmp(argv[1], "cached") && strcmp(argv[1], "stream")) {
      fprintf(stderr, "usage: xcopy_bw [cached|stream] [S bytes] [N messages] [REPS] [R MiB]\n");
      return 2;
    }
    r.cached = strcmp(argv[1], "cached") == 0;
  }
  if (argc > 2) r.size = parse(argv[2], "size");
  r.n = argc > 3 ? parse(argv[3], "messages") : (r.cached ? 40000 : 8192);
  const uint64_t reps = argc > 4 ? parse(argv[4], "repetitions") : 3;
  const uint64_t region_mib = argc > 5 ? parse(argv[5], "region") : 256;
  r.region = r.cached ? r.size : region_mib << 20;
  if (r.size > (1u << 30) || r.region % r.size) {
    fprintf(stderr, "xcopy_bw: the size must divide the region and be at most 1 GiB\n");
    return 2;
  }
  r.src = map_region(r.region);
  r.dst = map_region(r.region);
  memset(r.src, 0x5a, r.region);
  memset(r.dst, 0, r.region); /* faulted in before the fork */
  const pid_t parent = getpid();
  r.child = fork();
  if (r.child < 0) fail("xcopy_bw: fork");
  if (r.child == 0) {
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(1);
    for (;;) pause();
  }
  /* The child's copy-on-write pages broken, as a responder's registered
   * memory is written before any timed WRITE. */
  pvw_pass(&r, r.region / r.size);
  double best_pvw = 0, best_mem = 0;
  for (uint64_t i = 0; i < reps; i++) {
    const double m = memcpy_pass(&r), p = pvw_pass(&r, r.n);
    printf("xcopy_bw: repetition %llu: memcpy %.2f GB/s, process_vm_writev %.2f GB/s\n",
           (unsigned long long)i + 1, m, p);
    if (m > best_mem) best_mem = m;
    if (p > best_pvw) best_pvw = p;
  }
  kill(r.child, SIGKILL);
  waitpid(r.child, NULL, 0);
  printf("xcopy_bw: %llu-byte copies, %s, %llu x %llu messages\n", (unsigned long long)r.size,
         r.cached ? "cached: one source and destination reused" : "streaming", (unsigned long long)reps,
         (unsigned long long)r.n);
  printf("xcopy_bw: result pvw_gbps=%.3f memcpy_gbps=%.3f ratio=%.3f\n", best_pvw, best_mem,
         best_pvw / best_mem);
  return 0;
}
