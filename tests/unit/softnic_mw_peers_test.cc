// softnic memory windows across two processes (the rest of the window
// tests: softnic_mw_test.cc): a key invalidated in one process refuses the
// other's writes, naming who invalidated it.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "softnic/fabric.h"
#include "softnic/softnic.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

constexpr int kMwMrAccess =
    IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_MW_BIND;

// Two processes: the peer's SEND_WITH_INV invalidates the owner's key (the
// owner's receive says so, and it binds the window again with the next
// key); then the owner invalidates that one, and the peer's write is
// refused, naming the owner's pid and LOCAL_INV.
struct Peer {
  uint32_t qpn;
  uint64_t addr;
  uint32_t rkey;
};

bool ReadAll(int fd, void* p, size_t n) {
  auto* c = static_cast<uint8_t*>(p);
  while (n) {
    ssize_t r = read(fd, c, n);
    if (r <= 0) return false;
    c += r;
    n -= r;
  }
  return true;
}

TEST(SoftnicMwPeers, InvalidationInOneProcessRefusesTheOther) {
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    ibv_context* ctx = OpenSoftnic();
    if (!ctx) _exit(10);
    ibv_pd* pd = ibv_alloc_pd(ctx);
    std::vector<uint8_t> buf(8192);
    for (size_t i = 0; i < buf.size(); ++i) buf[i] = static_cast<uint8_t>(i);
    ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), kMwMrAccess);
    ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
    ibv_qp_init_attr a{};
    a.send_cq = a.recv_cq = cq;
    a.qp_type = IBV_QPT_RC;
    a.cap.max_send_wr = a.cap.max_recv_wr = 8;
    a.cap.max_send_sge = a.cap.max_recv_sge = 1;
    ibv_qp* qp = ibv_create_qp(pd, &a);
    ibv_mw* mw = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    if (!mr || !cq || !qp || !mw) _exit(11);
    Peer me{qp->qp_num, reinterpret_cast<uint64_t>(buf.data()), ibv_inc_rkey(mw->rkey)};
    if (write(to_parent[1], &me, sizeof(me)) != sizeof(me)) _exit(12);
    Peer peer;
    if (!ReadAll(to_child[0], &peer, sizeof(peer))) _exit(13);
    // Connect (the fixture's sequence).
    ibv_qp_attr at{};
    at.qp_state = IBV_QPS_INIT;
    at.port_num = 1;
    at.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
      _exit(14);
    at = {};
    at.qp_state = IBV_QPS_RTR;
    at.path_mtu = IBV_MTU_1024;
    at.dest_qp_num = peer.qpn;
    at.ah_attr.dlid = 1;
    at.ah_attr.port_num = 1;
    at.max_dest_rd_atomic = 1;
    at.min_rnr_timer = 1;
    if (ibv_modify_qp(qp, &at,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
      _exit(15);
    at = {};
    at.qp_state = IBV_QPS_RTS;
    at.timeout = 14;
    at.retry_cnt = 7;
    at.rnr_retry = 7;
    at.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &at,
                      IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                          IBV_QP_MAX_QP_RD_ATOMIC))
      _exit(16);
    ibv_wc wc;
    auto poll1 = [&](ibv_wc* out) {
      for (int i = 0; i < 2000000; ++i)
        if (ibv_poll_cq(cq, 1, out) == 1) return true;
      return false;
    };
    // Bind [0, 4096) with the published key, say so.
    ibv_send_wr wr{};
    wr.wr_id = 0xc1;
    wr.opcode = IBV_WR_BIND_MW;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.bind_mw.mw = mw;
    wr.bind_mw.rkey = me.rkey;
    wr.bind_mw.bind_info = {mr, me.addr, 4096, IBV_ACCESS_REMOTE_WRITE};
    ibv_send_wr* bad;
    if (ibv_post_send(qp, &wr, &bad) || !poll1(&wc) || wc.status != IBV_WC_SUCCESS) _exit(17);
    ibv_sge rs{me.addr + 4096, 64, mr->lkey};
    ibv_recv_wr rw{};
    rw.wr_id = 0xc3;
    rw.sg_list = &rs;
    rw.num_sge = 1;
    ibv_recv_wr* rbad;
    if (ibv_post_recv(qp, &rw, &rbad)) _exit(30);
    char c = 'b';
    if (write(to_parent[1], &c, 1) != 1) _exit(18);
    // The parent wrote and invalidated the key with its reply: the
    // receive says so, and the window, free again, takes the next key.
    if (!poll1(&wc) || wc.status != IBV_WC_SUCCESS || wc.wr_id != 0xc3) _exit(31);
    if (!(wc.wc_flags & IBV_WC_WITH_INV) || wc.invalidated_rkey != me.rkey) _exit(32);
    const uint32_t k2 = ibv_inc_rkey(me.rkey);
    wr.wr_id = 0xc4;
    wr.bind_mw.rkey = k2;
    if (ibv_post_send(qp, &wr, &bad) || !poll1(&wc) || wc.status != IBV_WC_SUCCESS) _exit(33);
    if (write(to_parent[1], &k2, sizeof(k2)) != sizeof(k2) || !ReadAll(to_child[0], &c, 1)) _exit(34);
    // The parent wrote through the new key; invalidate it (wr_id 0xc2)
    // and say so.
    wr = {};
    wr.wr_id = 0xc2;
    wr.opcode = IBV_WR_LOCAL_INV;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.invalidate_rkey = k2;
    if (ibv_post_send(qp, &wr, &bad) || !poll1(&wc) || wc.status != IBV_WC_SUCCESS) _exit(19);
    std::vector<uint8_t> snapshot = buf;
    if (write(to_parent[1], &c, 1) != 1 || !ReadAll(to_child[0], &c, 1)) _exit(20);
    // The parent's refused write left the memory as it was.
    _exit(snapshot == buf ? 0 : 21);
  }
  close(to_parent[1]);
  close(to_child[0]);
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  std::vector<uint8_t> buf(4096, 0x5a);
  ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ibv_cq* cq = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd, &a);
  ASSERT_TRUE(mr && cq && qp);
  Peer peer;
  ASSERT_TRUE(ReadAll(to_parent[0], &peer, sizeof(peer)));
  Peer me{qp->qp_num, 0, 0};
  ASSERT_EQ(write(to_child[1], &me, sizeof(me)), static_cast<ssize_t>(sizeof(me)));
  ibv_qp_attr at{};
  at.qp_state = IBV_QPS_INIT;
  at.port_num = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &at, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS), 0);
  at = {};
  at.qp_state = IBV_QPS_RTR;
  at.path_mtu = IBV_MTU_1024;
  at.dest_qp_num = peer.qpn;
  at.ah_attr.dlid = 1;
  at.ah_attr.port_num = 1;
  at.max_dest_rd_atomic = 1;
  at.min_rnr_timer = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &at,
                          IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                              IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER),
            0);
  at = {};
  at.qp_state = IBV_QPS_RTS;
  at.timeout = 14;
  at.retry_cnt = 7;
  at.rnr_retry = 7;
  at.max_rd_atomic = 1;
  ASSERT_EQ(ibv_modify_qp(qp, &at,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC),
            0);
  char c;
  ASSERT_TRUE(ReadAll(to_parent[0], &c, 1));  // bound
  auto write_once = [&](uint64_t id) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = id;
    wr.opcode = IBV_WR_RDMA_WRITE;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma = {peer.addr + 128, peer.rkey};
    ibv_send_wr* bad;
    EXPECT_EQ(ibv_post_send(qp, &wr, &bad), 0);
    ibv_wc wc{};
    for (int i = 0; i < 2000000 && ibv_poll_cq(cq, 1, &wc) == 0; ++i) {}
    return wc;
  };
  ibv_wc wc = write_once(1);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  // The reply invalidates the child's key.
  ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), 8, mr->lkey};
  ibv_send_wr inv{};
  inv.wr_id = 0xd1;
  inv.opcode = IBV_WR_SEND_WITH_INV;
  inv.send_flags = IBV_SEND_SIGNALED;
  inv.sg_list = &sge;
  inv.num_sge = 1;
  inv.invalidate_rkey = peer.rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp, &inv, &bad), 0);
  wc = {};
  for (int i = 0; i < 2000000 && ibv_poll_cq(cq, 1, &wc) == 0; ++i) {}
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.wr_id, 0xd1u);
  uint32_t k2 = 0;
  ASSERT_TRUE(ReadAll(to_parent[0], &k2, sizeof(k2)));  // bound again
  EXPECT_NE(k2, peer.rkey);
  peer.rkey = k2;
  wc = write_once(3);
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  ASSERT_EQ(write(to_child[1], "w", 1), 1);
  ASSERT_TRUE(ReadAll(to_parent[0], &c, 1));  // invalidated
  wc = write_once(2);
  EXPECT_EQ(wc.status, IBV_WC_REM_ACCESS_ERR);
  std::string why;
  EXPECT_TRUE(softnic::ExplainCompletion(cq, wc.qp_num, wc.wr_id, wc.status, &why));
  char expect[96];
  snprintf(expect, sizeof(expect), "invalidated by LOCAL_INV (pid %d, wr_id 0xc2)", child);
  EXPECT_NE(why.find(expect), std::string::npos) << why;
  ASSERT_EQ(write(to_child[1], "d", 1), 1);
  int status = -1;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

}  // namespace
}  // namespace rdmasan::testing
