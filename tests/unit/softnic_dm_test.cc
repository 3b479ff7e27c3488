// softnic device memory, thread and parent domains, and object import,
// through the shim's verbs as an application calls them (inproc fabric):
// the normal paths and the errors ibv_alloc_dm(3), ibv_reg_dm_mr,
// ibv_alloc_parent_domain(3), ibv_alloc_td(3) and ibv_import_device(3)
// give, plus the books the shim keeps for them (no false findings).
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "core/checks.h"
#include "core/report.h"
#include "interpose/hooks.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

uint64_t MaxDmSize(ibv_context* ctx) {
  ibv_device_attr_ex a{};
  EXPECT_EQ(ibv_query_device_ex(ctx, nullptr, &a), 0);
  return a.max_dm_size;
}

ibv_dm* AllocDm(ibv_context* ctx, size_t length, uint32_t log_align = 0, uint32_t comp_mask = 0) {
  ibv_alloc_dm_attr a{};
  a.length = length;
  a.log_align_req = log_align;
  a.comp_mask = comp_mask;
  return ibv_alloc_dm(ctx, &a);
}

class SoftnicDm : public ::testing::Test {
 protected:
  void SetUp() override {
    ctx_ = OpenSoftnic();
    ASSERT_NE(ctx_, nullptr);
    pd_ = ibv_alloc_pd(ctx_);
    ASSERT_NE(pd_, nullptr);
  }
  void TearDown() override {
    EXPECT_EQ(ibv_dealloc_pd(pd_), 0);
    EXPECT_EQ(ibv_close_device(ctx_), 0);
  }
  ibv_context* ctx_ = nullptr;
  ibv_pd* pd_ = nullptr;
};

TEST_F(SoftnicDm, MaxSizeIsReportedAndAllocErrorsAreThoseOfTheManPage) {
  const uint64_t max = MaxDmSize(ctx_);
  ASSERT_GT(max, 0u);
  errno = 0;
  EXPECT_EQ(AllocDm(ctx_, 64, 0, /*comp_mask=*/1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(AllocDm(ctx_, max + 1), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(AllocDm(ctx_, 0), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(AllocDm(ctx_, 64, /*log_align=*/40), nullptr);
  EXPECT_EQ(errno, EINVAL);
  // The whole pool, then nothing more until it is given back.
  ibv_dm* all = AllocDm(ctx_, max, 6);
  ASSERT_NE(all, nullptr);
  errno = 0;
  EXPECT_EQ(AllocDm(ctx_, 4), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  EXPECT_EQ(ibv_free_dm(all), 0);
  ibv_dm* again = AllocDm(ctx_, max);
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(ibv_free_dm(again), 0);
}

TEST_F(SoftnicDm, CopiesRoundTripAndRefuseMisalignedOrOutOfRange) {
  ibv_dm* dm = AllocDm(ctx_, 100);
  ASSERT_NE(dm, nullptr);
  const char in[16] = "device memory!";
  char out[16] = {};
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 8, in, 16), 0);
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm, 8, 16), 0);
  EXPECT_EQ(std::memcmp(in, out, 16), 0);
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 3, in, 4), EINVAL);     // offset not 4-aligned
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, 4, 3), EINVAL);  // length not 4-aligned
  EXPECT_EQ(ibv_memcpy_to_dm(dm, 104, in, 4), EFAULT);   // past the allocation
  EXPECT_EQ(ibv_memcpy_from_dm(out, dm, 0, 104), EFAULT);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

TEST_F(SoftnicDm, RegDmMrNeedsZeroBasedAndStaysInsideTheAllocation) {
  ibv_dm* dm = AllocDm(ctx_, 100);
  ASSERT_NE(dm, nullptr);
  const unsigned kZb = IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE;
  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 0, 100, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 0, 104, kZb), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 96, 8, kZb), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 0, 100, IBV_ACCESS_ZERO_BASED | IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_reg_dm_mr(pd_, dm, 0, 100, kZb | IBV_ACCESS_MW_BIND), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_mr* empty = ibv_reg_dm_mr(pd_, dm, 0, 0, kZb);  // what pyverbs' test_create_dm_mr registers
  ASSERT_NE(empty, nullptr);
  ibv_mr* mr = ibv_reg_dm_mr(pd_, dm, 4, 96, kZb | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
  ASSERT_NE(mr, nullptr);
  EXPECT_EQ(mr->addr, nullptr);  // as libibverbs gives it
  EXPECT_EQ(mr->length, 96u);
  EXPECT_NE(mr->lkey, empty->lkey);
  // In use: EBUSY, as the kernel's usecnt gives it.
  EXPECT_EQ(ibv_free_dm(dm), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
  EXPECT_EQ(ibv_free_dm(dm), EBUSY);
  EXPECT_EQ(ibv_dereg_mr(empty), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
}

// A DM MR's keys in the data path: a local SGE (zero-based offset) as the
// source of a SEND, and the target of a peer's RDMA WRITE and READ at
// zero-based remote addresses; a write past the MR is a remote access error.
// Every verb is an Event through the checkers (the shim's books).
class SoftnicDmTraffic : public SoftnicPair {
 protected:
  void SetUp() override {
    interpose::SetChecking(true);
    SoftnicPair::SetUp();
    dm_ = AllocDm(ctx_, 256);
    ASSERT_NE(dm_, nullptr);
    dm_mr_ = ibv_reg_dm_mr(
        pd_, dm_, 0, 256,
        IBV_ACCESS_ZERO_BASED | IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    ASSERT_NE(dm_mr_, nullptr);
  }
  void TearDown() override {
    if (dm_mr_) {
      EXPECT_EQ(ibv_dereg_mr(dm_mr_), 0);
    }
    if (dm_) {
      EXPECT_EQ(ibv_free_dm(dm_), 0);
    }
    SoftnicPair::TearDown();
    interpose::SetChecking(false);
  }
  // Side 0 posts `op` with one SGE of its own buffer to [remote, +len) of
  // the DM MR (as side 1's).
  int PostToDm(ibv_wr_opcode op, uint64_t wr_id, uint64_t remote, uint32_t len) {
    ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), len, mr_[0]->lkey};
    ibv_send_wr wr{};
    wr.wr_id = wr_id;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = remote;
    wr.wr.rdma.rkey = dm_mr_->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_[0], &wr, &bad);
  }
  ibv_dm* dm_ = nullptr;
  ibv_mr* dm_mr_ = nullptr;
};

TEST_F(SoftnicDmTraffic, SendFromDeviceMemory) {
  const char msg[16] = "from the device";
  ASSERT_EQ(ibv_memcpy_to_dm(dm_, 32, msg, 16), 0);
  ASSERT_EQ(PostRecv(1, 7, 0, 64), 0);
  ibv_sge sge{32, 16, dm_mr_->lkey};  // zero-based: offset 32 of the DM MR
  ibv_send_wr wr{};
  wr.wr_id = 8;
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(r[0].byte_len, 16u);
  EXPECT_EQ(std::memcmp(buf_[1].data(), msg, 16), 0);
}

TEST_F(SoftnicDmTraffic, RdmaWriteAndReadAtZeroBasedAddresses) {
  std::memcpy(buf_[0].data(), "written remotely", 16);
  ASSERT_EQ(PostToDm(IBV_WR_RDMA_WRITE, 1, 64, 16), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  char out[16] = {};
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm_, 64, 16), 0);
  EXPECT_EQ(std::memcmp(out, "written remotely", 16), 0);
  std::memset(buf_[0].data(), 0, 16);
  ASSERT_EQ(PostToDm(IBV_WR_RDMA_READ, 2, 64, 16), 0);
  s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(std::memcmp(buf_[0].data(), "written remotely", 16), 0);
}

TEST_F(SoftnicDmTraffic, RdmaWritePastTheDmMrIsARemoteAccessError) {
  ASSERT_EQ(PostToDm(IBV_WR_RDMA_WRITE, 1, 250, 16), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_REM_ACCESS_ERR);
}

// The shim's books: zero-based SGEs of a DM MR are no invalid-lkey or
// sge-out-of-bounds; one past its end is.
TEST_F(SoftnicDmTraffic, ShimTakesZeroBasedSgesOfTheDmMr) {
  auto& rep = core::GlobalReporter();
  const size_t lkey = rep.Count(core::CheckId::kInvalidLkey);
  const size_t oob = rep.Count(core::CheckId::kSgeOutOfBounds);
  ASSERT_EQ(PostRecv(1, 7, 0, 64), 0);
  ibv_sge sge{0, 64, dm_mr_->lkey};
  ibv_send_wr wr{};
  wr.opcode = IBV_WR_SEND;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  ASSERT_EQ(Poll(0, 1).size(), 1u);
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  EXPECT_EQ(rep.Count(core::CheckId::kInvalidLkey), lkey);
  EXPECT_EQ(rep.Count(core::CheckId::kSgeOutOfBounds), oob);
  ASSERT_EQ(PostRecv(1, 9, 0, 64), 0);
  sge = {250, 16, dm_mr_->lkey};
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  EXPECT_EQ(rep.Count(core::CheckId::kSgeOutOfBounds), oob + 1);
  Poll(0, 1);
}

// ----------------------------------------------------------- import ---

TEST_F(SoftnicDm, ImportDeviceByADupOfTheCommandFdSharesPdMrAndDm) {
  std::vector<char> buf(4096, 'x');
  ibv_mr* mr = ibv_reg_mr(pd_, buf.data(), buf.size(), IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr, nullptr);
  ibv_dm* dm = AllocDm(ctx_, 64);
  ASSERT_NE(dm, nullptr);
  ASSERT_EQ(ibv_memcpy_to_dm(dm, 0, "shared!!", 8), 0);

  const int fd = dup(ctx_->cmd_fd);
  ASSERT_GE(fd, 0);
  ibv_context* imp = ibv_import_device(fd);
  ASSERT_NE(imp, nullptr);
  EXPECT_EQ(imp->cmd_fd, fd);
  ibv_pd* ipd = ibv_import_pd(imp, pd_->handle);
  ASSERT_NE(ipd, nullptr);
  EXPECT_EQ(ipd->context, imp);
  EXPECT_EQ(ipd->handle, pd_->handle);
  ibv_mr* imr = ibv_import_mr(ipd, mr->handle);
  ASSERT_NE(imr, nullptr);
  EXPECT_EQ(imr->lkey, mr->lkey);
  EXPECT_EQ(imr->rkey, mr->rkey);
  EXPECT_EQ(imr->length, mr->length);
  EXPECT_EQ(imr->addr, nullptr);  // as the kernel's query gives it
  ibv_dm* idm = ibv_import_dm(imp, dm->handle);
  ASSERT_NE(idm, nullptr);
  char out[8];
  ASSERT_EQ(ibv_memcpy_from_dm(out, idm, 0, 8), 0);
  EXPECT_EQ(std::memcmp(out, "shared!!", 8), 0);

  errno = 0;
  EXPECT_EQ(ibv_import_pd(imp, 0xfffffff), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_import_mr(ipd, 0xfffffff), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_import_dm(imp, 0xfffffff), nullptr);
  EXPECT_EQ(errno, EINVAL);

  ibv_unimport_dm(idm);
  ibv_unimport_mr(imr);
  ibv_unimport_pd(ipd);
  EXPECT_EQ(ibv_close_device(imp), 0);
  EXPECT_EQ(fcntl(fd, F_GETFD), -1);  // the imported context closed the fd it owned
  // The objects are still the original context's.
  ASSERT_EQ(ibv_memcpy_from_dm(out, dm, 0, 8), 0);
  EXPECT_EQ(ibv_free_dm(dm), 0);
  EXPECT_EQ(ibv_dereg_mr(mr), 0);
}

TEST_F(SoftnicDm, ImportFromAnotherContextsFileIsRefused) {
  ibv_context* other = OpenSoftnic();
  ASSERT_NE(other, nullptr);
  ibv_dm* dm = AllocDm(ctx_, 64);
  ASSERT_NE(dm, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_import_pd(other, pd_->handle), nullptr);
  EXPECT_EQ(errno, EINVAL);
  errno = 0;
  EXPECT_EQ(ibv_import_dm(other, dm->handle), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_free_dm(dm), 0);
  EXPECT_EQ(ibv_close_device(other), 0);
}

// An fd that is no softnic context and no device: a clean errno, never a
// crash (a regular file, /dev/null, a closed fd).
TEST(SoftnicImport, ForeignFdsFailCleanly) {
  ibv_context* ctx = OpenSoftnic();  // a softnic context exists: not enough
  ASSERT_NE(ctx, nullptr);
  char path[] = "/tmp/softnic_dm_test.XXXXXX";
  const int file = mkstemp(path);
  ASSERT_GE(file, 0);
  unlink(path);
  errno = 0;
  EXPECT_EQ(ibv_import_device(file), nullptr);
  EXPECT_EQ(errno, EINVAL);
  close(file);
  const int null = open("/dev/null", O_RDWR);
  ASSERT_GE(null, 0);
  errno = 0;
  EXPECT_EQ(ibv_import_device(null), nullptr);
  EXPECT_NE(errno, 0);
  close(null);
  errno = 0;
  EXPECT_EQ(ibv_import_device(987654), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// ---------------------------------------------- thread and parent domains ---

struct Allocs {
  int allocs = 0, frees = 0;
  std::vector<uint64_t> types;
  bool fail = false, use_default = false;
  ibv_pd* pd_seen = nullptr;
};

void* TestAlloc(ibv_pd* pd, void* ctx, size_t size, size_t alignment, uint64_t type) {
  auto* a = static_cast<Allocs*>(ctx);
  a->pd_seen = pd;
  if (a->fail) return nullptr;
  if (a->use_default) return IBV_ALLOCATOR_USE_DEFAULT;
  ++a->allocs;
  a->types.push_back(type);
  void* p = nullptr;
  return posix_memalign(&p, alignment, size) == 0 ? p : nullptr;
}

void TestFree(ibv_pd* pd, void* ctx, void* ptr, uint64_t type) {
  ++static_cast<Allocs*>(ctx)->frees;
  free(ptr);
}

ibv_pd* ParentDomain(ibv_context* ctx, ibv_pd* pd, ibv_td* td, Allocs* a) {
  ibv_parent_domain_init_attr attr{};
  attr.pd = pd;
  attr.td = td;
  if (a) {
    attr.comp_mask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
    attr.alloc = TestAlloc;
    attr.free = TestFree;
    attr.pd_context = a;
  }
  return ibv_alloc_parent_domain(ctx, &attr);
}

TEST_F(SoftnicDm, ThreadAndParentDomainErrors) {
  ibv_td_init_attr ta{};
  ta.comp_mask = 1;
  errno = 0;
  EXPECT_EQ(ibv_alloc_td(ctx_, &ta), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ta.comp_mask = 0;
  ibv_td* td = ibv_alloc_td(ctx_, &ta);
  ASSERT_NE(td, nullptr);
  errno = 0;
  EXPECT_EQ(ParentDomain(ctx_, nullptr, td, nullptr), nullptr);  // a PD is required
  EXPECT_EQ(errno, EINVAL);
  ibv_parent_domain_init_attr bad{};
  bad.pd = pd_;
  bad.comp_mask = 1u << 7;
  errno = 0;
  EXPECT_EQ(ibv_alloc_parent_domain(ctx_, &bad), nullptr);
  EXPECT_EQ(errno, EINVAL);
  ibv_pd* parent = ParentDomain(ctx_, pd_, td, nullptr);
  ASSERT_NE(parent, nullptr);
  errno = 0;
  EXPECT_EQ(ParentDomain(ctx_, parent, nullptr, nullptr), nullptr);  // not of a parent domain
  EXPECT_EQ(errno, EINVAL);
  // In use: the TD by the parent domain, the PD by the parent domain.
  EXPECT_EQ(ibv_dealloc_td(td), EBUSY);
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  // An extended CQ's PD must be a parent domain.
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = pd_;
  errno = 0;
  EXPECT_EQ(ibv_create_cq_ex(ctx_, &ca), nullptr);
  EXPECT_EQ(errno, EINVAL);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
  EXPECT_EQ(ibv_dealloc_td(td), 0);
}

TEST_F(SoftnicDm, ParentDomainAllocatorsServeQpCqSrqAndAreGivenBack) {
  Allocs a;
  ibv_pd* parent = ParentDomain(ctx_, pd_, nullptr, &a);
  ASSERT_NE(parent, nullptr);
  ibv_cq_init_attr_ex ca{};
  ca.cqe = 16;
  ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_PD;
  ca.parent_domain = parent;
  ibv_cq_ex* cqx = ibv_create_cq_ex(ctx_, &ca);
  ASSERT_NE(cqx, nullptr);
  ibv_cq* cq = ibv_cq_ex_to_cq(cqx);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  ibv_srq* srq = ibv_create_srq(parent, &sa);
  ASSERT_NE(srq, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq;
  qa.srq = srq;
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = 8;
  qa.cap.max_send_sge = 1;
  ibv_qp* qp = ibv_create_qp(parent, &qa);
  ASSERT_NE(qp, nullptr);
  EXPECT_EQ(qp->pd, parent);
  EXPECT_EQ(a.allocs, 3);
  EXPECT_EQ(a.pd_seen, parent);
  EXPECT_EQ(a.types.size(), 3u);
  EXPECT_EQ(ibv_dealloc_pd(parent), EBUSY);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), EBUSY);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(ibv_destroy_cq(cq), 0);
  EXPECT_EQ(a.frees, 3);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

TEST_F(SoftnicDm, AllocatorFailureFailsTheCreateAndDefaultMeansNoFree) {
  Allocs a;
  a.fail = true;
  ibv_pd* parent = ParentDomain(ctx_, pd_, nullptr, &a);
  ASSERT_NE(parent, nullptr);
  ibv_srq_init_attr sa{};
  sa.attr.max_wr = 8;
  sa.attr.max_sge = 1;
  errno = 0;
  EXPECT_EQ(ibv_create_srq(parent, &sa), nullptr);
  EXPECT_EQ(errno, ENOMEM);
  a.fail = false;
  a.use_default = true;
  ibv_srq* srq = ibv_create_srq(parent, &sa);
  ASSERT_NE(srq, nullptr);
  EXPECT_EQ(ibv_destroy_srq(srq), 0);
  EXPECT_EQ(a.frees, 0);
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);  // nothing of it is left
}

// A QP made with a parent domain belongs to its PD: the PD's MRs are its
// keys (in softnic and in the shim's books), another PD's are not.
class SoftnicParentDomainTraffic : public SoftnicPair {
 protected:
  void SetUp() override {
    interpose::SetChecking(true);
    SoftnicPair::SetUp();
  }
  void TearDown() override {
    SoftnicPair::TearDown();
    interpose::SetChecking(false);
  }
};

TEST_F(SoftnicParentDomainTraffic, MrOfTheProtectionDomainServesAQpOfTheParentDomain) {
  ibv_pd* parent = ParentDomain(ctx_, pd_, nullptr, nullptr);
  ASSERT_NE(parent, nullptr);
  ibv_qp_init_attr qa{};
  qa.send_cq = qa.recv_cq = cq_[0];
  qa.qp_type = IBV_QPT_RC;
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 8;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  ibv_qp* qp = ibv_create_qp(parent, &qa);
  ASSERT_NE(qp, nullptr);
  // Side 0's QP is replaced by the parent domain's, connected to side 1.
  ASSERT_EQ(ibv_destroy_qp(qp_[0]), 0);
  qp_[0] = qp;
  ibv_qp_attr reset{};
  reset.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[1], &reset, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(qp_[0], qp_[1]->qp_num), 0);
  ASSERT_EQ(Connect(qp_[1], qp_[0]->qp_num), 0);
  auto& rep = core::GlobalReporter();
  const size_t lkey = rep.Count(core::CheckId::kInvalidLkey);
  const size_t in_use = rep.Count(core::CheckId::kDestroyInUse);
  std::memcpy(buf_[0].data(), "parent", 6);
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 2, 0, 6), 0);
  auto s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_SUCCESS);
  ASSERT_EQ(Poll(1, 1).size(), 1u);
  EXPECT_EQ(std::memcmp(buf_[1].data(), "parent", 6), 0);
  EXPECT_EQ(rep.Count(core::CheckId::kInvalidLkey), lkey);
  // The PD cannot go while the parent domain's QP is its: softnic says
  // EBUSY, and the shim's books report destroy-in-use.
  EXPECT_EQ(ibv_dealloc_pd(pd_), EBUSY);
  EXPECT_EQ(rep.Count(core::CheckId::kDestroyInUse), in_use + 1);
  // An MR of another PD is no key of it.
  ibv_pd* pd2 = ibv_alloc_pd(ctx_);
  ASSERT_NE(pd2, nullptr);
  ibv_mr* mr2 = ibv_reg_mr(pd2, buf_[0].data(), 64, IBV_ACCESS_LOCAL_WRITE);
  ASSERT_NE(mr2, nullptr);
  EXPECT_EQ(Post(0, IBV_WR_SEND, 3, 0, 6, IBV_SEND_SIGNALED, 0, mr2->lkey), 0);
  s = Poll(0, 1);
  ASSERT_EQ(s.size(), 1u);
  EXPECT_EQ(s[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(rep.Count(core::CheckId::kInvalidLkey), lkey + 1);
  EXPECT_EQ(ibv_dereg_mr(mr2), 0);
  EXPECT_EQ(ibv_dealloc_pd(pd2), 0);
  ASSERT_EQ(ibv_destroy_qp(qp_[0]), 0);
  qp_[0] = nullptr;
  EXPECT_EQ(ibv_dealloc_pd(parent), 0);
}

}  // namespace
}  // namespace rdmasan::testing
