/* teardown_race_sim: the shape of libfabric 1.17's ofi_rxm teardown race
 * (docs/softnic.md), played on purpose, so that tests/e2e/CMakeLists.txt
 * can test run_pair.sh's --teardown-race on a pair whose traces prove the
 * race: the proven race run again (and passing), and proven twice (a
 * skip).  A plain verbs program (bench/lean_common.h's plumbing).
 *
 * The server posts two receives; the client SENDs two messages and sees
 * both complete (each one placed in the server's receive queue); both
 * print "sim: work done".  The server polls one receive, then, hanging:
 * destroys its QP with the second message in it and polls on for it, for
 * ever (what the hung side of the real race does); not hanging: polls the
 * second, destroys its QP and exits 0.
 *
 * May not: hang unless told (-H), or report success with a message
 * missing (lean_common fails loudly).
 *
 * usage: teardown_race_sim -p PORT [-H always|once:MARKER] [SERVER_IPV4]
 *   -H always       the server hangs;
 *   -H once:MARKER  the server hangs unless MARKER exists, and creates it
 *                   (a second run of the pair passes). */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "lean_common.h"

enum { kMsgs = 2 };

/* Whether the server hangs this run (-H). */
static bool should_hang(const char *how) {
  if (!how) return false;
  if (strcmp(how, "always") == 0) return true;
  if (strncmp(how, "once:", 5) != 0 || !how[5]) lean_fail("bad -H '%s'", how);
  const int fd = open(how + 5, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd >= 0) {
    close(fd);
    return true; /* the first run: the marker is new */
  }
  return false;
}

static void poll_one(struct ibv_cq *cq, enum ibv_wc_opcode opcode, const char *what) {
  struct ibv_wc wc;
  int got;
  while ((got = ibv_poll_cq(cq, 1, &wc)) == 0) {}
  if (got < 0) lean_fail("ibv_poll_cq failed");
  lean_expect_wc(&wc, opcode, what);
}

int main(int argc, char **argv) {
  int port = 0, opt;
  const char *hang = NULL;
  while ((opt = getopt(argc, argv, "p:H:")) != -1) {
    if (opt == 'p')
      port = (int)lean_parse_u64(optarg, "-p");
    else if (opt == 'H')
      hang = optarg;
    else
      lean_fail("usage: teardown_race_sim -p PORT [-H always|once:MARKER] [SERVER_IPV4]");
  }
  if (port <= 0 || port > 65535 || argc - optind > 1) lean_fail("usage: teardown_race_sim -p PORT ...");
  const char *host = optind < argc ? argv[optind] : NULL;
  struct lean_conn c = {.sock = -1};
  lean_tcp_connect(&c, host, port);
  struct lean_qp_opts o = {.sq_depth = 4, .rq_depth = 4, .scq_cqe = 4, .rcq_cqe = 4};
  lean_open(&c, &o);
  lean_deadline(60, "the exchange");
  uint64_t *buf = calloc(kMsgs, sizeof(uint64_t));
  if (!buf) lean_fail("out of memory");
  struct ibv_mr *mr = ibv_reg_mr(c.pd, buf, kMsgs * sizeof(uint64_t), IBV_ACCESS_LOCAL_WRITE);
  if (!mr) lean_fail("ibv_reg_mr failed");
  for (int i = 0; i < kMsgs && !host; i++) {
    struct ibv_sge sge = {(uintptr_t)&buf[i], sizeof(uint64_t), mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1}, *bad;
    lean_check(ibv_post_recv(c.qp, &wr, &bad), "ibv_post_recv");
  }
  struct lean_info mine = {0}, peer = {0};
  lean_local_info(&c, &mine);
  lean_swap(&c, &mine, &peer);
  lean_connect(&c, &peer);
  lean_sync(&c); /* the server's receives are posted */
  if (host) {
    for (int i = 0; i < kMsgs; i++) {
      buf[i] = 100 + (uint64_t)i;
      struct ibv_sge sge = {(uintptr_t)&buf[i], sizeof(uint64_t), mr->lkey};
      struct ibv_send_wr wr = {.wr_id = (uint64_t)i, .sg_list = &sge, .num_sge = 1};
      wr.opcode = IBV_WR_SEND;
      wr.send_flags = IBV_SEND_SIGNALED;
      struct ibv_send_wr *bad;
      lean_check(ibv_post_send(c.qp, &wr, &bad), "ibv_post_send");
      poll_one(c.scq, IBV_WC_SEND, "a SEND");
    }
    printf("sim: work done: %d messages sent\n", kMsgs);
    fflush(stdout);
    lean_sync(&c); /* the server has polled one */
  } else {
    poll_one(c.rcq, IBV_WC_RECV, "the first receive");
    printf("sim: work done: %d messages delivered\n", kMsgs);
    fflush(stdout);
    lean_sync(&c);
    if (should_hang(hang)) {
      lean_deadline(0, "");
      printf("sim: the QP destroyed with a message in it; polling on for it\n");
      fflush(stdout);
      lean_destroy_qp(&c);
      struct ibv_wc wc;
      for (;;) {
        if (ibv_poll_cq(c.rcq, 1, &wc) < 0) lean_fail("ibv_poll_cq failed");
        usleep(1000);
      }
    }
    poll_one(c.rcq, IBV_WC_RECV, "the second receive");
    if (buf[0] != 100 || buf[1] != 101)
      lean_fail("wrong payloads %llu %llu", (unsigned long long)buf[0], (unsigned long long)buf[1]);
  }
  lean_deadline(0, "");
  lean_destroy_qp(&c);
  lean_check(ibv_dereg_mr(mr), "ibv_dereg_mr");
  lean_close(&c, 0);
  free(buf);
  return 0;
}
