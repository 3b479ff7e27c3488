/* shm_floor: the floor under any message between two processes on this
 * machine.  Two processes (fork) bounce one cache line through MAP_SHARED
 * memory: the parent writes an odd number and spins until the child has
 * written the next even one, the child the other way round.  softnic's
 * latency goals (issue 33) are ratios to the one-way figure printed here.
 *
 * Timing: one clock read per sample of K round trips (no timer in the
 * loop); the figure is the median of the samples' mean round trip over all
 * repetitions, one way = half of it.  The two processes are pinned to two
 * different CPUs of the allowed set: the floor is a cache line moving
 * between two CPUs, not two spinners taking turns on one (on a busy 2-vCPU
 * VM the scheduler put both on one CPU: 9.5 us one way).
 *
 * May not: print a figure when the child failed or a value was skipped
 * (exit 1), or spin for ever (10 s without the peer's answer fails).
 *
 * usage: shm_floor [ROUNDS per repetition (200000)] [REPS (5)] [K (1000)]
 * The last line is "shm_floor: result rtt_ns=R one_way_ns=R/2". */
#define _GNU_SOURCE
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Spins until *line == want; 0 on success, -1 after 10 s without it. */
static int wait_for(volatile uint64_t *line, uint64_t want) {
  uint64_t give_up = 0;
  for (;;) {
    for (int i = 1; i <= (1 << 20); i++) {
      uint64_t v = __atomic_load_n(line, __ATOMIC_ACQUIRE);
      if (v == want) return 0;
      if (i % 4096 == 0) sched_yield(); /* the peer may wait for this CPU */
      if (v > want) {
        fprintf(stderr, "shm_floor: FAILED: saw %llu waiting for %llu\n", (unsigned long long)v,
                (unsigned long long)want);
        return -1;
      }
    }
    const uint64_t t = now_ns();
    if (!give_up) give_up = t + 10000000000ull;
    if (t > give_up) {
      fprintf(stderr, "shm_floor: FAILED: no answer for 10 s waiting for %llu\n", (unsigned long long)want);
      return -1;
    }
  }
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

int main(int argc, char **argv) {
  const long rounds = argc > 1 ? atol(argv[1]) : 200000;
  const long reps = argc > 2 ? atol(argv[2]) : 5;
  const long k = argc > 3 ? atol(argv[3]) : 1000;
  if (rounds <= 0 || reps <= 0 || k <= 0 || rounds % k) {
    fprintf(stderr, "usage: shm_floor [ROUNDS, a multiple of K] [REPS] [K]\n");
    return 2;
  }
  /* One line of its own: 64-byte aligned at the start of a page. */
  volatile uint64_t *line = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (line == MAP_FAILED) {
    perror("shm_floor: mmap");
    return 1;
  }
  const uint64_t total = 1000 + (uint64_t)(rounds * reps); /* 1000 warm-up round trips */
  cpu_set_t allowed;
  int cpus[2] = {-1, -1}, found = 0;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) == 0)
    for (int c = 0; c < CPU_SETSIZE && found < 2; c++)
      if (CPU_ISSET(c, &allowed)) cpus[found++] = c;
  pid_t child = fork();
  if (child < 0) {
    perror("shm_floor: fork");
    return 1;
  }
  if (found == 2) {
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpus[child == 0], &one);
    if (sched_setaffinity(0, sizeof(one), &one)) perror("shm_floor: sched_setaffinity");
  }
  if (child == 0) { /* answers 2i+1 with 2i+2 */
    for (uint64_t i = 0; i < total; i++) {
      if (wait_for(line, 2 * i + 1)) _exit(1);
      __atomic_store_n(line, 2 * i + 2, __ATOMIC_RELEASE);
    }
    _exit(0);
  }
  const long per_rep = rounds / k;
  double *samples = calloc((size_t)(per_rep * reps), sizeof(double));
  double *rep_median = calloc((size_t)reps, sizeof(double));
  if (!samples || !rep_median) return 1;
  uint64_t i = 0;
  int failed = 0;
  for (; i < 1000 && !failed; i++) {
    __atomic_store_n(line, 2 * i + 1, __ATOMIC_RELEASE);
    failed = wait_for(line, 2 * i + 2);
  }
  for (long r = 0; r < reps && !failed; r++) {
    for (long s = 0; s < per_rep && !failed; s++) {
      const uint64_t t0 = now_ns();
      for (long j = 0; j < k && !failed; j++, i++) {
        __atomic_store_n(line, 2 * i + 1, __ATOMIC_RELEASE);
        failed = wait_for(line, 2 * i + 2);
      }
      samples[r * per_rep + s] = (double)(now_ns() - t0) / (double)k;
    }
    double *copy = malloc((size_t)per_rep * sizeof(double));
    if (!copy) return 1;
    memcpy(copy, samples + r * per_rep, (size_t)per_rep * sizeof(double));
    qsort(copy, (size_t)per_rep, sizeof(double), cmp_double);
    rep_median[r] = copy[per_rep / 2];
    free(copy);
    if (!failed) printf("shm_floor: repetition %ld: median round trip %.1f ns\n", r + 1, rep_median[r]);
  }
  int status = 0;
  if (failed) kill(child, SIGKILL);
  if (waitpid(child, &status, 0) != child || !WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    fprintf(stderr, "shm_floor: FAILED: the child did not finish cleanly\n");
    return 1;
  }
  if (failed || i != total) return 1;
  qsort(samples, (size_t)(per_rep * reps), sizeof(double), cmp_double);
  const double rtt = samples[per_rep * reps / 2];
  if (found == 2)
    printf(
        "shm_floor: two processes on CPUs %d and %d, one cache line, %ld x %ld round trips in samples of "
        "%ld\n",
        cpus[0], cpus[1], reps, rounds, k);
  else
    printf(
        "shm_floor: two processes, one CPU allowed, one cache line, %ld x %ld round trips in samples of "
        "%ld\n",
        reps, rounds, k);
  printf("shm_floor: result rtt_ns=%.1f one_way_ns=%.1f\n", rtt, rtt / 2);
  return 0;
}
