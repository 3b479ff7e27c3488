// Multicast on softnic: ibv_attach_mcast / ibv_detach_mcast and the fan-out
// of a UD send to QPN 0xFFFFFF to every attached QP, in this process and in
// a forked one; detach and QP destruction stop delivery; the kernel's and
// rxe's errors.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <vector>

#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

constexpr uint32_t kQkey = 0x01234567;
constexpr uint32_t kMcastQpn = 0xffffff;
constexpr uint16_t kLid = 0xc017;
constexpr size_t kBuf = 1 << 14;
constexpr uint32_t kSlot = 4096;  // one receive buffer per slot: GRH + payload

ibv_gid Group(uint8_t last) {
  ibv_gid g{};
  g.raw[0] = 0xff;
  g.raw[1] = 0x12;
  g.raw[2] = 0x40;
  g.raw[3] = 0x01;
  g.raw[15] = last;
  return g;
}

// One end: a context, a PD, a buffer, and UD QPs each with its own send
// and receive CQs.
struct Node {
  ibv_context* ctx = nullptr;
  ibv_pd* pd = nullptr;
  ibv_mr* mr = nullptr;
  std::vector<uint8_t> buf;
  std::vector<ibv_cq*> cq;  // receive
  std::vector<ibv_cq*> scq;
  std::vector<ibv_qp*> qp;

  bool Make(int nqp) {
    ctx = OpenSoftnic();
    if (!ctx) return false;
    pd = ibv_alloc_pd(ctx);
    buf.assign(kBuf * nqp + kBuf, 0);
    mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
    if (!pd || !mr) return false;
    for (int i = 0; i < nqp; ++i) {
      ibv_cq* c = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
      ibv_cq* sc = ibv_create_cq(ctx, 16, nullptr, nullptr, 0);
      if (!c || !sc) return false;
      ibv_qp_init_attr a{};
      a.send_cq = sc;
      a.recv_cq = c;
      a.qp_type = IBV_QPT_UD;
      a.cap.max_send_wr = a.cap.max_recv_wr = 8;
      a.cap.max_send_sge = a.cap.max_recv_sge = 1;
      ibv_qp* q = ibv_create_qp(pd, &a);
      if (!q || ToRts(q)) return false;
      cq.push_back(c);
      scq.push_back(sc);
      qp.push_back(q);
    }
    return true;
  }

  static int ToRts(ibv_qp* q) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    if (int rc = ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
      return rc;
    a = {};
    a.qp_state = IBV_QPS_RTR;
    if (int rc = ibv_modify_qp(q, &a, IBV_QP_STATE)) return rc;
    a.qp_state = IBV_QPS_RTS;
    return ibv_modify_qp(q, &a, IBV_QP_STATE | IBV_QP_SQ_PSN);
  }

  uint8_t* Slot(int q) { return buf.data() + kBuf * (q + 1); }

  int PostRecv(int q) {
    ibv_sge sge{reinterpret_cast<uint64_t>(Slot(q)), kSlot, mr->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 100 + q;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    return ibv_post_recv(qp[q], &wr, &bad);
  }

  // Sends `len` bytes of `fill` from QP `q` to the group through `ah`.
  int Send(int q, ibv_ah* ah, uint32_t len, uint8_t fill) {
    std::memset(buf.data(), fill, len);
    ibv_sge sge{reinterpret_cast<uint64_t>(buf.data()), len, mr->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 7;
    wr.opcode = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = kMcastQpn;
    wr.wr.ud.remote_qkey = kQkey;
    ibv_send_wr* bad;
    if (int rc = ibv_post_send(qp[q], &wr, &bad)) return rc;
    ibv_wc wc;
    if (!Poll(scq[q], &wc, 3000)) return -1;
    return wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND ? 0 : -2;
  }

  bool Poll(int q, ibv_wc* wc, int timeout_ms) { return Poll(cq[q], wc, timeout_ms); }
  static bool Poll(ibv_cq* c, ibv_wc* wc, int timeout_ms) {
    auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    while (std::chrono::steady_clock::now() < deadline) {
      int n = ibv_poll_cq(c, 1, wc);
      if (n) return n == 1;
    }
    return false;
  }

  // Whether QP `q` received exactly `len` bytes of `fill` after a GRH whose
  // destination is `group`.
  bool Received(int q, uint32_t len, uint8_t fill, const ibv_gid& group, int timeout_ms = 3000) {
    ibv_wc wc;
    if (!Poll(q, &wc, timeout_ms)) return false;
    if (wc.status != IBV_WC_SUCCESS || wc.opcode != IBV_WC_RECV || wc.byte_len != len + 40 ||
        !(wc.wc_flags & IBV_WC_GRH) || wc.qp_num != qp[q]->qp_num)
      return false;
    const ibv_grh* grh = reinterpret_cast<const ibv_grh*>(Slot(q));
    if (std::memcmp(&grh->dgid, &group, sizeof(group)) != 0) return false;
    for (uint32_t i = 0; i < len; ++i)
      if (Slot(q)[40 + i] != fill) return false;
    return true;
  }

  ibv_ah* GroupAh(const ibv_gid& g, bool global) {
    ibv_ah_attr a{};
    a.dlid = kLid;
    a.port_num = 1;
    a.is_global = global;
    a.grh.dgid = g;
    a.grh.hop_limit = 1;
    return ibv_create_ah(pd, &a);
  }

  void Destroy() {
    for (size_t i = 0; i < qp.size(); ++i) {
      EXPECT_EQ(ibv_destroy_qp(qp[i]), 0);
      EXPECT_EQ(ibv_destroy_cq(cq[i]), 0);
      EXPECT_EQ(ibv_destroy_cq(scq[i]), 0);
    }
    EXPECT_EQ(ibv_dereg_mr(mr), 0);
    EXPECT_EQ(ibv_dealloc_pd(pd), 0);
    EXPECT_EQ(ibv_close_device(ctx), 0);
  }
};

TEST(SoftnicMcast, DeviceAdvertisesMulticast) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  EXPECT_GT(a.max_mcast_grp, 0);
  EXPECT_GT(a.max_mcast_qp_attach, 0);
  EXPECT_GE(a.max_total_mcast_qp_attach, a.max_mcast_qp_attach);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicMcast, AttachAndDetachErrors) {
  Node n;
  ASSERT_TRUE(n.Make(1));
  const ibv_gid g = Group(1);
  // Not a UD QP.
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = n.cq[0];
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = a.cap.max_recv_wr = 1;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  ibv_qp* rc = ibv_create_qp(n.pd, &a);
  ASSERT_NE(rc, nullptr);
  EXPECT_EQ(ibv_attach_mcast(rc, &g, kLid), EINVAL);
  EXPECT_EQ(ibv_detach_mcast(rc, &g, kLid), EINVAL);
  EXPECT_EQ(ibv_destroy_qp(rc), 0);
  // A unicast GID, a unicast LID, the permissive LID.
  ibv_gid unicast{};
  unicast.raw[0] = 0xfe;
  unicast.raw[1] = 0x80;
  EXPECT_EQ(ibv_attach_mcast(n.qp[0], &unicast, kLid), EINVAL);
  EXPECT_EQ(ibv_attach_mcast(n.qp[0], &g, 1), EINVAL);
  EXPECT_EQ(ibv_attach_mcast(n.qp[0], &g, 0xffff), EINVAL);
  // Detaching what is not attached: EINVAL, as rxe.
  EXPECT_EQ(ibv_detach_mcast(n.qp[0], &g, kLid), EINVAL);
  // Attaching twice is one attachment: one detach undoes it.
  EXPECT_EQ(ibv_attach_mcast(n.qp[0], &g, kLid), 0);
  EXPECT_EQ(ibv_attach_mcast(n.qp[0], &g, kLid), 0);
  EXPECT_EQ(ibv_detach_mcast(n.qp[0], &g, kLid), 0);
  EXPECT_EQ(ibv_detach_mcast(n.qp[0], &g, kLid), EINVAL);
  // An IPv4-mapped multicast GID (RoCE's form) is a group too.
  ibv_gid v4{};
  v4.raw[10] = v4.raw[11] = 0xff;
  v4.raw[12] = 230;
  v4.raw[15] = 1;
  EXPECT_EQ(ibv_attach_mcast(n.qp[0], &v4, kLid), 0);
  EXPECT_EQ(ibv_detach_mcast(n.qp[0], &v4, kLid), 0);
  n.Destroy();
}

TEST(SoftnicMcast, DeliveredToEveryAttachedQpInTwoProcesses) {
  const ibv_gid g = Group(2);
  int to_child[2], to_parent[2];
  ASSERT_EQ(pipe(to_child), 0);
  ASSERT_EQ(pipe(to_parent), 0);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // One member QP: receives the two sends (staged and copied), detaches,
    // then must receive nothing.
    Node c;
    if (!c.Make(1)) _exit(10);
    if (ibv_attach_mcast(c.qp[0], &g, kLid) || c.PostRecv(0)) _exit(11);
    char x = 'r';
    if (write(to_parent[1], &x, 1) != 1) _exit(12);
    if (!c.Received(0, 64, 0xa1, g)) _exit(13);
    if (c.PostRecv(0)) _exit(14);
    if (write(to_parent[1], &x, 1) != 1) _exit(15);
    if (!c.Received(0, 3000, 0xb2, g)) _exit(16);
    if (ibv_detach_mcast(c.qp[0], &g, kLid) || c.PostRecv(0)) _exit(17);
    if (write(to_parent[1], &x, 1) != 1) _exit(18);
    if (read(to_child[0], &x, 1) != 1) _exit(19);  // the parent sent again
    ibv_wc wc;
    if (c.Poll(0, &wc, 300)) _exit(20);
    _exit(0);
  }
  // Three QPs here: 0 sends and is attached, 1 is attached, 2 is not.
  Node n;
  ASSERT_TRUE(n.Make(3));
  ASSERT_EQ(ibv_attach_mcast(n.qp[0], &g, kLid), 0);
  ASSERT_EQ(ibv_attach_mcast(n.qp[1], &g, kLid), 0);
  for (int q = 0; q < 3; ++q) ASSERT_EQ(n.PostRecv(q), 0);
  ibv_ah* ah = n.GroupAh(g, true);
  ASSERT_NE(ah, nullptr);
  char x;
  ASSERT_EQ(read(to_parent[0], &x, 1), 1);

  // Small (staged in the completion) to the child, then large (copied).
  ASSERT_EQ(n.Send(0, ah, 64, 0xa1), 0);
  EXPECT_TRUE(n.Received(0, 64, 0xa1, g));  // the sender's own QP is a member
  EXPECT_TRUE(n.Received(1, 64, 0xa1, g));
  ibv_wc wc;
  EXPECT_FALSE(n.Poll(2, &wc, 100));  // not attached
  for (int q = 0; q < 2; ++q) ASSERT_EQ(n.PostRecv(q), 0);
  ASSERT_EQ(read(to_parent[0], &x, 1), 1);
  ASSERT_EQ(n.Send(0, ah, 3000, 0xb2), 0);
  EXPECT_TRUE(n.Received(0, 3000, 0xb2, g));
  EXPECT_TRUE(n.Received(1, 3000, 0xb2, g));

  // The child detached: this one reaches QP 1 only (QP 0 detached too).
  ASSERT_EQ(read(to_parent[0], &x, 1), 1);
  ASSERT_EQ(ibv_detach_mcast(n.qp[0], &g, kLid), 0);
  for (int q = 0; q < 2; ++q) ASSERT_EQ(n.PostRecv(q), 0);
  ASSERT_EQ(n.Send(0, ah, 16, 0xc3), 0);
  EXPECT_TRUE(n.Received(1, 16, 0xc3, g));
  EXPECT_FALSE(n.Poll(0, &wc, 100));
  ASSERT_EQ(write(to_child[1], &x, 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
  n.Destroy();
}

TEST(SoftnicMcast, LidOnlyAhOtherGroupsAndDestroyedQps) {
  const ibv_gid g = Group(3), other = Group(4);
  Node n;
  ASSERT_TRUE(n.Make(3));
  ASSERT_EQ(ibv_attach_mcast(n.qp[1], &g, kLid), 0);
  ASSERT_EQ(ibv_attach_mcast(n.qp[2], &other, kLid + 1), 0);
  for (int q = 1; q < 3; ++q) ASSERT_EQ(n.PostRecv(q), 0);
  ibv_wc wc;
  // An AH without a GRH names the group by its LID: no GRH arrives.
  ibv_ah* by_lid = n.GroupAh(g, false);
  ASSERT_NE(by_lid, nullptr);
  ASSERT_EQ(n.Send(0, by_lid, 8, 0xd4), 0);
  ASSERT_TRUE(n.Poll(1, &wc, 3000));
  EXPECT_EQ(wc.status, IBV_WC_SUCCESS);
  EXPECT_EQ(wc.byte_len, 8u + 40);
  EXPECT_FALSE(wc.wc_flags & IBV_WC_GRH);
  EXPECT_FALSE(n.Poll(2, &wc, 100));  // another group
  // A unicast AH with QPN 0xFFFFFF reaches nobody, and completes.
  ibv_ah_attr ua{};
  ua.dlid = 1;
  ua.port_num = 1;
  ibv_ah* unicast = ibv_create_ah(n.pd, &ua);
  ASSERT_NE(unicast, nullptr);
  ASSERT_EQ(n.PostRecv(1), 0);
  ASSERT_EQ(n.Send(0, unicast, 8, 0xe5), 0);
  EXPECT_FALSE(n.Poll(1, &wc, 100));
  EXPECT_FALSE(n.Poll(2, &wc, 100));
  // A destroyed QP's attachments go with it: a new QP (likely in the same
  // slot) is no member, and the group takes a fresh attachment.
  ASSERT_EQ(ibv_destroy_qp(n.qp[2]), 0);
  ibv_qp_init_attr a{};
  a.send_cq = n.scq[2];
  a.recv_cq = n.cq[2];
  a.qp_type = IBV_QPT_UD;
  a.cap.max_send_wr = a.cap.max_recv_wr = 8;
  a.cap.max_send_sge = a.cap.max_recv_sge = 1;
  n.qp[2] = ibv_create_qp(n.pd, &a);
  ASSERT_NE(n.qp[2], nullptr);
  ASSERT_EQ(Node::ToRts(n.qp[2]), 0);
  ASSERT_EQ(n.PostRecv(2), 0);
  ibv_ah* to_other = n.GroupAh(other, true);
  ASSERT_EQ(n.Send(0, to_other, 8, 0xf6), 0);
  EXPECT_FALSE(n.Poll(2, &wc, 100));
  EXPECT_EQ(ibv_detach_mcast(n.qp[2], &other, kLid + 1), EINVAL);
  ASSERT_EQ(ibv_attach_mcast(n.qp[2], &other, kLid + 1), 0);
  ASSERT_EQ(n.Send(0, to_other, 8, 0xf6), 0);
  EXPECT_TRUE(n.Received(2, 8, 0xf6, other));
  for (ibv_ah* ah : {by_lid, unicast, to_other}) EXPECT_EQ(ibv_destroy_ah(ah), 0);
  n.Destroy();
}

}  // namespace
}  // namespace rdmasan::testing
