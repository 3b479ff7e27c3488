// Two processes on one softnic fabric: payload crosses address spaces (the
// staged small-SEND path, process_vm_writev/readv for large ones, atomics),
// and a peer killed with SIGKILL gives the survivor retry-exceeded and flush
// completions instead of a hang, also while a message is being placed into
// it in chunks (--chaos=place).
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "softnic/chaos.h"
#include "softnic/fabric.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

constexpr size_t kBuf = 1 << 16;

struct Endpoint {
  uint32_t qpn[2];
  uint64_t addr;
  uint32_t rkey;
};

struct Side {
  ibv_context* ctx;
  ibv_pd* pd;
  ibv_cq* cq[2];
  ibv_qp* qp[2];
  ibv_mr* mr;
  uint8_t* buf;
};

bool MakeSide(Side* s) {
  s->ctx = OpenSoftnic();
  if (!s->ctx) return false;
  s->pd = ibv_alloc_pd(s->ctx);
  s->buf = static_cast<uint8_t*>(aligned_alloc(4096, kBuf));
  std::memset(s->buf, 0, kBuf);
  s->mr = ibv_reg_mr(
      s->pd, s->buf, kBuf,
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
  for (int i = 0; i < 2; ++i) {
    s->cq[i] = ibv_create_cq(s->ctx, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = s->cq[i];
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 16;
    a.cap.max_send_sge = a.cap.max_recv_sge = 2;
    a.cap.max_inline_data = 64;
    s->qp[i] = ibv_create_qp(s->pd, &a);
    if (!s->cq[i] || !s->qp[i]) return false;
  }
  return s->pd && s->mr;
}

void DestroySide(Side* s) {
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(ibv_destroy_qp(s->qp[i]), 0);
    EXPECT_EQ(ibv_destroy_cq(s->cq[i]), 0);
  }
  EXPECT_EQ(ibv_dereg_mr(s->mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(s->pd), 0);
  EXPECT_EQ(ibv_close_device(s->ctx), 0);
  free(s->buf);
}

int Connect(ibv_qp* qp, uint32_t remote) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_INIT;
  a.port_num = 1;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
  if (int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTR;
  a.path_mtu = IBV_MTU_4096;
  a.dest_qp_num = remote;
  a.ah_attr.dlid = 1;
  a.ah_attr.port_num = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  if (int rc = ibv_modify_qp(qp, &a,
                             IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                 IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
    return rc;
  a = {};
  a.qp_state = IBV_QPS_RTS;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  a.max_rd_atomic = 1;
  return ibv_modify_qp(qp, &a,
                       IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                           IBV_QP_MAX_QP_RD_ATOMIC);
}

int PostRecv(Side& s, int q, uint64_t id, uint64_t off, uint32_t len) {
  ibv_sge sge{reinterpret_cast<uint64_t>(s.buf + off), len, s.mr->lkey};
  ibv_recv_wr wr{};
  wr.wr_id = id;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* bad;
  return ibv_post_recv(s.qp[q], &wr, &bad);
}

int Post(Side& s, int q, ibv_wr_opcode op, uint64_t id, uint64_t off, uint32_t len, uint64_t raddr = 0,
         uint32_t rkey = 0, uint64_t add = 0) {
  ibv_sge sge{reinterpret_cast<uint64_t>(s.buf + off), len, s.mr->lkey};
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.opcode = op;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  if (op == IBV_WR_ATOMIC_FETCH_AND_ADD) {
    wr.wr.atomic = {raddr, add, 0, rkey};
  } else {
    wr.wr.rdma = {raddr, rkey};
  }
  ibv_send_wr* bad;
  return ibv_post_send(s.qp[q], &wr, &bad);
}

bool PollOne(ibv_cq* cq, ibv_wc* wc, int timeout_ms = 3000) {
  auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  while (std::chrono::steady_clock::now() < deadline) {
    int n = ibv_poll_cq(cq, 1, wc);
    if (n == 1) return true;
    if (n < 0) return false;
  }
  return false;
}

TEST(SoftnicPeers, CrossProcessTransfersAndKilledPeer) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The responder: publishes its QPs and buffer, posts receives, waits.
    Side s{};
    if (!MakeSide(&s)) _exit(10);
    for (size_t i = 0; i < 64; ++i) s.buf[32768 + i] = static_cast<uint8_t>(i * 3);
    Endpoint me{{s.qp[0]->qp_num, s.qp[1]->qp_num}, reinterpret_cast<uint64_t>(s.buf), s.mr->rkey};
    if (write(to_parent[1], &me, sizeof(me)) != sizeof(me)) _exit(11);
    Endpoint peer;
    if (read(to_child[0], &peer, sizeof(peer)) != sizeof(peer)) _exit(12);
    for (int q = 0; q < 2; ++q)
      if (Connect(s.qp[q], peer.qpn[q])) _exit(13);
    if (PostRecv(s, 0, 1, 0, 8) || PostRecv(s, 0, 2, 4096, 8192)) _exit(14);
    char ready = 'r';
    if (write(to_parent[1], &ready, 1) != 1) _exit(15);
    // Echo the two receives' bytes back to the parent for checking.
    ibv_wc wc;
    for (int i = 0; i < 2; ++i)
      if (!PollOne(s.cq[0], &wc, 10000) || wc.status != IBV_WC_SUCCESS) _exit(16);
    if (write(to_parent[1], s.buf, 8) != 8 || write(to_parent[1], s.buf + 4096, 8192) != 8192) _exit(17);
    pause();
    _exit(0);
  }
  Side s{};
  ASSERT_TRUE(MakeSide(&s));
  Endpoint peer;
  ASSERT_EQ(read(to_parent[0], &peer, sizeof(peer)), static_cast<ssize_t>(sizeof(peer)));
  for (int q = 0; q < 2; ++q) ASSERT_EQ(Connect(s.qp[q], peer.qpn[q]), 0);
  Endpoint me{{s.qp[0]->qp_num, s.qp[1]->qp_num}, reinterpret_cast<uint64_t>(s.buf), s.mr->rkey};
  ASSERT_EQ(write(to_child[1], &me, sizeof(me)), static_cast<ssize_t>(sizeof(me)));
  char ready;
  ASSERT_EQ(read(to_parent[0], &ready, 1), 1);

  // Small SEND (staged in the completion) and large SEND (process_vm_writev).
  std::memcpy(s.buf, "tinymsg", 8);
  for (size_t i = 0; i < 8192; ++i) s.buf[4096 + i] = static_cast<uint8_t>(i * 7);
  ibv_wc wc;
  ASSERT_EQ(Post(s, 0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(Post(s, 0, IBV_WR_SEND, 2, 4096, 8192), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  std::vector<uint8_t> echo(8 + 8192);
  size_t got = 0;
  while (got < echo.size()) {
    ssize_t n = read(to_parent[0], echo.data() + got, echo.size() - got);
    ASSERT_GT(n, 0);
    got += n;
  }
  EXPECT_EQ(std::memcmp(echo.data(), "tinymsg", 8), 0);
  EXPECT_EQ(std::memcmp(echo.data() + 8, s.buf + 4096, 8192), 0);

  // RDMA READ from the peer's memory, RDMA WRITE into it and read it back.
  ASSERT_EQ(Post(s, 0, IBV_WR_RDMA_READ, 3, 20000, 64, peer.addr + 32768, peer.rkey), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  for (size_t i = 0; i < 64; ++i) ASSERT_EQ(s.buf[20000 + i], static_cast<uint8_t>(i * 3)) << i;
  ASSERT_EQ(Post(s, 0, IBV_WR_RDMA_WRITE, 4, 4096, 8192, peer.addr + 40000, peer.rkey), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(Post(s, 0, IBV_WR_RDMA_READ, 5, 50000, 8192, peer.addr + 40000, peer.rkey), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(s.buf + 50000, s.buf + 4096, 8192), 0);
  // Atomics across processes.
  ASSERT_EQ(Post(s, 0, IBV_WR_ATOMIC_FETCH_AND_ADD, 6, 100, 8, peer.addr + 64, peer.rkey, 5), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  ASSERT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(Post(s, 0, IBV_WR_ATOMIC_FETCH_AND_ADD, 7, 100, 8, peer.addr + 64, peer.rkey, 5), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  uint64_t old;
  std::memcpy(&old, s.buf + 100, 8);
  EXPECT_EQ(old, 5u);

  // The peer dies.  A survivor waiting only on a receive gets it flushed; a
  // survivor that sends gets RETRY_EXC_ERR.  Neither hangs.
  ASSERT_EQ(PostRecv(s, 1, 90, 0, 64), 0);
  kill(child, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(PollOne(s.cq[1], &wc, 5000)) << "survivor hung waiting for a receive";
  EXPECT_EQ(wc.wr_id, 90u);
  EXPECT_EQ(wc.status, IBV_WC_WR_FLUSH_ERR);
  std::this_thread::sleep_for(std::chrono::milliseconds(30));  // past the liveness window
  ASSERT_EQ(Post(s, 0, IBV_WR_SEND, 8, 0, 8), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc, 5000)) << "survivor hung on a send";
  EXPECT_EQ(wc.wr_id, 8u);
  EXPECT_EQ(wc.status, IBV_WC_RETRY_EXC_ERR);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(5));
  ibv_qp_attr a;
  ibv_qp_init_attr init;
  ASSERT_EQ(ibv_query_qp(s.qp[0], &a, IBV_QP_STATE, &init), 0);
  EXPECT_EQ(a.qp_state, IBV_QPS_ERR);
  DestroySide(&s);
}

// The parent's half of the two tests' handshake below: makes its side,
// connects its QPs to the child's (whose endpoint comes first), sends its
// own, and waits for the child's ready byte.
void ConnectToChild(Side* s, int from_child, int to_child) {
  ASSERT_TRUE(MakeSide(s));
  Endpoint peer;
  ASSERT_EQ(read(from_child, &peer, sizeof(peer)), static_cast<ssize_t>(sizeof(peer)));
  for (int q = 0; q < 2; ++q) ASSERT_EQ(Connect(s->qp[q], peer.qpn[q]), 0);
  Endpoint me{{s->qp[0]->qp_num, s->qp[1]->qp_num}, 0, 0};
  ASSERT_EQ(write(to_child, &me, sizeof(me)), static_cast<ssize_t>(sizeof(me)));
  char ready;
  ASSERT_EQ(read(from_child, &ready, 1), 1);
}

// What the receiver saw of one completion, sent back to the parent.
struct SeenWc {
  uint64_t wr_id;
  uint32_t status, opcode, byte_len, imm_data, wc_flags, src_qp, slid;
};

// Receives of up to 16 bytes into a QP's own receive queue travel in one
// line of the completion (softnic/fabric.h kStagedInLine) and are scattered
// from the receiver's own record of the post: split over two SGEs, inline
// or not, with an immediate, empty, and one byte past the line (the
// completion's second line) all complete whole, in order, with the fields
// a NIC gives them.
TEST(SoftnicPeers, SmallReceivesInOneLineCompleteWholeAcrossProcesses) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Side s{};
    if (!MakeSide(&s)) _exit(10);
    std::memset(s.buf, 0xee, 4096);
    Endpoint me{{s.qp[0]->qp_num, s.qp[1]->qp_num}, 0, 0};
    if (write(to_parent[1], &me, sizeof(me)) != sizeof(me)) _exit(11);
    Endpoint peer;
    if (read(to_child[0], &peer, sizeof(peer)) != sizeof(peer)) _exit(12);
    for (int q = 0; q < 2; ++q)
      if (Connect(s.qp[q], peer.qpn[q])) _exit(13);
    // 11: two SGEs (5 + 11 bytes); 12: 16 bytes; 13: 8 bytes for an empty
    // SEND; 14: 32 bytes for 17.
    ibv_sge two[2] = {{reinterpret_cast<uint64_t>(s.buf), 5, s.mr->lkey},
                      {reinterpret_cast<uint64_t>(s.buf + 100), 11, s.mr->lkey}};
    ibv_recv_wr wr{};
    wr.wr_id = 11;
    wr.sg_list = two;
    wr.num_sge = 2;
    ibv_recv_wr* bad;
    if (ibv_post_recv(s.qp[0], &wr, &bad) || PostRecv(s, 0, 12, 200, 16) || PostRecv(s, 0, 13, 300, 8) ||
        PostRecv(s, 0, 14, 400, 32))
      _exit(14);
    char ready = 'r';
    if (write(to_parent[1], &ready, 1) != 1) _exit(15);
    SeenWc seen[4];
    for (int i = 0; i < 4; ++i) {
      ibv_wc wc;
      if (!PollOne(s.cq[0], &wc, 10000)) _exit(16);
      seen[i] = {wc.wr_id, wc.status, wc.opcode, wc.byte_len, wc.imm_data, wc.wc_flags, wc.src_qp, wc.slid};
    }
    if (write(to_parent[1], seen, sizeof(seen)) != sizeof(seen) || write(to_parent[1], s.buf, 512) != 512)
      _exit(17);
    char done;
    if (read(to_child[0], &done, 1) != 1) _exit(18);
    _exit(0);
  }
  close(to_parent[1]);  // a dead child ends the parent's reads
  close(to_child[0]);
  Side s{};
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(&s, to_parent[0], to_child[1]));
  for (int i = 0; i < 64; ++i) s.buf[i] = static_cast<uint8_t>(0x40 + i);
  // 16 bytes from two SGEs of 7 and 9 bytes, not inline.
  ibv_sge src[2] = {{reinterpret_cast<uint64_t>(s.buf), 7, s.mr->lkey},
                    {reinterpret_cast<uint64_t>(s.buf + 7), 9, s.mr->lkey}};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = src;
  wr.num_sge = 2;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(s.qp[0], &wr, &bad), 0);
  // 16 bytes inline with an immediate.
  ibv_sge in{reinterpret_cast<uint64_t>(s.buf + 16), 16, 0};
  wr = {};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND_WITH_IMM;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.imm_data = htonl(0x1234abcd);
  wr.sg_list = &in;
  wr.num_sge = 1;
  ASSERT_EQ(ibv_post_send(s.qp[0], &wr, &bad), 0);
  wr = {};
  wr.wr_id = 3;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  ASSERT_EQ(ibv_post_send(s.qp[0], &wr, &bad), 0);
  ASSERT_EQ(Post(s, 0, IBV_WR_SEND, 4, 32, 17), 0);
  for (uint64_t id = 1; id <= 4; ++id) {
    ibv_wc wc;
    ASSERT_TRUE(PollOne(s.cq[0], &wc));
    EXPECT_EQ(wc.wr_id, id);
    EXPECT_EQ(wc.status, IBV_WC_SUCCESS) << id;
  }
  SeenWc seen[4];
  uint8_t got[512];
  ASSERT_EQ(read(to_parent[0], seen, sizeof(seen)), static_cast<ssize_t>(sizeof(seen)));
  size_t n = 0;
  while (n < sizeof(got)) {
    ssize_t r = read(to_parent[0], got + n, sizeof(got) - n);
    ASSERT_GT(r, 0);
    n += r;
  }
  const uint32_t lens[4] = {16, 16, 0, 17};
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(seen[i].wr_id, 11u + i);
    EXPECT_EQ(seen[i].status, static_cast<uint32_t>(IBV_WC_SUCCESS)) << i;
    EXPECT_EQ(seen[i].opcode, static_cast<uint32_t>(IBV_WC_RECV)) << i;
    EXPECT_EQ(seen[i].byte_len, lens[i]) << i;
    EXPECT_EQ(seen[i].src_qp, s.qp[0]->qp_num) << i;
    EXPECT_EQ(seen[i].slid, 1u) << i;
    EXPECT_EQ(seen[i].wc_flags & IBV_WC_WITH_IMM, i == 1 ? static_cast<uint32_t>(IBV_WC_WITH_IMM) : 0u) << i;
  }
  EXPECT_EQ(seen[1].imm_data, htonl(0x1234abcd));
  EXPECT_EQ(std::memcmp(got, s.buf, 5), 0);             // the first SGE's 5 bytes
  EXPECT_EQ(got[5], 0xee);                              // and not one more
  EXPECT_EQ(std::memcmp(got + 100, s.buf + 5, 11), 0);  // the second SGE's 11
  EXPECT_EQ(got[111], 0xee);
  EXPECT_EQ(std::memcmp(got + 200, s.buf + 16, 16), 0);
  EXPECT_EQ(got[216], 0xee);
  EXPECT_EQ(got[300], 0xee);  // the empty SEND wrote nothing
  EXPECT_EQ(std::memcmp(got + 400, s.buf + 32, 17), 0);
  EXPECT_EQ(got[417], 0xee);
  char done = 'q';
  EXPECT_EQ(write(to_child[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the receiver failed: status " << status;
  DestroySide(&s);
}

// One page registered for local writing, then unmapped under its MR.
ibv_mr* RegisterUnmappedPage(Side& s) {
  void* page = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (page == MAP_FAILED) return nullptr;
  ibv_mr* mr = ibv_reg_mr(s.pd, page, 4096, IBV_ACCESS_LOCAL_WRITE);
  munmap(page, 4096);
  return mr;
}

// Memory unmapped under a live MR on either side of a small (staged) SEND
// between processes: the device writes or reads nothing, neither process
// faults, and the side whose memory is gone gets LOC_PROT_ERR (issue 10
// item 7).
TEST(SoftnicPeers, UnmappedMemoryOnEitherSideOfAStagedSendIsAnErrorCompletion) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // The responder: its first receive is on a page it then unmaps.
    Side s{};
    if (!MakeSide(&s)) _exit(10);
    Endpoint me{{s.qp[0]->qp_num, s.qp[1]->qp_num}, 0, 0};
    if (write(to_parent[1], &me, sizeof(me)) != sizeof(me)) _exit(11);
    Endpoint peer;
    if (read(to_child[0], &peer, sizeof(peer)) != sizeof(peer)) _exit(12);
    for (int q = 0; q < 2; ++q)
      if (Connect(s.qp[q], peer.qpn[q])) _exit(13);
    ibv_mr* gone = RegisterUnmappedPage(s);
    if (!gone) _exit(14);
    ibv_sge sge{reinterpret_cast<uint64_t>(gone->addr), 8, gone->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 1;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    if (ibv_post_recv(s.qp[0], &wr, &bad) || PostRecv(s, 1, 2, 0, 8)) _exit(15);
    char ready = 'r';
    if (write(to_parent[1], &ready, 1) != 1) _exit(16);
    ibv_wc wc;
    if (!PollOne(s.cq[0], &wc, 10000)) _exit(17);
    int status = wc.status;
    if (write(to_parent[1], &status, sizeof(status)) != sizeof(status)) _exit(18);
    char done;
    if (read(to_child[0], &done, 1) != 1) _exit(19);  // alive while the parent sends again
    _exit(0);
  }
  close(to_parent[1]);  // a dead child ends the parent's reads
  close(to_child[0]);
  Side s{};
  ASSERT_NO_FATAL_FAILURE(ConnectToChild(&s, to_parent[0], to_child[1]));

  // The receiver's buffer is gone: its poll reports LOC_PROT_ERR.
  ibv_wc wc;
  ASSERT_EQ(Post(s, 0, IBV_WR_SEND, 1, 0, 8), 0);
  ASSERT_TRUE(PollOne(s.cq[0], &wc));
  int child_status = -1;
  EXPECT_EQ(read(to_parent[0], &child_status, sizeof(child_status)),
            static_cast<ssize_t>(sizeof(child_status)));
  EXPECT_EQ(child_status, IBV_WC_LOC_PROT_ERR);

  // The sender's buffer is gone: LOC_PROT_ERR before anything is sent.
  ibv_mr* gone = RegisterUnmappedPage(s);
  ASSERT_NE(gone, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(gone->addr), 8, gone->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 2;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(s.qp[1], &wr, &bad), 0);
  ASSERT_TRUE(PollOne(s.cq[1], &wc));
  EXPECT_EQ(wc.status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(ibv_dereg_mr(gone), 0);
  char done = 'q';
  EXPECT_EQ(write(to_child[1], &done, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "the receiver died: status " << status;
  DestroySide(&s);
}

// --chaos=place, outcome 1: the last chunk of a message first.
uint64_t LastChunkFirst(softnic::ChaosPoint p, uint64_t, uint64_t, uint64_t n, const char*, uint32_t) {
  return p == softnic::ChaosPoint::kPlace && n > 1 ? 1 : 0;
}

// A peer killed while softnic places a 16 KiB WRITE into its memory in
// chunks (softnic/placement.h): the survivor sees the message partly
// placed in the peer's memory, then an error completion, never a hang.
TEST(SoftnicPeers, PeerKilledMidPlacementIsAnErrorCompletion) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Side s{};
    if (!MakeSide(&s)) _exit(10);
    Endpoint me{{s.qp[0]->qp_num, s.qp[1]->qp_num}, reinterpret_cast<uint64_t>(s.buf), s.mr->rkey};
    if (write(to_parent[1], &me, sizeof(me)) != sizeof(me)) _exit(11);
    Endpoint peer;
    if (read(to_child[0], &peer, sizeof(peer)) != sizeof(peer)) _exit(12);
    for (int q = 0; q < 2; ++q)
      if (Connect(s.qp[q], peer.qpn[q])) _exit(13);
    char ready = 'r';
    if (write(to_parent[1], &ready, 1) != 1) _exit(15);
    pause();
    _exit(0);
  }
  Side s{};
  ASSERT_TRUE(MakeSide(&s));
  Endpoint peer;
  ASSERT_EQ(read(to_parent[0], &peer, sizeof(peer)), static_cast<ssize_t>(sizeof(peer)));
  for (int q = 0; q < 2; ++q) ASSERT_EQ(Connect(s.qp[q], peer.qpn[q]), 0);
  Endpoint me{{s.qp[0]->qp_num, s.qp[1]->qp_num}, reinterpret_cast<uint64_t>(s.buf), s.mr->rkey};
  ASSERT_EQ(write(to_child[1], &me, sizeof(me)), static_cast<ssize_t>(sizeof(me)));
  char ready;
  ASSERT_EQ(read(to_parent[0], &ready, 1), 1);

  constexpr uint32_t kMsg = 16384, kChunk = 256;
  for (uint32_t i = 0; i < kMsg; ++i) s.buf[i] = static_cast<uint8_t>(i % 251 + 1);
  softnic::SetChaos(&LastChunkFirst, 1u << static_cast<unsigned>(softnic::ChaosPoint::kPlace));
  ASSERT_EQ(Post(s, 0, IBV_WR_RDMA_WRITE, 1, 0, kMsg, peer.addr, peer.rkey), 0);
  ibv_wc wc;
  EXPECT_EQ(ibv_poll_cq(s.cq[0], 1, &wc), 0) << "completed before its last chunk";
  // In the peer's memory: the last chunk placed, the one before not yet.
  uint8_t last[kChunk], before[kChunk];
  iovec local[2] = {{last, kChunk}, {before, kChunk}};
  iovec remote[2] = {{reinterpret_cast<void*>(peer.addr + kMsg - kChunk), kChunk},
                     {reinterpret_cast<void*>(peer.addr + kMsg - 2 * kChunk), kChunk}};
  ASSERT_EQ(process_vm_readv(child, local, 2, remote, 2, 0), static_cast<ssize_t>(2 * kChunk));
  EXPECT_EQ(std::memcmp(last, s.buf + kMsg - kChunk, kChunk), 0);
  EXPECT_EQ(before[0], 0);
  kill(child, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(PollOne(s.cq[0], &wc, 5000)) << "survivor hung mid-placement";
  EXPECT_EQ(wc.wr_id, 1u);
  EXPECT_TRUE(wc.status == IBV_WC_RETRY_EXC_ERR || wc.status == IBV_WC_WR_FLUSH_ERR)
      << ibv_wc_status_str(wc.status);
  softnic::SetChaos(nullptr, 0);
  DestroySide(&s);
}

}  // namespace
}  // namespace rdmasan::testing

namespace rdmasan::softnic {
namespace {

// A process that dies without detaching leaves its objects in the fabric;
// the next process to attach reclaims them.
TEST(SoftnicFabric, DeadProcessStateIsReclaimed) {
  const std::string name = "reap-" + std::to_string(getpid());
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Fabric* f = Fabric::Attach(name);
    if (!f) _exit(1);
    f->Lock();
    ShmMr& m = f->hdr()->mrs[5];
    m.in_use = 1;
    m.proc = f->self_proc();
    m.key = 5 << 8 | 1;
    uint64_t ring = f->Alloc(1 << 20);
    f->hdr()->cqs[3].in_use = 1;
    f->hdr()->cqs[3].proc = f->self_proc();
    f->hdr()->cqs[3].ring_off = ring;
    f->Unlock();
    char c = 'x';
    if (write(ready[1], &c, 1) != 1) _exit(2);
    pause();
  }
  char c;
  ASSERT_EQ(read(ready[0], &c, 1), 1);
  Fabric* f = Fabric::Attach(name);
  ASSERT_NE(f, nullptr);
  EXPECT_EQ(f->hdr()->mrs[5].in_use, 1u) << "the peer still runs: its MR stays";
  kill(child, SIGKILL);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  f->Lock();
  f->ReapDeadLocked();
  EXPECT_EQ(f->hdr()->mrs[5].in_use, 0u);
  EXPECT_EQ(f->hdr()->cqs[3].in_use, 0u);
  // The heap block came back: a 1 MiB allocation fits again at the start.
  uint64_t again = f->Alloc(1 << 20);
  EXPECT_NE(again, 0u);
  f->Free(again);
  f->Unlock();
  const std::string path = f->path();
  f->Detach();
  delete f;
  EXPECT_NE(access(path.c_str(), F_OK), 0) << "the last process to detach removes the fabric file";
}

}  // namespace
}  // namespace rdmasan::softnic
