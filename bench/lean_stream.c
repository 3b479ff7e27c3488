/* lean_stream: the project's own streaming benchmark over an RC QP, two
 * processes, for bench/speed.sh's message-rate and bandwidth goals
 * (issue 33).  A plain verbs program (public libibverbs API only).
 *
 * -m send (default): the client streams 8 B SENDs (its sequence numbers,
 *   inline when the device allows) in chains of B work requests per
 *   ibv_post_send, the last of each chain signaled, at most SQ-B
 *   outstanding.  The server keeps 4096 receives posted: it polls up to 64
 *   completions at a time, checks each carries the next sequence number,
 *   and reposts them as one chain.  Flow control by credits, as streaming
 *   protocols do: every 512 messages the server RDMA WRITEs the number of
 *   receives it has posted into the client's memory, and the client never
 *   sends past it, so no SEND finds the receive queue empty (an RNR stall
 *   and retry, which measures the retry path instead of the stream).  The
 *   server's figure counts messages delivered to it:
 *   (N-1) / (time of the last - time of the first).
 * -m write: the client RDMA WRITEs S-byte messages (-s, 64 KiB) into the
 *   server's buffer, chains of 8, the last signaled, and times each
 *   repetition from its first post to its last completion.  In turns with
 *   each WRITE repetition it memcpy()s the same source buffer into a local
 *   buffer of the destination's size, the same offsets in the same order,
 *   so the ratio compares the same buffers in the same cache state:
 *     -c cached: one S-byte source and one S-byte destination, reused;
 *     -c stream: source and destination walk 256 MiB regions (-R MiB),
 *                S bytes further each message, far larger than any cache.
 *   The server checks at the end that its buffer holds the source's bytes.
 * Each side prints its repetitions, and the figure side (send: the server,
 * write: the client) a last line
 *   lean_stream: result KEY=VALUE ...
 * with the best repetition (send: mmsgs_per_s; write: write_gbps,
 * memcpy_gbps and their ratio).
 *
 * May not: report a figure after a lost, duplicated or reordered message,
 * wrong data, a failed verb or an error completion (exit 1, lean_common.h).
 *
 * usage: lean_stream [-m send|write] [-n N] [-r REPS] [-b B] [-s S] [-c cached|stream] [-R MiB]
 *                    [-d DEV] -p PORT [SERVER_IPV4]
 *   without SERVER_IPV4 it is the server; the client's settings win.
 *   defaults: send: -n 2000000 -b 32; write: -n 40000 (-c stream: 8192) -b 8; -r 3. */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "lean_common.h"

enum { kSendSq = 512, kRq = 4096, kRecvBatch = 64, kWriteSq = 64, kCreditEvery = 512, kCreditSlots = 16 };

struct st {
  struct lean_conn c;
  bool write, cached, inline_ok;
  uint64_t n, reps, batch, size, region;
  uint64_t *sbuf, *rbuf; /* send mode: kSendSq send slots, kRq receive slots */
  uint8_t *src, *dst;    /* write mode: source (client), destination (server), region bytes */
  uint8_t *local;        /* write mode, client: memcpy's destination */
  struct ibv_mr *smr, *rmr;
  uint64_t posted, retired, received;
  uint32_t sq;
  /* Send mode's flow control: the server RDMA WRITEs the number of receives
   * it has posted so far into the client's *credit, every kCreditEvery
   * messages, from a ring of slots; the client never has more SENDs out
   * than that, so no SEND meets an empty receive queue (an RNR stall). */
  volatile uint64_t *credit;      /* client: written by the server */
  uint64_t *credit_slots;         /* server: the WRITEs' sources */
  struct ibv_mr *cmr;             /* either side's credit memory */
  uint64_t credit_addr, credited; /* server: the client's word; the last count sent */
  uint32_t credit_rkey;
};

static void *map_region(uint64_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) lean_fail("mmap of %llu bytes failed", (unsigned long long)bytes);
  return p;
}

/* The source's bytes: a word pattern of the offset, so any misplaced or
 * missing message shows. */
static uint64_t pattern(uint64_t word) { return word * 0x9e3779b97f4a7c15ull + 1; }

static void reap(struct st *s, bool block, enum ibv_wc_opcode opcode) {
  struct ibv_wc wc[16];
  int n;
  do {
    n = ibv_poll_cq(s->c.scq, 16, wc);
    if (n < 0) lean_fail("ibv_poll_cq (send): %d", n);
  } while (block && n == 0);
  for (int i = 0; i < n; i++) {
    lean_expect_wc(&wc[i], opcode, opcode == IBV_WC_SEND ? "SEND" : "RDMA WRITE");
    if (wc[i].wr_id < s->retired || wc[i].wr_id >= s->posted)
      lean_fail("completion for wr_id %llu, outstanding %llu..%llu", (unsigned long long)wc[i].wr_id,
                (unsigned long long)s->retired, (unsigned long long)s->posted);
    s->retired = wc[i].wr_id + 1; /* the SQ completes in order */
  }
}

/* Posts `count` messages as one chain, the last signaled.  Send mode:
 * messages carry seq, seq+1, ...; write mode: message i of the repetition
 * goes to offset (first + i) * size within the region. */
static void post_chain(struct st *s, uint32_t count, uint64_t seq, uint64_t first,
                       const struct lean_info *peer) {
  struct ibv_send_wr wr[64], *bad;
  struct ibv_sge sge[64];
  while (s->posted + count - s->retired > s->sq) reap(s, true, s->write ? IBV_WC_RDMA_WRITE : IBV_WC_SEND);
  if (!s->write)
    while (seq + count > __atomic_load_n(s->credit, __ATOMIC_ACQUIRE)) {
      /* the server's receives are all taken: wait for it to post more */
    }
  for (uint32_t i = 0; i < count; i++) {
    memset(&wr[i], 0, sizeof(wr[i]));
    wr[i].wr_id = s->posted + i;
    wr[i].sg_list = &sge[i];
    wr[i].num_sge = 1;
    wr[i].next = i + 1 < count ? &wr[i + 1] : NULL;
    if (i + 1 == count) wr[i].send_flags = IBV_SEND_SIGNALED;
    if (s->write) {
      const uint64_t off = s->cached ? 0 : ((first + i) * s->size) % s->region;
      sge[i] = (struct ibv_sge){(uintptr_t)(s->src + off), (uint32_t)s->size, s->smr->lkey};
      wr[i].opcode = IBV_WR_RDMA_WRITE;
      wr[i].wr.rdma.remote_addr = peer->addr + off;
      wr[i].wr.rdma.rkey = peer->rkey;
    } else {
      const uint32_t slot =
          (uint32_t)((s->posted + i) % kSendSq); /* its last user retired: see the wait above */
      s->sbuf[slot] = seq + i;
      sge[i] = (struct ibv_sge){(uintptr_t)&s->sbuf[slot], sizeof(uint64_t), s->smr->lkey};
      wr[i].opcode = IBV_WR_SEND;
      if (s->inline_ok) wr[i].send_flags |= IBV_SEND_INLINE;
    }
  }
  lean_check(ibv_post_send(s->c.qp, wr, &bad), "ibv_post_send");
  s->posted += count;
}

static void post_recvs(struct st *s, const uint32_t *slots, int count) {
  struct ibv_recv_wr wr[kRecvBatch], *bad;
  struct ibv_sge sge[kRecvBatch];
  for (int i = 0; i < count; i++) {
    sge[i] = (struct ibv_sge){(uintptr_t)&s->rbuf[slots[i]], sizeof(uint64_t), s->rmr->lkey};
    wr[i] = (struct ibv_recv_wr){
        .wr_id = slots[i], .sg_list = &sge[i], .num_sge = 1, .next = i + 1 < count ? &wr[i + 1] : NULL};
  }
  lean_check(ibv_post_recv(s->c.qp, wr, &bad), "ibv_post_recv");
}

/* Send mode, server: tells the client how many receives it has posted. */
static void post_credit(struct st *s) {
  while (s->posted - s->retired >= kCreditSlots / 2) reap(s, true, IBV_WC_RDMA_WRITE);
  const uint32_t slot = (uint32_t)(s->posted % kCreditSlots); /* its last WRITE has completed */
  s->credited = s->credit_slots[slot] = kRq + s->received;
  struct ibv_sge sge = {(uintptr_t)&s->credit_slots[slot], sizeof(uint64_t), s->cmr->lkey};
  struct ibv_send_wr wr = {.wr_id = s->posted,
                           .sg_list = &sge,
                           .num_sge = 1,
                           .opcode = IBV_WR_RDMA_WRITE,
                           .send_flags = IBV_SEND_SIGNALED},
                     *bad;
  wr.wr.rdma.remote_addr = s->credit_addr;
  wr.wr.rdma.rkey = s->credit_rkey;
  lean_check(ibv_post_send(s->c.qp, &wr, &bad), "ibv_post_send (credit)");
  s->posted++;
  reap(s, false, IBV_WC_RDMA_WRITE);
}

/* Send mode, server: receives n messages; returns messages/s over them. */
static double receive_rep(struct st *s, uint64_t n) {
  struct ibv_wc wc[kRecvBatch];
  uint32_t slots[kRecvBatch];
  uint64_t first_ns = 0, last_ns = 0, got = 0;
  while (got < n) {
    int k = ibv_poll_cq(s->c.rcq, kRecvBatch, wc);
    if (k < 0) lean_fail("ibv_poll_cq (receive): %d", k);
    if (k == 0) continue;
    last_ns = lean_now_ns();
    if (got == 0) first_ns = last_ns;
    for (int i = 0; i < k; i++) {
      lean_expect_wc(&wc[i], IBV_WC_RECV, "receive");
      const uint32_t slot = (uint32_t)(s->received % kRq);
      if (wc[i].wr_id != slot)
        lean_fail("receive %llu completed in slot %llu, expected %u", (unsigned long long)s->received,
                  (unsigned long long)wc[i].wr_id, slot);
      if (wc[i].byte_len != sizeof(uint64_t)) lean_fail("receive of %u bytes, expected 8", wc[i].byte_len);
      if (s->rbuf[slot] != s->received)
        lean_fail("message %llu carries %llu: lost or reordered", (unsigned long long)s->received,
                  (unsigned long long)s->rbuf[slot]);
      s->received++;
      slots[i] = slot;
    }
    got += (uint64_t)k;
    if (got > n)
      lean_fail("%llu messages arrived, %llu were sent", (unsigned long long)got, (unsigned long long)n);
    post_recvs(s, slots, k);
    if (s->received - (s->credited - kRq) >= kCreditEvery) post_credit(s);
  }
  return last_ns > first_ns ? (double)(n - 1) * 1e9 / (double)(last_ns - first_ns) : 0;
}

/* Write mode, client: one memcpy pass over the same offsets; GB/s. */
static double memcpy_rep(struct st *s, unsigned *check) {
  const uint64_t t0 = lean_now_ns();
  for (uint64_t i = 0; i < s->n; i++) {
    const uint64_t off = s->cached ? 0 : (i * s->size) % s->region;
    memcpy(s->local + off, s->src + off, s->size);
  }
  const uint64_t t1 = lean_now_ns();
  *check += s->local[(s->n * 7) % s->region]; /* the copies are used */
  return (double)(s->n * s->size) / (double)(t1 - t0);
}

static double best_of(const double *v, uint64_t n) {
  double b = 0;
  for (uint64_t i = 0; i < n; i++)
    if (v[i] > b) b = v[i];
  return b;
}

static void usage(void) {
  fprintf(stderr,
          "usage: lean_stream [-m send|write] [-n N] [-r REPS] [-b B] [-s S] [-c cached|stream] [-R MiB] [-d "
          "DEV] "
          "-p PORT [SERVER_IPV4]\n");
  exit(2);
}

int main(int argc, char **argv) {
  struct st *s = calloc(1, sizeof(*s));
  if (!s) lean_fail("out of memory");
  s->reps = 3;
  s->size = 65536;
  uint64_t region_mib = 256;
  int port = 0, opt;
  const char *dev = NULL;
  while ((opt = getopt(argc, argv, "m:n:r:b:s:c:R:d:p:")) != -1) {
    switch (opt) {
      case 'm':
        if (strcmp(optarg, "write") && strcmp(optarg, "send")) usage();
        s->write = strcmp(optarg, "write") == 0;
        break;
      case 'n':
        s->n = lean_parse_u64(optarg, "-n");
        break;
      case 'r':
        s->reps = lean_parse_u64(optarg, "-r");
        break;
      case 'b':
        s->batch = lean_parse_u64(optarg, "-b");
        break;
      case 's':
        s->size = lean_parse_u64(optarg, "-s");
        break;
      case 'c':
        if (strcmp(optarg, "cached") && strcmp(optarg, "stream")) usage();
        s->cached = strcmp(optarg, "cached") == 0;
        break;
      case 'R':
        region_mib = lean_parse_u64(optarg, "-R");
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
  if (!s->n) s->n = s->write ? (s->cached ? 40000 : 8192) : 2000000;
  if (!s->batch) s->batch = s->write ? 8 : 32;

  /* The client's settings reach the server before it allocates: the
   * server first connects its TCP socket with a QP-less exchange. */
  struct lean_info mine = {0}, peer = {0};
  mine.param[0] = s->write, mine.param[1] = s->n, mine.param[2] = s->reps, mine.param[3] = s->batch;
  mine.param[4] = s->size, mine.param[5] = s->cached, mine.param[6] = region_mib;
  s->c.sock = -1;
  lean_tcp_connect(&s->c, host, port);
  lean_swap(&s->c, &mine, &peer);
  if (!host) {
    s->write = peer.param[0], s->n = peer.param[1], s->reps = peer.param[2], s->batch = peer.param[3];
    s->size = peer.param[4], s->cached = peer.param[5], region_mib = peer.param[6];
  }
  s->region = s->cached ? s->size : region_mib << 20;
  if (s->reps == 0 || s->batch == 0 || s->batch > 64 || s->n % s->batch || s->size == 0 ||
      s->size > (1u << 30) || s->region % s->size)
    lean_fail("bad settings: -r > 0, 0 < -b <= 64 dividing -n, 0 < -s <= 1 GiB dividing the region");

  s->sq = s->write ? kWriteSq : kSendSq;
  if (s->batch > s->sq / 2) lean_fail("-b over half the send queue (%u)", s->sq);
  struct lean_qp_opts o = {.dev = dev,
                           .sq_depth = s->sq,
                           .rq_depth = s->write ? 1 : kRq,
                           .scq_cqe = (int)s->sq,
                           .rcq_cqe = s->write ? 1 : kRq,
                           .max_inline = s->write ? 0 : 64};
  lean_open(&s->c, &o);
  s->inline_ok = !s->write && s->c.cap.max_inline_data >= sizeof(uint64_t);
  if (s->write) {
    uint8_t *buf = map_region(s->region);
    if (host) {
      s->src = buf;
      uint64_t *w = (uint64_t *)buf;
      for (uint64_t i = 0; i < s->region / 8; i++) w[i] = pattern(i);
      s->local = map_region(s->region);
      memset(s->local, 0, s->region); /* faulted in before timing */
      s->smr = ibv_reg_mr(s->c.pd, buf, s->region, 0);
    } else {
      s->dst = buf;
      memset(buf, 0, s->region);
      s->rmr = ibv_reg_mr(s->c.pd, buf, s->region, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
      mine.addr = (uintptr_t)buf;
      mine.rkey = s->rmr->rkey;
    }
  } else {
    s->sbuf = calloc(kSendSq, sizeof(uint64_t));
    s->rbuf = calloc(kRq, sizeof(uint64_t));
    if (!s->sbuf || !s->rbuf) lean_fail("out of memory");
    s->smr = ibv_reg_mr(s->c.pd, s->sbuf, kSendSq * sizeof(uint64_t), 0);
    s->rmr = ibv_reg_mr(s->c.pd, s->rbuf, kRq * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
    s->credit_slots = calloc(kCreditSlots, sizeof(uint64_t));
    if (!s->credit_slots) lean_fail("out of memory");
    s->credit = s->credit_slots;
    *s->credit = kRq; /* the server posts them all before the first SEND */
    s->credited = kRq;
    s->cmr = ibv_reg_mr(s->c.pd, s->credit_slots, kCreditSlots * sizeof(uint64_t),
                        host ? IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE : 0);
    if (!s->cmr) lean_fail("ibv_reg_mr (credits) failed");
    mine.addr = (uintptr_t)s->credit_slots;
    mine.rkey = s->cmr->rkey;
    uint32_t slots[kRecvBatch];
    for (uint32_t i = 0; i < kRq; i += kRecvBatch) {
      for (uint32_t j = 0; j < kRecvBatch; j++) slots[j] = i + j;
      post_recvs(s, slots, kRecvBatch);
    }
  }
  if ((host && !s->smr) || (!host && !s->rmr)) lean_fail("ibv_reg_mr failed");
  lean_local_info(&s->c, &mine);
  lean_swap(&s->c, &mine, &peer);
  lean_connect(&s->c, &peer);
  s->credit_addr = peer.addr, s->credit_rkey = peer.rkey;

  double *fig = calloc(s->reps, sizeof(double)), *mem = calloc(s->reps, sizeof(double));
  if (!fig || !mem) lean_fail("out of memory");
  unsigned check = 0;
  uint64_t seq = 0;
  const enum ibv_wc_opcode opcode = s->write ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
  for (uint64_t r = 0; r < s->reps; r++) {
    lean_deadline(120, "a repetition");
    if (s->write && host) {
      mem[r] = memcpy_rep(s, &check);
      printf("lean_stream: repetition %llu: memcpy %.2f GB/s\n", (unsigned long long)r + 1, mem[r]);
    }
    lean_sync(&s->c); /* the server's receives are all posted */
    if (!host && s->write) {
      lean_sync(&s->c); /* the client's WRITEs are done */
      continue;
    }
    if (!host) {
      fig[r] = receive_rep(s, s->n) / 1e6;
      printf("lean_stream: repetition %llu: %.3f M messages/s received\n", (unsigned long long)r + 1, fig[r]);
      lean_sync(&s->c);
      continue;
    }
    const uint64_t t0 = lean_now_ns();
    for (uint64_t i = 0; i < s->n; i += s->batch) {
      post_chain(s, (uint32_t)s->batch, seq, i, &peer);
      seq += s->batch;
    }
    while (s->retired < s->posted) reap(s, true, opcode);
    const double secs = (double)(lean_now_ns() - t0) / 1e9;
    if (s->write) {
      fig[r] = (double)(s->n * s->size) / secs / 1e9;
      printf("lean_stream: repetition %llu: RDMA WRITE %.2f GB/s\n", (unsigned long long)r + 1, fig[r]);
    } else {
      printf("lean_stream: repetition %llu: %.3f M messages/s posted and completed\n",
             (unsigned long long)r + 1, (double)s->n / secs / 1e6);
    }
    lean_sync(&s->c); /* the server has them all */
  }
  lean_deadline(120, "the check of the data");
  if (s->write && !host) { /* every byte the client wrote holds the source's pattern */
    const uint64_t written = s->n * s->size < s->region ? s->n * s->size : s->region;
    const uint64_t *w = (const uint64_t *)s->dst;
    for (uint64_t i = 0; i < written / 8; i++)
      if (w[i] != pattern(i))
        lean_fail("the destination's word %llu is wrong: a WRITE was lost", (unsigned long long)i);
    printf("lean_stream: server: %llu bytes of the destination checked\n", (unsigned long long)written);
  }
  if (!s->write && !host) {
    printf("lean_stream: server: %llu messages received in order\n", (unsigned long long)s->received);
    while (s->retired < s->posted) reap(s, true, IBV_WC_RDMA_WRITE); /* the credit WRITEs */
  }
  if (s->write && host) {
    printf(
        "lean_stream: RC RDMA WRITE of %llu bytes, %s (%llu MiB regions), %llu x %llu messages, chains of "
        "%llu\n",
        (unsigned long long)s->size, s->cached ? "cached: one source and destination reused" : "streaming",
        (unsigned long long)(s->region >> 20), (unsigned long long)s->reps, (unsigned long long)s->n,
        (unsigned long long)s->batch);
    const double w = best_of(fig, s->reps), m = best_of(mem, s->reps);
    printf("lean_stream: result write_gbps=%.3f memcpy_gbps=%.3f ratio=%.3f (check %u)\n", w, m, w / m,
           check & 0xff);
  }
  if (!s->write && !host) {
    printf("lean_stream: RC 8 B SEND (%s), %llu x %llu messages, chains of %llu, %d receives posted\n",
           s->inline_ok ? "inline" : "not inline", (unsigned long long)s->reps, (unsigned long long)s->n,
           (unsigned long long)s->batch, kRq);
    printf("lean_stream: result mmsgs_per_s=%.3f\n", best_of(fig, s->reps));
  }
  lean_sync(&s->c); /* both are done before either destroys its QP */
  lean_deadline(0, "");
  lean_destroy_qp(&s->c); /* flushes the posted receives before their MR goes */
  if (s->smr) lean_check(ibv_dereg_mr(s->smr), "ibv_dereg_mr");
  if (s->rmr) lean_check(ibv_dereg_mr(s->rmr), "ibv_dereg_mr");
  if (s->cmr) lean_check(ibv_dereg_mr(s->cmr), "ibv_dereg_mr");
  lean_close(&s->c, 0);
  return 0;
}
