/* rpc_pair.c: the RPC client and server in one process and one thread
 * (rpc_inproc.h): R runs of N RPCs each over one connected pair, the way
 * the in-process fuzz target (fuzz/rpc_fuzzer.cc) drives them, as a plain
 * program that runs under `rdmasan run --softnic_fabric=inproc`.
 *
 * usage: rpc_pair [--mode M] [-n N] [-r R] [-d DEV]
 * Exit 0 when every run completed, 1 when the example failed. */
#define _GNU_SOURCE
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>

#include "rpc_inproc.h"

static void usage(void) {
  fprintf(stderr, "usage: rpc_pair [--mode M] [-n N] [-r R] [-d DEV]\nmodes:");
  for (int m = 0; m < MODE_COUNT; m++) fprintf(stderr, " %s", rpc_mode_names[m]);
  fputc('\n', stderr);
  exit(2);
}

int main(int argc, char **argv) {
  enum rpc_mode mode = MODE_CORRECT;
  uint32_t n = 8, runs = 100;
  const char *devname = NULL;
  static const struct option opts[] = {
      {"mode", required_argument, 0, 'm'}, {"iters", required_argument, 0, 'n'},
      {"runs", required_argument, 0, 'r'}, {"dev", required_argument, 0, 'd'},
      {"help", no_argument, 0, 'h'},       {0, 0, 0, 0}};
  for (int o; (o = getopt_long(argc, argv, "m:n:r:d:h", opts, NULL)) != -1;) {
    switch (o) {
      case 'm': {
        int m = rpc_parse_mode(optarg);
        if (m < 0) usage();
        mode = (enum rpc_mode)m;
        break;
      }
      case 'n':
        n = (uint32_t)strtoul(optarg, NULL, 0);
        break;
      case 'r':
        runs = (uint32_t)strtoul(optarg, NULL, 0);
        break;
      case 'd':
        devname = optarg;
        break;
      default:
        usage();
    }
  }
  if (optind != argc || n == 0) usage();
  struct rpc_inproc *p = rpc_inproc_open(mode, devname);
  if (!p) return 1;
  uint32_t r = 0;
  for (; r < runs; r++)
    if (rpc_inproc_run(p, n)) break;
  rpc_inproc_close(p);
  printf("rpc_pair: %u of %u runs of %u RPCs ok (mode %s)\n", r, runs, n, rpc_mode_names[mode]);
  return r == runs ? 0 : 1;
}
