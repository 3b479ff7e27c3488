/* mpi_pingpong: two ranks exchange messages of growing size over Open MPI
 * (pml ucx, so UCX's rc_verbs/ud_verbs on softnic0 under rdmasan), each
 * message's every byte checked, then a half round trip timed.  Prints
 * "mpi_pingpong: PASS ..." on rank 0. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void fill(unsigned char *b, int n, int seed) {
  for (int i = 0; i < n; ++i) b[i] = (unsigned char)(i * 31 + seed);
}

static int check(const unsigned char *b, int n, int seed) {
  for (int i = 0; i < n; ++i)
    if (b[i] != (unsigned char)(i * 31 + seed)) return i;
  return -1;
}

int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int rank, size;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size != 2) {
    if (rank == 0) fprintf(stderr, "mpi_pingpong: needs 2 ranks, got %d\n", size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  const int peer = 1 - rank, max = 1 << 20;
  unsigned char *buf = malloc(max);
  for (int n = 1, round = 0; n <= max; n *= 4, ++round) {
    for (int it = 0; it < 10; ++it) {
      const int seed = round * 16 + it;
      if (rank == 0) {
        fill(buf, n, seed);
        MPI_Send(buf, n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
        memset(buf, 0, n);
        MPI_Recv(buf, n, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const int bad = check(buf, n, seed + 1);
        if (bad >= 0) {
          fprintf(stderr, "mpi_pingpong: FAIL: %d bytes, byte %d wrong\n", n, bad);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
      } else {
        MPI_Recv(buf, n, MPI_BYTE, peer, it, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        const int bad = check(buf, n, seed);
        if (bad >= 0) {
          fprintf(stderr, "mpi_pingpong: FAIL: rank 1: %d bytes, byte %d wrong\n", n, bad);
          MPI_Abort(MPI_COMM_WORLD, 1);
        }
        fill(buf, n, seed + 1);
        MPI_Send(buf, n, MPI_BYTE, peer, it, MPI_COMM_WORLD);
      }
    }
  }
  /* Latency of 8-byte messages. */
  const int iters = argc > 1 ? atoi(argv[1]) : 2000;
  MPI_Barrier(MPI_COMM_WORLD);
  const double t0 = MPI_Wtime();
  for (int i = 0; i < iters; ++i) {
    if (rank == 0) {
      MPI_Send(buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
      MPI_Recv(buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    } else {
      MPI_Recv(buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      MPI_Send(buf, 8, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
    }
  }
  const double half_rtt_us = (MPI_Wtime() - t0) / iters / 2 * 1e6;
  if (rank == 0)
    printf("mpi_pingpong: PASS sizes 1..%d checked, 8 B half round trip %.2f us\n", max, half_rtt_us);
  free(buf);
  MPI_Finalize();
  return 0;
}
