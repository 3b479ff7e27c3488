// softnic's fabric under attack and under pressure (issue 10 items 5, 8,
// 15; squatted names: softnic_user_dir_test.cc): a forked child's exit, a
// full file system, and shared-memory fields forged by another process of
// the user.  The forged-field tests run on this
// binary's in-process fabric, through the exported verbs; the file tests
// attach fabrics of their own in a private directory (RDMASAN_SOFTNIC_DIR).
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "softnic/fabric.h"
#include "softnic/internal.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::softnic {
namespace {

using ::rdmasan::testing::SoftnicPair;

// A private directory for fabric files, set as RDMASAN_SOFTNIC_DIR for
// the test's duration.
class FabricDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rdmasan-fabric-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    setenv("RDMASAN_SOFTNIC_DIR", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("RDMASAN_SOFTNIC_DIR");
    std::string cmd = "rm -rf '" + dir_ + "'";
    EXPECT_EQ(system(cmd.c_str()), 0);
  }
  // Where fabric `name` lives (user_dir.h: RDMASAN_SOFTNIC_DIR's user
  // directory).
  std::string Named(const std::string& name) const { return PrivateDir() + "/fabric-" + name; }
  std::string PrivateDir() const { return dir_ + "/rdmasan-" + std::to_string(geteuid()) + ".d"; }
  std::string dir_;
};

TEST_F(FabricDir, ForkedChildExitLeavesTheParentsSlotAndFile) {
  Fabric* f = Fabric::Attach("fork");
  ASSERT_NE(f, nullptr);
  const uint32_t me = f->self_proc();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    f->Detach();  // what the child's atexit handler does
    _exit(0);
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(f->hdr()->procs[me].in_use, 1u) << "the child released the parent's slot";
  EXPECT_EQ(f->hdr()->procs[me].pid, getpid());
  EXPECT_EQ(access(Named("fork").c_str(), F_OK), 0) << "the child removed the parent's fabric file";
  f->Detach();
  delete f;
  EXPECT_NE(access(Named("fork").c_str(), F_OK), 0);
}

// In a child: a mount namespace of its own (a user namespace too when not
// root) with a small tmpfs at `dir`.  Returns false if the system allows
// neither.
bool MountSmallTmpfs(const std::string& dir, const char* size) {
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWNS) != 0) {
    if (unshare(CLONE_NEWUSER | CLONE_NEWNS) != 0) return false;
    auto write_file = [](const char* path, const std::string& text) {
      int fd = open(path, O_WRONLY);
      bool ok = fd >= 0 && write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
      if (fd >= 0) close(fd);
      return ok;
    };
    write_file("/proc/self/setgroups", "deny");
    if (!write_file("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") ||
        !write_file("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1"))
      return false;
  }
  if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) return false;
  std::string opts = std::string("size=") + size + ",mode=0700";
  return mount("none", dir.c_str(), "tmpfs", 0, opts.c_str()) == 0;
}

// A full tmpfs: allocations fail with ENOMEM, attaching fails with ENOMEM,
// and no page is ever touched without backing (no SIGBUS).
TEST_F(FabricDir, FullFileSystemGivesEnomemNotSigbus) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    if (!MountSmallTmpfs(dir_, "16m")) _exit(77);
    Fabric* f = Fabric::Attach("small");
    if (!f) _exit(10);
    f->Lock();
    int n = 0;
    while (f->Alloc(3 << 20) != 0 && n < 100) ++n;  // touches every page it returns
    int e = errno;
    f->Unlock();
    if (n == 0 || n >= 16 || e != ENOMEM) _exit(11);
    // The file system is full now: a second fabric cannot get its tables.
    errno = 0;
    if (Fabric::Attach("other") != nullptr || errno != ENOMEM) _exit(12);
    f->Detach();
    _exit(0);
  }
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  if (WIFEXITED(status) && WEXITSTATUS(status) == 77) GTEST_SKIP() << "no mount namespace for a small tmpfs";
  ASSERT_FALSE(WIFSIGNALED(status)) << "killed by signal " << WTERMSIG(status);
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: attach failed, 11: allocation did not end in ENOMEM, 12: a "
                                       "second attach on a full tmpfs did not fail with ENOMEM";
}

// ------------------------------------------------ forged shared fields --

class ForgedFabric : public SoftnicPair {
 protected:
  ShmHeader* Hdr() { return GetProcess()->fab->hdr(); }
  ShmQp& ShmQpOf(int side) { return Hdr()->qps[qp_[side]->qp_num & 0xfff]; }
  ShmCq& ShmCqOf(int side) { return Hdr()->cqs[cq_[side]->handle]; }
};

TEST_F(ForgedFabric, ReceiveQueueWithNoSlotsIsRefusedNotSigfpe) {
  ShmRq saved = ShmQpOf(1).rq;
  ShmQpOf(1).rq.nslots = 0;
  EXPECT_NE(PostRecv(1, 1, 0, 64), 0) << "a post into a ring of no slots";
  ShmQpOf(1).rq.head = 1;  // a receive "posted"
  ASSERT_EQ(Post(0, IBV_WR_SEND, 2, 0, 64), 0);
  auto wc = Poll(0, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_NE(wc[0].status, IBV_WC_SUCCESS) << "a SEND into a broken receive queue";
  ShmQpOf(1).rq = saved;
}

TEST_F(ForgedFabric, ReceiveQueueRingOutsideTheFabricIsNeverWritten) {
  ShmRq saved = ShmQpOf(1).rq;
  ShmQpOf(1).rq.ring_off = kHeapBytes * 4;
  EXPECT_NE(PostRecv(1, 1, 0, 64), 0);
  ShmQpOf(1).rq = saved;
  ShmQpOf(1).rq.stride = 1;  // entries would overlap and spill
  EXPECT_NE(PostRecv(1, 1, 0, 64), 0);
  ShmQpOf(1).rq = saved;
}

TEST_F(ForgedFabric, StagedPayloadOutsideAnyMrIsNotWritten) {
  static uint64_t victim = 0x1111111111111111ull;
  ShmCq& s = ShmCqOf(1);
  const uint64_t cons = s.cons.load();
  ShmCqe* c = GetProcess()->fab->At<ShmCqe>(s.ring_off) + (cons & (s.nslots - 1));
  c->wr_id = 99;
  c->status = IBV_WC_SUCCESS;
  c->opcode = IBV_WC_RECV;
  c->byte_len = 8;
  c->qp_slot = kNone;
  c->stage_nsge = 1;
  c->stage_len = 8;
  c->stage_sge[0] = {reinterpret_cast<uint64_t>(&victim), 8, mr_[1]->lkey};  // a real key, not its range
  memset(c->stage, 0x42, 8);
  c->seq.store(cons + 1);
  auto wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].wr_id, 99u);
  EXPECT_EQ(wc[0].status, IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(victim, 0x1111111111111111ull) << "a forged completion wrote outside every MR";
}

TEST_F(ForgedFabric, StagedPayloadInsideOurMrIsScattered) {
  ShmCq& s = ShmCqOf(1);
  const uint64_t cons = s.cons.load();
  ShmCqe* c = GetProcess()->fab->At<ShmCqe>(s.ring_off) + (cons & (s.nslots - 1));
  c->status = IBV_WC_SUCCESS;
  c->opcode = IBV_WC_RECV;
  c->qp_slot = kNone;
  c->stage_nsge = 1;
  c->stage_len = 8;
  c->stage_sge[0] = {reinterpret_cast<uint64_t>(buf_[1].data() + 16), 8, mr_[1]->lkey};
  memset(c->stage, 0x42, 8);
  c->seq.store(cons + 1);
  auto wc = Poll(1, 1);
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(buf_[1][16], 0x42);
}

TEST_F(ForgedFabric, CompletionRingOutsideTheFabricIsNeverWritten) {
  ShmCq saved_fields;
  memcpy(static_cast<void*>(&saved_fields), &ShmCqOf(1), offsetof(ShmCq, prod));
  ShmCqOf(1).ring_off = kHeapBytes * 4;
  ASSERT_EQ(PostRecv(1, 1, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 2, 0, 64), 0);  // the receive completion would go there
  auto wc = Poll(0, 1);
  EXPECT_EQ(wc.size(), 1u);
  ShmCqOf(1).nslots = 0;
  ASSERT_EQ(PostRecv(1, 3, 0, 64), 0);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 4, 0, 64), 0);
  Poll(0, 1);
  memcpy(static_cast<void*>(&ShmCqOf(1)), &saved_fields, offsetof(ShmCq, prod));
}

TEST_F(ForgedFabric, ForgedAddressOfOurOwnMrIsNotUsed) {
  static uint8_t victim[64];
  memset(victim, 0x11, sizeof(victim));
  ShmMr& m = Hdr()->mrs[mr_[1]->rkey >> 8];
  const uint64_t real = m.addr;
  m.addr = reinterpret_cast<uint64_t>(victim);  // the iova stays: the key's range maps elsewhere
  memset(buf_[0].data(), 0x55, 64);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 64), 0);
  auto wc = Poll(0, 1);
  m.addr = real;
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_EQ(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(victim[0], 0x11) << "an RDMA WRITE went where the forged MR entry said";
  EXPECT_EQ(buf_[1][0], 0x55) << "the write lands in the MR as registered";
}

TEST_F(ForgedFabric, ForgedFreeListEndsAllocationWithEnomem) {
  ShmHeader* h = Hdr();
  Fabric* f = GetProcess()->fab;
  f->Lock();
  const uint64_t saved = h->free_head;
  h->free_head = kHeapBytes * 8;
  f->Unlock();
  errno = 0;
  ibv_cq* cq = ibv_create_cq(ctx_, 16, nullptr, nullptr, 0);
  EXPECT_EQ(cq, nullptr);
  EXPECT_EQ(errno, ENOMEM);
  f->Lock();
  h->free_head = saved;
  f->Unlock();
  if (cq) ibv_destroy_cq(cq);
}

TEST_F(ForgedFabric, LoopbackQpsLeaveYamaAlone) {
  EXPECT_EQ(GetProcess()->fab->ptracer(), 0) << "no peer process, no PR_SET_PTRACER";
}

TEST_F(ForgedFabric, PtracerNamesTheOnePeerProcessOnly) {
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    pause();
    _exit(0);
  }
  Fabric* f = GetProcess()->fab;
  ShmHeader* h = Hdr();
  const uint32_t proc = kMaxProcs - 1, slot = kMaxQps - 1;
  f->Lock();
  h->procs[proc].pid = child;
  h->procs[proc].start_time = ProcStartTime(child);
  h->procs[proc].in_use = 1;
  ShmQp& peer = h->qps[slot];
  peer.in_use = 1;
  peer.proc = proc;
  peer.type = IBV_QPT_RC;
  peer.qpn = (7u << 12) | slot;
  f->Unlock();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), 0);
  EXPECT_EQ(Connect(qp_[0], peer.qpn), 0);
  EXPECT_EQ(f->ptracer(), child) << "the one peer process, not any process";
  f->Lock();
  peer.in_use = 0;
  peer.qpn = 0;
  h->procs[proc].in_use = 0;
  f->Unlock();
  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
}

// A forged process slot that names this very process, with a QP and an MR
// "of another process": a copy through it would land in this process's
// memory where the forged MR says.  It must find no responder instead.
TEST_F(ForgedFabric, ForgedPeerThatIsThisProcessGetsNoAccess) {
  static uint8_t victim[64];
  memset(victim, 0x11, sizeof(victim));
  Fabric* f = GetProcess()->fab;
  ShmHeader* h = Hdr();
  const uint32_t proc = kMaxProcs - 2, qslot = kMaxQps - 2, mslot = kMaxMrs - 2;
  f->Lock();
  h->procs[proc].pid = getpid();
  h->procs[proc].start_time = ProcStartTime(getpid());
  h->procs[proc].in_use = 1;
  ShmQp& peer = h->qps[qslot];
  peer.in_use = 1;
  peer.proc = proc;
  peer.type = IBV_QPT_RC;
  peer.qpn = (9u << 12) | qslot;
  peer.access = IBV_ACCESS_REMOTE_WRITE;
  peer.srq = kNone;
  peer.state.store(IBV_QPS_RTS);
  ShmMr& m = h->mrs[mslot];
  m.in_use = 1;
  m.proc = proc;
  m.key = mslot << 8 | 1;
  m.addr = m.iova = reinterpret_cast<uint64_t>(victim);
  m.length = sizeof(victim);
  m.access = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE;
  m.pd = peer.pd;
  f->Unlock();
  ibv_qp_attr a{};
  a.qp_state = IBV_QPS_RESET;
  ASSERT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_STATE), 0);
  ASSERT_EQ(Connect(qp_[0], peer.qpn), 0);
  memset(buf_[0].data(), 0x55, 64);
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 64, mr_[0]->lkey};
  ibv_send_wr wr{}, *bad = nullptr;
  wr.wr_id = 1;
  wr.opcode = IBV_WR_RDMA_WRITE;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(victim);
  wr.wr.rdma.rkey = m.key;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  auto wc = Poll(0, 1);
  f->Lock();
  m.in_use = 0;
  peer.in_use = 0;
  peer.qpn = 0;
  h->procs[proc].in_use = 0;
  f->Unlock();
  ASSERT_EQ(wc.size(), 1u);
  EXPECT_NE(wc[0].status, IBV_WC_SUCCESS);
  EXPECT_EQ(victim[0], 0x11) << "a forged peer slot naming this process let a WRITE into its memory";
}

}  // namespace
}  // namespace rdmasan::softnic
