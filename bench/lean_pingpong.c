/* lean_pingpong: the project's own 8 B SEND ping-pong over an RC QP, two
 * processes, for bench/speed.sh's latency goals (issue 33).  A plain verbs
 * program (public libibverbs API only), lean where perftest is not: no
 * timer call per message, one clock read per sample of K round trips.
 *
 * Each round trip: the client SENDs 8 bytes (its sequence number, inline
 * when the device allows), the server's receive completes, the server
 * reposts the receive and SENDs the same number back.  Receives stay
 * posted (64 deep, each reposted as it completes); one SEND in 16 is
 * signaled.  Modes:
 *   busy-poll (default): both sides spin on ibv_poll_cq;
 *   -e, event-driven: both sides arm the receive CQ (ibv_req_notify_cq),
 *       poll once more, and block in ibv_get_cq_event; events are acked.
 * The client prints every repetition's median round trip and, last,
 *   lean_pingpong: result rtt_ns=R one_way_ns=R/2 [floor_one_way_ns=F ratio=Q]
 * where R is the median over all samples of all repetitions (a sample: the
 * mean round trip of K consecutive round trips).  In busy-poll mode each
 * sample is followed by 64 round trips of the floor (one cache line bounced
 * through shared memory by the same two processes, see floor_line): F is
 * half their median, Q the median of each sample's ratio to its floor
 * sample, which holds when the machine's state moves during the run.
 *
 * May not: report a figure after a lost, duplicated or reordered message,
 * a failed verb or an error completion (exit 1, see lean_common.h).
 *
 * usage: lean_pingpong [-e] [-n ROUNDS] [-k K] [-r REPS] [-w WARMUP] [-d DEV] -p PORT [SERVER_IPV4]
 *   without SERVER_IPV4 it is the server; the client's -e -n -k -r -w win.
 *   defaults: -n 20000 (-e: 4000), -k 16 (-e: 1), -r 5, -w 1000. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lean_common.h"

enum { kSq = 64, kRq = 64, kSignalEvery = 16 };

struct pp {
  struct lean_conn c;
  bool event, inline_ok;
  uint64_t sbuf[kSq], rbuf[kRq];
  struct ibv_mr *smr, *rmr;
  uint64_t posted, retired, received, total_sends;
  bool armed;
  unsigned unacked;
};

static void post_recv(struct pp *s, uint32_t slot) {
  struct ibv_sge sge = {(uintptr_t)&s->rbuf[slot], sizeof(uint64_t), s->rmr->lkey};
  struct ibv_recv_wr wr = {.wr_id = slot, .sg_list = &sge, .num_sge = 1}, *bad;
  lean_check(ibv_post_recv(s->c.qp, &wr, &bad), "ibv_post_recv");
}

/* Polls the send CQ; with block, until at least one completion. */
static void reap(struct pp *s, bool block) {
  struct ibv_wc wc[4];
  int n;
  do {
    n = ibv_poll_cq(s->c.scq, 4, wc);
    if (n < 0) lean_fail("ibv_poll_cq (send): %d", n);
  } while (block && n == 0);
  for (int i = 0; i < n; i++) {
    lean_expect_wc(&wc[i], IBV_WC_SEND, "SEND");
    if (wc[i].wr_id < s->retired || wc[i].wr_id >= s->posted)
      lean_fail("SEND completion for wr_id %llu, outstanding %llu..%llu", (unsigned long long)wc[i].wr_id,
                (unsigned long long)s->retired, (unsigned long long)s->posted);
    s->retired = wc[i].wr_id + 1; /* the SQ completes in order: every earlier WR too */
  }
}

static void send_seq(struct pp *s, uint64_t seq) {
  while (s->posted - s->retired >= kSq / 2) reap(s, true);
  const uint32_t slot = (uint32_t)(s->posted % kSq); /* retired long ago: fewer than kSq/2 outstanding */
  s->sbuf[slot] = seq;
  struct ibv_sge sge = {(uintptr_t)&s->sbuf[slot], sizeof(uint64_t), s->smr->lkey};
  struct ibv_send_wr wr = {.wr_id = s->posted, .sg_list = &sge, .num_sge = 1, .opcode = IBV_WR_SEND}, *bad;
  if (s->inline_ok) wr.send_flags |= IBV_SEND_INLINE;
  if (s->posted % kSignalEvery == kSignalEvery - 1 || s->posted + 1 == s->total_sends)
    wr.send_flags |= IBV_SEND_SIGNALED;
  lean_check(ibv_post_send(s->c.qp, &wr, &bad), "ibv_post_send");
  s->posted++;
}

/* Waits for the next receive completion, checks it carries seq, reposts. */
static void recv_seq(struct pp *s, uint64_t seq) {
  struct ibv_wc wc;
  for (;;) {
    int n = ibv_poll_cq(s->c.rcq, 1, &wc);
    if (n < 0) lean_fail("ibv_poll_cq (receive): %d", n);
    if (n) break;
    if (!s->event) continue;
    if (!s->armed) { /* arm, then poll once more: a completion may have come before the arm */
      lean_check(ibv_req_notify_cq(s->c.rcq, 0), "ibv_req_notify_cq");
      s->armed = true;
      continue;
    }
    struct ibv_cq *cq;
    void *cq_ctx;
    if (ibv_get_cq_event(s->c.channel, &cq, &cq_ctx)) lean_fail("ibv_get_cq_event failed");
    if (cq != s->c.rcq) lean_fail("ibv_get_cq_event: an event of another CQ");
    s->armed = false;
    if (++s->unacked == 64) {
      ibv_ack_cq_events(s->c.rcq, s->unacked);
      s->unacked = 0;
    }
  }
  lean_expect_wc(&wc, IBV_WC_RECV, "receive");
  const uint32_t slot = (uint32_t)(s->received % kRq);
  if (wc.wr_id != slot)
    lean_fail("receive %llu completed in slot %llu, expected %u", (unsigned long long)s->received,
              (unsigned long long)wc.wr_id, slot);
  if (wc.byte_len != sizeof(uint64_t)) lean_fail("receive of %u bytes, expected 8", wc.byte_len);
  if (s->rbuf[slot] != seq)
    lean_fail("message %llu carries %llu: lost or reordered", (unsigned long long)seq,
              (unsigned long long)s->rbuf[slot]);
  s->received++;
  post_recv(s, slot);
}

/* The floor, interleaved: after each sample of K verbs round trips, the
 * same two processes bounce one cache line kFloorPerSample times through a
 * shared page (the server's POSIX shared memory object, unlinked once both
 * have it mapped), as bench/shm_floor does between two forked processes.
 * Both samples see the same CPUs, placement and load, so their ratio holds
 * where the machine's state moves between runs. */
enum { kFloorPerSample = 64 };
static char floor_name[64];

static volatile uint64_t *floor_line(const char *host, uint64_t server_pid) {
  snprintf(floor_name, sizeof(floor_name), "/lean_pingpong_floor.%llu", (unsigned long long)server_pid);
  int fd = shm_open(floor_name, host ? O_RDWR : O_RDWR | O_CREAT | O_EXCL, 0600);
  if (fd < 0) lean_fail("shm_open %s: %s", floor_name, strerror(errno));
  if (!host && ftruncate(fd, 4096)) lean_fail("ftruncate %s: %s", floor_name, strerror(errno));
  void *p = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) lean_fail("mmap %s: %s", floor_name, strerror(errno));
  return p;
}

static void floor_unlink(void) { shm_unlink(floor_name); }

/* n round trips: the client writes 2i+1 and waits for 2i+2, the server the
 * other way round; a value past the one awaited fails. */
static void floor_bounce(volatile uint64_t *line, const char *host, uint64_t *i, uint64_t n) {
  for (uint64_t end = *i + n; *i < end; ++*i) {
    const uint64_t ask = 2 * *i + 1, answer = 2 * *i + 2, want = host ? answer : ask;
    if (host) __atomic_store_n(line, ask, __ATOMIC_RELEASE);
    uint64_t v;
    for (unsigned spins = 0; (v = __atomic_load_n(line, __ATOMIC_ACQUIRE)) != want;) {
      if (v > want)
        lean_fail("the floor's line holds %llu, awaited %llu", (unsigned long long)v,
                  (unsigned long long)want);
      if (++spins % 4096 == 0) sched_yield(); /* the peer may wait for this CPU */
    }
    if (!host) __atomic_store_n(line, answer, __ATOMIC_RELEASE);
  }
}

static void usage(void) {
  fprintf(
      stderr,
      "usage: lean_pingpong [-e] [-n ROUNDS] [-k K] [-r REPS] [-w WARMUP] [-d DEV] -p PORT [SERVER_IPV4]\n");
  exit(2);
}

int main(int argc, char **argv) {
  struct pp *s = calloc(1, sizeof(*s));
  if (!s) lean_fail("out of memory");
  uint64_t rounds = 0, k = 0, reps = 5, warmup = 1000;
  int port = 0, opt;
  const char *dev = NULL;
  while ((opt = getopt(argc, argv, "en:k:r:w:d:p:")) != -1) {
    switch (opt) {
      case 'e':
        s->event = true;
        break;
      case 'n':
        rounds = lean_parse_u64(optarg, "-n");
        break;
      case 'k':
        k = lean_parse_u64(optarg, "-k");
        break;
      case 'r':
        reps = lean_parse_u64(optarg, "-r");
        break;
      case 'w':
        warmup = lean_parse_u64(optarg, "-w");
        break;
      case 'd':
        dev = optarg;
        break;
      case 'p':
        port = (int)lean_parse_u64(optarg, "-p");
        break;
      default:
        usage();
    }
  }
  if (port <= 0 || port > 65535 || argc - optind > 1) usage();
  const char *host = optind < argc ? argv[optind] : NULL;
  if (!rounds) rounds = s->event ? 4000 : 20000;
  if (!k) k = s->event ? 1 : 16;

  /* The client's settings reach the server before it creates anything. */
  struct lean_info mine = {0}, peer = {0};
  mine.param[0] = s->event, mine.param[1] = rounds, mine.param[2] = k, mine.param[3] = reps;
  mine.param[4] = warmup;
  s->c.sock = -1;
  lean_tcp_connect(&s->c, host, port);
  lean_swap(&s->c, &mine, &peer);
  if (!host) {
    s->event = peer.param[0], rounds = peer.param[1], k = peer.param[2], reps = peer.param[3];
    warmup = peer.param[4];
  }
  if (reps == 0 || k == 0 || rounds % k) lean_fail("-r and -k must be positive and -n a multiple of -k");

  struct lean_qp_opts o = {.dev = dev,
                           .sq_depth = kSq,
                           .rq_depth = kRq,
                           .scq_cqe = kSq,
                           .rcq_cqe = kRq,
                           .max_inline = 64,
                           .channel = s->event};
  lean_open(&s->c, &o);
  s->inline_ok = s->c.cap.max_inline_data >= sizeof(uint64_t);
  s->smr = ibv_reg_mr(s->c.pd, s->sbuf, sizeof(s->sbuf), 0);
  s->rmr = ibv_reg_mr(s->c.pd, s->rbuf, sizeof(s->rbuf), IBV_ACCESS_LOCAL_WRITE);
  if (!s->smr || !s->rmr) lean_fail("ibv_reg_mr failed");
  for (uint32_t i = 0; i < kRq; i++) post_recv(s, i);
  lean_local_info(&s->c, &mine);
  mine.param[5] = (uint64_t)getpid(); /* names the server's floor page */
  lean_swap(&s->c, &mine, &peer);
  lean_connect(&s->c, &peer);
  s->total_sends = warmup + reps * rounds;
  /* Busy-poll mode: the floor in the same two processes, in turns.  The
   * server creates its page before the sync, the client maps it after. */
  volatile uint64_t *line = NULL;
  if (!s->event && !host) line = floor_line(NULL, (uint64_t)getpid());
  lean_sync(&s->c);
  if (!s->event) {
    if (host) line = floor_line(host, peer.param[5]);
    lean_sync(&s->c); /* both have it mapped */
    if (!host) floor_unlink();
  }

  const uint64_t samples_per_rep = rounds / k, nsamples = reps * samples_per_rep;
  double *samples = calloc(nsamples, sizeof(double)), *floors = calloc(nsamples, sizeof(double));
  double *ratios = calloc(nsamples, sizeof(double)), *rep_median = calloc(reps, sizeof(double));
  double *rep_floor = calloc(reps, sizeof(double)), *copy = calloc(samples_per_rep, sizeof(double));
  if (!samples || !floors || !ratios || !rep_median || !rep_floor || !copy) lean_fail("out of memory");
  uint64_t seq = 0, bounce = 0;
  lean_deadline(60, "warm-up");
  for (uint64_t i = 0; i < warmup; i++, seq++) {
    if (host) {
      send_seq(s, seq);
      recv_seq(s, seq);
    } else {
      recv_seq(s, seq);
      send_seq(s, seq);
    }
  }
  if (line) floor_bounce(line, host, &bounce, 1000);
  for (uint64_t r = 0; r < reps; r++) {
    lean_deadline(60, "a repetition");
    double *mine = samples + r * samples_per_rep, *mine_floor = floors + r * samples_per_rep;
    for (uint64_t j = 0; j < samples_per_rep; j++) {
      const uint64_t t0 = lean_now_ns();
      for (uint64_t i = 0; i < k; i++, seq++) {
        if (host) {
          send_seq(s, seq);
          recv_seq(s, seq);
        } else {
          recv_seq(s, seq);
          send_seq(s, seq);
        }
      }
      const uint64_t t1 = lean_now_ns();
      mine[j] = (double)(t1 - t0) / (double)k;
      if (!line) continue;
      floor_bounce(line, host, &bounce, kFloorPerSample);
      mine_floor[j] = (double)(lean_now_ns() - t1) / kFloorPerSample;
      ratios[r * samples_per_rep + j] = mine[j] / mine_floor[j];
    }
    if (!host) continue;
    memcpy(copy, mine, samples_per_rep * sizeof(double));
    rep_median[r] = lean_median(copy, samples_per_rep);
    printf("lean_pingpong: repetition %llu: median round trip %.1f ns", (unsigned long long)r + 1,
           rep_median[r]);
    if (line) {
      memcpy(copy, mine_floor, samples_per_rep * sizeof(double));
      rep_floor[r] = lean_median(copy, samples_per_rep);
      printf(", the floor's %.1f ns", rep_floor[r]);
    }
    printf("\n");
  }
  lean_deadline(60, "teardown");
  while (s->retired < s->posted) reap(s, true);
  if (host) {
    double min = rep_median[0], max = rep_median[0];
    for (uint64_t r = 1; r < reps; r++) {
      if (rep_median[r] < min) min = rep_median[r];
      if (rep_median[r] > max) max = rep_median[r];
    }
    printf("lean_pingpong: RC 8 B SEND (%s), %s, %llu x %llu round trips in samples of %llu, %llu warm-up\n",
           s->inline_ok ? "inline" : "not inline", s->event ? "event-driven (ibv_get_cq_event)" : "busy-poll",
           (unsigned long long)reps, (unsigned long long)rounds, (unsigned long long)k,
           (unsigned long long)warmup);
    printf("lean_pingpong: repetition medians %.1f-%.1f ns\n", min, max);
    const double rtt = lean_median(samples, nsamples);
    printf("lean_pingpong: result rtt_ns=%.1f one_way_ns=%.1f", rtt, rtt / 2);
    if (line) {
      const double floor_rtt = lean_median(floors, nsamples);
      printf(" floor_one_way_ns=%.1f ratio=%.2f", floor_rtt / 2, lean_median(ratios, nsamples));
    }
    printf("\n");
  } else {
    printf("lean_pingpong: server: %llu messages received in order\n", (unsigned long long)s->received);
  }
  /* Both sides are done before either destroys its QP. */
  lean_sync(&s->c);
  lean_deadline(0, "");
  lean_destroy_qp(&s->c); /* flushes the posted receives before their MR goes */
  lean_check(ibv_dereg_mr(s->smr), "ibv_dereg_mr");
  lean_check(ibv_dereg_mr(s->rmr), "ibv_dereg_mr");
  lean_close(&s->c, s->unacked);
  if (line) munmap((void *)line, 4096);
  free(samples);
  free(floors);
  free(ratios);
  free(rep_median);
  free(rep_floor);
  free(copy);
  free(s);
  return 0;
}
