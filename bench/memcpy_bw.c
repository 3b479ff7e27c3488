// memcpy_bw: the machine's streaming memcpy bandwidth, the yardstick for
// softnic's RDMA WRITE bandwidth.
//
// Copies a source buffer to a destination buffer of the same size in 64 KiB
// memcpy() calls, walking both front to back; the buffers (default 512 MiB
// each, 1 GiB in all) are far larger than any last-level cache, so this
// measures DRAM-to-DRAM copy speed, not cache speed.  Pages are touched
// before timing.  Prints the best of several passes in GB/s (10^9 bytes/s
// of data copied; each byte is read once and written once).
//
// usage: memcpy_bw [MiB per buffer (512)] [passes (5)] [chunk bytes (65536)]
// The last line of output is "memcpy_bw_gbps <value>" for scripts.
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

static double Now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void* MapBuffer(size_t bytes) {
  void* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) {
    perror("memcpy_bw: mmap");
    exit(1);
  }
  return p;
}

int main(int argc, char** argv) {
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 0) : 512;
  int passes = argc > 2 ? atoi(argv[2]) : 5;
  size_t chunk = argc > 3 ? strtoul(argv[3], NULL, 0) : 65536;
  if (mib == 0 || passes <= 0 || chunk == 0 || (mib << 20) % chunk != 0) {
    fprintf(stderr, "usage: memcpy_bw [MiB per buffer] [passes] [chunk bytes dividing the buffer]\n");
    return 2;
  }
  size_t bytes = mib << 20;
  unsigned char* src = MapBuffer(bytes);
  unsigned char* dst = MapBuffer(bytes);
  memset(src, 0x5a, bytes);  // fault every page in before timing
  memset(dst, 0xa5, bytes);

  double best = 0;
  for (int pass = 0; pass < passes; ++pass) {
    src[(size_t)pass * 4096 % bytes] = (unsigned char)pass;  // keep passes distinct
    double t0 = Now();
    for (size_t off = 0; off < bytes; off += chunk) memcpy(dst + off, src + off, chunk);
    double t = Now() - t0;
    double gbps = (double)bytes / t / 1e9;
    if (gbps > best) best = gbps;
  }
  // Read the destination so the copies cannot be optimized away.
  unsigned sum = 0;
  for (size_t off = 0; off < bytes; off += 4096) sum += dst[off];

  printf("memcpy %zu KiB chunks over 2 x %zu MiB, best of %d passes: %.2f GB/s (check %u)\n", chunk >> 10,
         mib, passes, best, sum & 0xff);
  printf("memcpy_bw_gbps %.3f\n", best);
  return 0;
}
