// softnic behaves like a NIC: one test per behaviour of the softnic issue's
// item 4, driven through the shim's verbs in one process (inproc fabric).
#include <endian.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>

#include <atomic>
#include <cstring>
#include <thread>

#include "core/report.h"
#include "interpose/hooks.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

TEST(SoftnicDevice, ListedAndActive) {
  int n = 0;
  ibv_device** list = ibv_get_device_list(&n);
  ASSERT_NE(list, nullptr);
  ASSERT_GE(n, 1);
  EXPECT_STREQ(ibv_get_device_name(list[0]), "softnic0");
  EXPECT_NE(ibv_get_device_guid(list[0]), 0u);
  ibv_context* ctx = ibv_open_device(list[0]);
  ibv_free_device_list(list);
  ASSERT_NE(ctx, nullptr);
  ibv_port_attr pa;
  ASSERT_EQ(ibv_query_port(ctx, 1, &pa), 0);
  EXPECT_EQ(pa.state, IBV_PORT_ACTIVE);
  EXPECT_EQ(pa.link_layer, IBV_LINK_LAYER_INFINIBAND);
  EXPECT_NE(pa.lid, 0);
  EXPECT_EQ(ibv_query_port(ctx, 2, &pa), EINVAL);
  ibv_device_attr da;
  ASSERT_EQ(ibv_query_device(ctx, &da), 0);
  EXPECT_EQ(da.phys_port_cnt, 1);
  EXPECT_GE(da.max_qp_rd_atom, 1);
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(be64toh(gid.global.subnet_prefix), 0xfe80000000000000ull);
  __be16 pkey;
  ASSERT_EQ(ibv_query_pkey(ctx, 1, 0, &pkey), 0);
  EXPECT_EQ(be16toh(pkey), 0xffff);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// An InfiniBand port's GID table: the default GID at index 0, the rest
// empty (rdma-core's tests query an empty index for ENODATA).
TEST(SoftnicDevice, GidTableHoldsTheDefaultGid) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_port_attr port{};
  ASSERT_EQ(ibv_query_port(ctx, 1, &port), 0);
  ASSERT_GT(port.gid_tbl_len, 1);
  ibv_gid_entry entries[8]{};
  ASSERT_EQ(ibv_query_gid_table(ctx, entries, 8, 0), 1);
  EXPECT_EQ(entries[0].gid_index, 0u);
  EXPECT_EQ(be64toh(entries[0].gid.global.subnet_prefix), 0xfe80000000000000ull);
  ibv_gid_entry one{};
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 0, &one, 0), 0);
  EXPECT_EQ(std::memcmp(&one.gid, &entries[0].gid, sizeof(ibv_gid)), 0);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, 1, &one, 0), ENODATA);
  EXPECT_EQ(ibv_query_gid_ex(ctx, 1, port.gid_tbl_len, &one, 0), EINVAL);
  ibv_gid empty;
  std::memset(&empty, 0xff, sizeof(empty));
  ASSERT_EQ(ibv_query_gid(ctx, 1, 1, &empty), 0);
  EXPECT_EQ(empty.global.interface_id, 0u);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicDevice, UnsupportedFailsCleanly) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  // XRC domains work now (softnic_xrc_test.cc); an unknown comp_mask bit
  // still fails cleanly.
  ibv_xrcd_init_attr xa{};
  xa.comp_mask = IBV_XRCD_INIT_ATTR_RESERVED;
  errno = 0;
  EXPECT_EQ(ibv_open_xrcd(ctx, &xa), nullptr);
  EXPECT_EQ(errno, EOPNOTSUPP);
  // Device memory is supported (softnic_dm_test.cc); an unknown comp_mask is not.
  ibv_alloc_dm_attr dma{};
  dma.length = 64;
  dma.comp_mask = 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_dm(ctx, &dma), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST_F(SoftnicPair, SendWithImmediate) {
  std::memcpy(buf_[0].data(), "hello softnic", 14);
  ASSERT_EQ(PostRecv(1, 7, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND_WITH_IMM, 3, 0, 14), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_SEND);
  EXPECT_EQ(s[0].wr_id, 3u);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV);
  EXPECT_EQ(r[0].wr_id, 7u);
  EXPECT_EQ(r[0].byte_len, 14u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_WITH_IMM);
  EXPECT_EQ(be32toh(r[0].imm_data), 0xabcd0003u);
  EXPECT_EQ(r[0].qp_num, qp_[1]->qp_num);
  EXPECT_EQ(r[0].src_qp, qp_[0]->qp_num);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "hello softnic");
}

TEST_F(SoftnicPair, RdmaWriteReadAndWriteWithImm) {
  for (int i = 0; i < 256; ++i) buf_[0][i] = static_cast<uint8_t>(i);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 256, IBV_SEND_SIGNALED, 1024), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_WRITE);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 1024, buf_[0].data(), 256), 0);
  EXPECT_TRUE(Poll(1, 1, 50).empty()) << "a plain RDMA WRITE consumes no receive";

  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 2, 4096, 256, IBV_SEND_SIGNALED, 1024), 0);
  s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_RDMA_READ);
  EXPECT_EQ(s[0].byte_len, 256u);
  EXPECT_EQ(std::memcmp(buf_[0].data() + 4096, buf_[0].data(), 256), 0);

  ASSERT_EQ(PostRecv(1, 9, 0, 0), 0);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE_WITH_IMM, 4, 0, 16, IBV_SEND_SIGNALED, 8192), 0);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].opcode, IBV_WC_RECV_RDMA_WITH_IMM);
  EXPECT_EQ(r[0].byte_len, 16u);
  EXPECT_EQ(be32toh(r[0].imm_data), 0xabcd0004u);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 8192, buf_[0].data(), 16), 0);
}

TEST_F(SoftnicPair, AtomicsReturnTheOriginalValue) {
  uint64_t v = 40;
  std::memcpy(buf_[1].data() + 64, &v, 8);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 8, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(buf_[1].data() + 64);
  wr.wr.atomic.rkey = mr_[1]->rkey;
  wr.wr.atomic.compare_add = 2;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(s[0].opcode, IBV_WC_FETCH_ADD);
  uint64_t got;
  std::memcpy(&got, buf_[0].data(), 8);
  EXPECT_EQ(got, 40u);
  std::memcpy(&got, buf_[1].data() + 64, 8);
  EXPECT_EQ(got, 42u);

  wr.opcode = IBV_WR_ATOMIC_CMP_AND_SWP;
  wr.wr.atomic.compare_add = 42;
  wr.wr.atomic.swap = 7;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].opcode, IBV_WC_COMP_SWAP);
  std::memcpy(&got, buf_[0].data(), 8);
  EXPECT_EQ(got, 42u);
  std::memcpy(&got, buf_[1].data() + 64, 8);
  EXPECT_EQ(got, 7u);
}

TEST_F(SoftnicPair, InlineAndMultiSge) {
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  char msg[] = "inline!";
  ibv_sge sge{reinterpret_cast<uint64_t>(msg), sizeof(msg), 0 /* lkey unused */};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  std::memset(msg, 0, sizeof(msg));  // inline data was copied at post
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "inline!");

  // Gather 3 SGEs, scatter into 2.
  std::memcpy(buf_[0].data() + 100, "AAA", 3);
  std::memcpy(buf_[0].data() + 200, "BBBB", 4);
  std::memcpy(buf_[0].data() + 300, "CC", 2);
  ibv_sge g[3] = {{reinterpret_cast<uint64_t>(buf_[0].data() + 100), 3, mr_[0]->lkey},
                  {reinterpret_cast<uint64_t>(buf_[0].data() + 200), 4, mr_[0]->lkey},
                  {reinterpret_cast<uint64_t>(buf_[0].data() + 300), 2, mr_[0]->lkey}};
  ibv_sge sc[2] = {{reinterpret_cast<uint64_t>(buf_[1].data() + 1000), 5, mr_[1]->lkey},
                   {reinterpret_cast<uint64_t>(buf_[1].data() + 2000), 10, mr_[1]->lkey}};
  ibv_recv_wr rwr{};
  rwr.sg_list = sc;
  rwr.num_sge = 2;
  ibv_recv_wr* rbad;
  ASSERT_EQ(ibv_post_recv(qp_[1], &rwr, &rbad), 0);
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = g;
  wr.num_sge = 3;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].byte_len, 9u);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 1000, "AAABB", 5), 0);
  EXPECT_EQ(std::memcmp(buf_[1].data() + 2000, "BBCC", 4), 0);
}

TEST_F(SoftnicPair, OverPostingReturnsEnomemWithBadWr) {
  // max_send_wr = 16: 16 posts fit, the 17th does not until a completion is
  // polled.  Unsignaled WRs stay in the SQ until a later signaled one retires
  // them.
  for (int i = 0; i < 15; ++i) ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, i, 0, 8, 0), 0) << i;
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 15, 0, 8, IBV_SEND_SIGNALED), 0);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(Post(0, IBV_WR_RDMA_WRITE, 16, 0, 8, IBV_SEND_SIGNALED, 0, 0, 0, &bad), ENOMEM);
  EXPECT_NE(bad, nullptr);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].wr_id, 15u);
  // The signaled completion retired all 16 slots.
  for (int i = 0; i < 16; ++i)
    ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 100 + i, 0, 8, IBV_SEND_SIGNALED), 0) << i;
  EXPECT_EQ(Poll(0, 16).size(), 16u);

  // Receive side: 16 fit, the 17th is ENOMEM with bad_wr.
  for (int i = 0; i < 16; ++i) ASSERT_EQ(PostRecv(1, i, 0, 8), 0);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[1].data()), 8, mr_[1]->lkey};
  ibv_recv_wr wr{};
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp_[1], &wr, &rbad), ENOMEM);
  EXPECT_EQ(rbad, &wr);
}

TEST_F(SoftnicPair, NullScatterListIsInvalidNotACrash) {
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.num_sge = 2;  // and no sg_list
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(ibv_post_send(qp_[0], &wr, &bad), EINVAL);
  EXPECT_EQ(bad, &wr);
  ibv_recv_wr rwr{};
  rwr.num_sge = 1;
  ibv_recv_wr* rbad = nullptr;
  EXPECT_EQ(ibv_post_recv(qp_[1], &rwr, &rbad), EINVAL);
  EXPECT_EQ(rbad, &rwr);
}

TEST_F(SoftnicPair, PostingOutsideRtsFails) {
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), 0);
  ibv_send_wr* bad = nullptr;
  EXPECT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8, IBV_SEND_SIGNALED, 0, 0, 0, &bad), EINVAL);
  EXPECT_NE(bad, nullptr);
  EXPECT_EQ(PostRecv(0, 1, 0, 8), EINVAL);
  // A transition that lacks required attributes is refused.
  a.qp_state = IBV_QPS_INIT;
  EXPECT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), EINVAL);
}

TEST_F(SoftnicPair, BadLkeyIsLocalProtectionErrorThenFlush) {
  ASSERT_EQ(PostRecv(0, 50, 0, 8), 0);  // to be flushed
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8, IBV_SEND_SIGNALED, 0, 0xdead00), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 2, 0, 8, 0), 0);  // unsignaled, still flushed
  auto c = Poll(0, 3);
  ASSERT_EQ(c.size(), 3u);
  EXPECT_EQ(c[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(c[0].wr_id, 1u);
  // Then the flushes, RQ and SQ.
  int flushed = 0;
  for (int i = 1; i < 3; ++i) {
    EXPECT_EQ(c[i].status, IBV_WC_WR_FLUSH_ERR);
    flushed += c[i].wr_id == 2 || c[i].wr_id == 50;
  }
  EXPECT_EQ(flushed, 2);
  EXPECT_EQ(State(0), IBV_QPS_ERR);
  // Posting in ERR is accepted and flushed at once.
  ASSERT_EQ(Post(0, IBV_WR_SEND, 3, 0, 8, 0), 0);
  c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_WR_FLUSH_ERR);
}

TEST_F(SoftnicPair, OutOfBoundsSgeIsLocalProtectionError) {
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, kBuf - 4, 8), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_LOC_PROT_ERR);
}

TEST_F(SoftnicPair, PdMismatchIsLocalProtectionError) {
  ibv_pd* other = ibv_alloc_pd(ctx_);
  std::vector<uint8_t> mem(64);
  ibv_mr* mr = ibv_reg_mr(other, mem.data(), mem.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(mem.data()), 8, mr->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(buf_[1].data());
  wr.wr.rdma.rkey = mr_[1]->rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(ibv_dealloc_pd(other), EBUSY) << "a PD with a live MR cannot go";
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_dealloc_pd(other), 0);
}

TEST_F(SoftnicPair, BadRkeyIsRemoteAccessError) {
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 8, IBV_SEND_SIGNALED, 0, 0, mr_[1]->rkey ^ 0x100), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(State(0), IBV_QPS_ERR);
  EXPECT_EQ(State(1), IBV_QPS_ERR) << "RC responder goes to ERR on an rkey violation";
}

TEST_F(SoftnicPair, RemoteOutOfBoundsIsRemoteAccessError) {
  ASSERT_EQ(Post(0, IBV_WR_RDMA_READ, 1, 0, 64, IBV_SEND_SIGNALED, kBuf - 8), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SoftnicPair, MissingAccessRights) {
  // Remote MR without REMOTE_WRITE: the write is refused.
  std::vector<uint8_t> mem(64);
  ibv_mr* ro = ibv_reg_mr(pd_, mem.data(), mem.size(), IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(ro, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 8, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(mem.data());
  wr.wr.rdma.rkey = ro->rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(ro), 0);
  // Remote write without local write is refused at registration.
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, mem.data(), mem.size(), IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
}

// On-demand paging: an ODP MR is registered over pages that need not be
// accessible yet, and each access finds them as they are at that moment.
TEST_F(SoftnicPair, OdpMrFindsItsPagesAtEachAccess) {
  const size_t len = 2 * 4096;
  void* p = mmap(nullptr, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(p, MAP_FAILED);
  const int access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, p, len, access), nullptr) << "pinned registration of inaccessible pages";
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* odp = ibv_reg_mr(pd_, p, len, access | IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(odp, nullptr);
  ASSERT_EQ(mprotect(p, len, PROT_READ | PROT_WRITE), 0);
  std::memset(buf_[0].data(), 0x5a, 64);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 64, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(p) + 4096;
  wr.wr.rdma.rkey = odp->rkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(static_cast<uint8_t*>(p)[4096 + 63], 0x5a);
  // A page that cannot be faulted in is the remote access error a NIC's
  // failed page fault gives; nothing is written.
  ASSERT_EQ(mprotect(p, len, PROT_NONE), 0);
  wr.wr_id = 2;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_ACCESS_ERR);
  EXPECT_EQ(ibv_dereg_mr(odp), 0);
  EXPECT_EQ(munmap(p, len), 0);
}

TEST_F(SoftnicPair, ImplicitOdpCoversTheAddressSpace) {
  ibv_device_attr_ex dx{};
  ASSERT_EQ(ibv_query_device_ex(ctx_, nullptr, &dx), 0);
  EXPECT_TRUE(dx.odp_caps.general_caps & IBV_ODP_SUPPORT);
  EXPECT_TRUE(dx.odp_caps.general_caps & IBV_ODP_SUPPORT_IMPLICIT);
  EXPECT_TRUE(dx.odp_caps.per_transport_caps.rc_odp_caps & IBV_ODP_SUPPORT_WRITE);
  const int access =
      IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_ON_DEMAND;
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, nullptr, SIZE_MAX, access & ~IBV_ACCESS_ON_DEMAND), nullptr);
  EXPECT_EQ(errno, EINVAL) << "only ODP registers the whole address space";
  ibv_mr* all = ibv_reg_mr(pd_, nullptr, SIZE_MAX, access);
  ASSERT_NE(all, nullptr);
  std::memset(buf_[0].data(), 0x6b, 128);
  std::memset(buf_[1].data(), 0, 128);
  // Both the local SGE and the remote address are named by the one MR.
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 128, IBV_SEND_SIGNALED, 0, all->lkey, all->rkey), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(buf_[1][127], 0x6b);
  EXPECT_EQ(ibv_dereg_mr(all), 0);
}

TEST_F(SoftnicPair, AdviseMrTakesOdpKeysOnly) {
  ibv_mr* odp = ibv_reg_mr(pd_, buf_[0].data(), 4096, IBV_ACCESS_ON_DEMAND);
  ASSERT_NE(odp, nullptr);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 4096, odp->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, IBV_ADVISE_MR_FLAG_FLUSH, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT, 0, &sge, 1), 0);
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE, 0, &sge, 1), EPERM)
      << "prefetch for write of an MR without LOCAL_WRITE";
  sge.length = 4097;
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL) << "past the MR";
  sge = {reinterpret_cast<uint64_t>(buf_[0].data()), 64, mr_[0]->lkey};
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 1), EINVAL) << "a pinned MR";
  EXPECT_EQ(ibv_advise_mr(pd_, IBV_ADVISE_MR_ADVICE_PREFETCH, 0, &sge, 0), EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, buf_[0].data(), 4096, IBV_ACCESS_HUGETLB), nullptr);
  EXPECT_EQ(errno, EINVAL) << "HUGETLB describes ODP pages only";
  EXPECT_EQ(ibv_dereg_mr(odp), 0);
}

// A destroyed QP takes its completions not yet polled with it, as a
// provider's destroy_qp cleans them from its CQs (mlx5_destroy_qp): a ULP
// that frees a destroyed QP's receive buffers never polls their flushes.
TEST_F(SoftnicPair, DestroyQpCleansItsCompletions) {
  ASSERT_EQ(Post(1, IBV_WR_RDMA_WRITE, 0x30, 0, 8), 0);  // side 1's own send completion
  ASSERT_EQ(PostRecv(1, 0x31, 0, 64), 0);
  ASSERT_EQ(PostRecv(1, 0x32, 64, 64), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_ERR;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);  // flushes both receives
  ASSERT_EQ(ibv_destroy_qp(qp_[1]), 0);
  qp_[1] = nullptr;
  EXPECT_TRUE(Poll(1, 1, 50).empty()) << "a flush of the destroyed QP was delivered";
}

// ibv_resize_cq: the unpolled completions move to the new ring in order;
// a size below them is EINVAL, as on rxe and mlx5.
TEST_F(SoftnicPair, ResizeCqKeepsUnpolledCompletions) {
  for (uint64_t id = 1; id <= 3; ++id) ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, id, 0, 8), 0);
  EXPECT_EQ(ibv_resize_cq(cq_[0], 2), EINVAL) << "three completions wait to be polled";
  EXPECT_EQ(ibv_resize_cq(cq_[0], 0), EINVAL);
  EXPECT_EQ(ibv_resize_cq(cq_[0], 5), 0);
  EXPECT_GE(cq_[0]->cqe, 5);
  auto c = Poll(0, 3);
  ASSERT_EQ(c.size(), 3u);
  for (uint64_t i = 0; i < 3; ++i) {
    EXPECT_EQ(c[i].wr_id, i + 1);
    EXPECT_EQ(c[i].status, IBV_WC_SUCCESS);
  }
  EXPECT_EQ(ibv_resize_cq(cq_[0], 1), 0);
  EXPECT_GE(cq_[0]->cqe, 1);
  EXPECT_EQ(ibv_resize_cq(cq_[0], 15), 0);
  for (uint64_t id = 10; id < 25; ++id) ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, id, 0, 8), 0);
  c = Poll(0, 15);
  ASSERT_EQ(c.size(), 15u);
  EXPECT_EQ(c.front().wr_id, 10u);
  EXPECT_EQ(c.back().wr_id, 24u);
  // No CQ_ERR: fifteen fit in a CQ of fifteen.
  ibv_async_event ev;
  const int flags = fcntl(ctx_->async_fd, F_GETFL);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags | O_NONBLOCK), 0);
  EXPECT_NE(ibv_get_async_event(ctx_, &ev), 0);
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, flags), 0);
}

TEST_F(SoftnicPair, ReadIntoMrWithoutLocalWrite) {
  std::vector<uint8_t> mem(64);
  ibv_mr* ro = ibv_reg_mr(pd_, mem.data(), mem.size(), 0);
  ASSERT_NE(ro, nullptr);
  auto post_read = [&] {
    ibv_sge sge{reinterpret_cast<uint64_t>(mem.data()), 8, ro->lkey};
    ibv_send_wr wr{};
    wr.opcode = IBV_WR_RDMA_READ;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(buf_[1].data());
    wr.wr.rdma.rkey = mr_[1]->rkey;
    ibv_send_wr* bad;
    return ibv_post_send(qp_[0], &wr, &bad);
  };
  ASSERT_EQ(post_read(), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(ibv_dereg_mr(ro), 0);
}

TEST_F(SoftnicPair, ReceiveTooSmallIsLengthError) {
  ASSERT_EQ(PostRecv(1, 5, 0, 4), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 64), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_INV_REQ_ERR);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_LOC_LEN_ERR);
  EXPECT_EQ(r[0].wr_id, 5u);
  EXPECT_EQ(State(1), IBV_QPS_ERR);
}

TEST_F(SoftnicPair, ResponderBufferWithBadKeyIsRemoteOperationError) {
  // The responder posted a receive whose lkey names no MR: it completes with
  // LOC_PROT_ERR there, the requester's SEND with REM_OP_ERR, both in ERR.
  ASSERT_EQ(PostRecv(1, 6, 0, 64, mr_[1]->lkey ^ 0x100), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 16), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_OP_ERR);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(r[0].wr_id, 6u);
  EXPECT_EQ(State(0), IBV_QPS_ERR);
  EXPECT_EQ(State(1), IBV_QPS_ERR);
}

TEST_F(SoftnicPair, MisalignedAtomicIsInvalidRequest) {
  ASSERT_EQ(Post(0, IBV_WR_ATOMIC_FETCH_AND_ADD, 1, 0, 8, IBV_SEND_SIGNALED, 4), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_REM_INV_REQ_ERR);
}

class SoftnicRnr : public SoftnicPair {
 protected:
  void SetUp() override {}
};

TEST_F(SoftnicRnr, NoRetryGivesRnrRetryExceeded) {
  QpOptions o;
  o.rnr_retry = 0;
  SetUpWith(o);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
}

TEST_F(SoftnicRnr, LimitedRetriesRunOutOnTheTimer) {
  QpOptions o;
  o.rnr_retry = 3;
  o.min_rnr_timer = 14;  // 1.28 ms: the error comes after ~4 ms, not before
  SetUpWith(o);
  auto t0 = std::chrono::steady_clock::now();
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_RNR_RETRY_EXC_ERR);
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3));
}

TEST_F(SoftnicRnr, InfiniteRetryDeliversOnceAReceiveIsPosted) {
  QpOptions o;
  o.rnr_retry = 7;
  SetUpWith(o);
  std::memcpy(buf_[0].data(), "late", 5);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 5), 0);
  EXPECT_TRUE(Poll(0, 1, 50).empty()) << "no receive yet: the send waits";
  ASSERT_EQ(PostRecv(1, 2, 0, 64), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "late");
}

TEST_F(SoftnicRnr, CqOverrunRaisesCqErr) {
  QpOptions o;
  o.cqe = 2;
  SetUpWith(o);
  for (int i = 0; i < 3; ++i) ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, i, 0, 8), 0);
  pollfd pfd{ctx_->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 2000), 1);
  ibv_async_event ev;
  ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_CQ_ERR);
  EXPECT_EQ(ev.element.cq, cq_[0]);
  ibv_ack_async_event(&ev);
}

TEST_F(SoftnicRnr, UdReservesGrh) {
  QpOptions o;
  o.type = IBV_QPT_UD;
  SetUpWith(o);
  ibv_ah_attr aa{};
  aa.dlid = 1;
  aa.port_num = 1;
  aa.is_global = 1;
  ASSERT_EQ(ibv_query_gid(ctx_, 1, 0, &aa.grh.dgid), 0);
  aa.grh.hop_limit = 1;
  ibv_ah* ah = ibv_create_ah(pd_, &aa);
  ASSERT_NE(ah, nullptr);
  ASSERT_EQ(PostRecv(1, 1, 0, 40 + 32), 0);
  std::memcpy(buf_[0].data(), "datagram", 9);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 9, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.ud.ah = ah;
  wr.wr.ud.remote_qpn = qp_[1]->qp_num;
  wr.wr.ud.remote_qkey = kQkey;
  ibv_send_wr* bad;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 40u + 9u);
  EXPECT_TRUE(r[0].wc_flags & IBV_WC_GRH);
  EXPECT_EQ(r[0].src_qp, qp_[0]->qp_num);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 40), "datagram");
  // A wrong qkey is dropped silently, like on the wire.
  ASSERT_EQ(PostRecv(1, 2, 0, 72), 0);
  wr.wr.ud.remote_qkey = kQkey + 1;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  EXPECT_EQ(Poll(0, 2).size(), 2u);  // both sends complete
  EXPECT_TRUE(Poll(1, 1, 50).empty());
  EXPECT_EQ(ibv_destroy_ah(ah), 0);
}

TEST_F(SoftnicPair, CompletionChannelWakesPoll) {
  ASSERT_EQ(ibv_req_notify_cq(cq_[1], 0), 0);
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);
  pollfd pfd{channel_->fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 2000), 1);
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  ASSERT_EQ(ibv_get_cq_event(channel_, &cq, &cq_ctx), 0);
  EXPECT_EQ(cq, cq_[1]);
  EXPECT_EQ(cq_ctx, this);
  ibv_ack_cq_events(cq, 1);
  EXPECT_EQ(Poll(1, 1).size(), 1u);
  // Not re-armed: no second event.
  ASSERT_EQ(PostRecv(1, 2, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 2, 0, 8), 0);
  EXPECT_EQ(poll(&pfd, 1, 50), 0);
}

TEST_F(SoftnicPair, ExtendedCqAndQpApis) {
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.wc_flags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_QP_NUM;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx_, &ca);
  ASSERT_NE(cqx, nullptr);
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = qa.recv_cq = ibv_cq_ex_to_cq(cqx);
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.cap.max_inline_data = 16;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.pd = pd_;
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_RDMA_WRITE;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(qp, nullptr);
  ASSERT_EQ(Connect(qp, qp_[1]->qp_num), 0);
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(qp_[1], qp->qp_num), 0);
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  ibv_qp_ex* x = ibv_qp_to_qp_ex(qp);
  ASSERT_NE(x, nullptr);
  std::memcpy(buf_[0].data(), "wr api", 7);
  ibv_wr_start(x);
  x->wr_id = 77;
  x->wr_flags = IBV_SEND_SIGNALED;
  ibv_wr_send(x);
  ibv_wr_set_sge(x, mr_[0]->lkey, reinterpret_cast<uint64_t>(buf_[0].data()), 7);
  x->wr_id = 78;
  ibv_wr_rdma_write(x, mr_[1]->rkey, reinterpret_cast<uint64_t>(buf_[1].data() + 512));
  ibv_wr_set_inline_data(x, const_cast<char*>("inl"), 4);
  ASSERT_EQ(ibv_wr_complete(x), 0);
  ibv_poll_cq_attr pa{};
  ASSERT_EQ(ibv_start_poll(cqx, &pa), 0);
  EXPECT_EQ(cqx->wr_id, 77u);
  EXPECT_EQ(cqx->status, IBV_WC_SUCCESS);
  EXPECT_EQ(ibv_wc_read_opcode(cqx), IBV_WC_SEND);
  EXPECT_EQ(ibv_wc_read_qp_num(cqx), qp->qp_num);
  ASSERT_EQ(ibv_next_poll(cqx), 0);
  EXPECT_EQ(cqx->wr_id, 78u);
  EXPECT_EQ(ibv_next_poll(cqx), ENOENT);
  ibv_end_poll(cqx);
  EXPECT_EQ(ibv_start_poll(cqx, &pa), ENOENT);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "wr api");
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data() + 512), "inl");
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_cq(ibv_cq_ex_to_cq(cqx)), 0);
}

TEST_F(SoftnicPair, SharedReceiveQueueAndLimitEvent) {
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  sa.attr.srq_limit = 2;
  ibv_srq* srq = ibv_create_srq(pd_, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr a{};
  a.send_cq = a.recv_cq = cq_[1];
  a.srq = srq;
  a.qp_type = IBV_QPT_RC;
  a.cap.max_send_wr = 4;
  a.cap.max_send_sge = 1;
  ibv_qp* qp = ibv_create_qp(pd_, &a);
  ASSERT_NE(qp, nullptr);
  ibv_qp_attr r{};
  r.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &r, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(qp_[0], qp->qp_num), 0);
  ASSERT_EQ(Connect(qp, qp_[0]->qp_num), 0);
  for (int i = 0; i < 3; ++i) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[1].data() + 64 * i), 64, mr_[1]->lkey};
    ibv_recv_wr wr{};
    wr.wr_id = 10 + i;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad;
    ASSERT_EQ(ibv_post_srq_recv(srq, &wr, &bad), 0);
  }
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);  // 2 left: not below the limit
  ASSERT_EQ(Post(0, IBV_WR_SEND, 2, 0, 8), 0);  // 1 left: limit event
  auto c = Poll(1, 2);
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].wr_id, 10u);
  EXPECT_EQ(c[1].wr_id, 11u);
  pollfd pfd{ctx_->async_fd, POLLIN, 0};
  ASSERT_EQ(poll(&pfd, 1, 2000), 1);
  ibv_async_event ev;
  ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_SRQ_LIMIT_REACHED);
  EXPECT_EQ(ev.element.srq, srq);
  ibv_ack_async_event(&ev);
  EXPECT_EQ(ibv_destroy_srq(srq), EBUSY) << "a QP still uses it";
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
}

}  // namespace
}  // namespace rdmasan::testing

namespace rdmasan::testing {
namespace {

// Threads posting and polling on their own QPs of one context at once: no
// lost or duplicated completions, and (under TSan) no data race.
void RunThreads(int kThreads, int kIters) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_pd* pd = ibv_alloc_pd(ctx);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      std::vector<uint8_t> buf(4096);
      ibv_mr* mr = ibv_reg_mr(pd, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
      ibv_cq* cq = ibv_create_cq(ctx, 64, nullptr, nullptr, 0);
      ibv_qp* qp[2];
      for (auto& q : qp) {
        ibv_qp_init_attr a{};
        a.send_cq = a.recv_cq = cq;
        a.qp_type = IBV_QPT_RC;
        a.cap.max_send_wr = a.cap.max_recv_wr = 8;
        a.cap.max_send_sge = a.cap.max_recv_sge = 1;
        q = ibv_create_qp(pd, &a);
      }
      for (int i = 0; i < 2; ++i) {
        ibv_qp_attr a{};
        a.qp_state = IBV_QPS_INIT;
        a.port_num = 1;
        ibv_modify_qp(qp[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        a = {};
        a.qp_state = IBV_QPS_RTR;
        a.path_mtu = IBV_MTU_1024;
        a.dest_qp_num = qp[1 - i]->qp_num;
        a.ah_attr.port_num = 1;
        a.min_rnr_timer = 1;
        ibv_modify_qp(qp[i], &a,
                      IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                          IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        a = {};
        a.qp_state = IBV_QPS_RTS;
        a.rnr_retry = 7;
        if (ibv_modify_qp(qp[i], &a,
                          IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
          ++failures;
      }
      int sent = 0, recvd = 0;
      for (int i = 0; i < kIters; ++i) {
        ibv_sge rs{reinterpret_cast<uint64_t>(buf.data() + 2048), 64, mr->lkey};
        ibv_recv_wr rwr{};
        rwr.wr_id = i;
        rwr.sg_list = &rs;
        rwr.num_sge = 1;
        ibv_recv_wr* rbad;
        if (ibv_post_recv(qp[1], &rwr, &rbad)) ++failures;
        ibv_sge ss{reinterpret_cast<uint64_t>(buf.data()), 64, mr->lkey};
        ibv_send_wr swr{};
        swr.wr_id = i;
        swr.opcode = IBV_WR_SEND;
        swr.send_flags = IBV_SEND_SIGNALED;
        swr.sg_list = &ss;
        swr.num_sge = 1;
        ibv_send_wr* sbad;
        if (ibv_post_send(qp[0], &swr, &sbad)) ++failures;
        for (int spins = 0; spins < 1000000 && (sent <= i || recvd <= i); ++spins) {
          ibv_wc wc[4];
          int n = ibv_poll_cq(cq, 4, wc);
          for (int k = 0; k < n; ++k) {
            if (wc[k].status != IBV_WC_SUCCESS) ++failures;
            (wc[k].opcode == IBV_WC_SEND ? sent : recvd)++;
          }
        }
      }
      if (sent != kIters || recvd != kIters) ++failures;
      for (auto* q : qp) ibv_destroy_qp(q);
      ibv_destroy_cq(cq);
      ibv_dereg_mr(mr);
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd), 0);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicThreads, ConcurrentQpsOfOneContext) { RunThreads(4, 2000); }

// The same with every call an Event through the checkers: 8 threads, 8 QP
// pairs, full checking, no finding (the traffic is correct) and no race.
TEST(SoftnicThreads, EightThreadsUnderFullChecking) {
  interpose::SetChecking(true);
  const size_t before = core::GlobalReporter().TotalCount();
  RunThreads(8, 500);
  interpose::SetChecking(false);
  EXPECT_EQ(core::GlobalReporter().TotalCount(), before);
}

}  // namespace
}  // namespace rdmasan::testing
