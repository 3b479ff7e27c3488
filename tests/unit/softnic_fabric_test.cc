// softnic's fabric under attack and under pressure (issue 10 items 5, 8,
// 15; issue 29 items 2 and 11): a forked child's exit, a full file system,
// shared-memory fields forged by another process of the user, names
// another user could have made first (never used: the user directory, and
// a runtime directory when it is the user's own), the rdma_cm names of
// channels nobody holds (swept at attach), and a SIGTERM (the fabric file
// removed as an exit does).  Another user's squats, for real, are
// e2e.fabric.cross_user_squat's.  The forged-field tests run on this
// binary's in-process fabric, through the exported verbs; the file tests
// attach fabrics of their own in a private directory (RDMASAN_SOFTNIC_DIR).
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/file.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

#include "softnic/cm_wire.h"
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

// In a child: attaches fabric `name`, takes its lock and tells `fd`, then
// waits to be killed.
[[noreturn]] void HoldLockUntilKilled(const char* name, int fd) {
  Fabric* c = Fabric::Attach(name);
  if (!c) _exit(1);
  c->Lock();
  char r = 'r';
  if (write(fd, &r, 1) != 1) _exit(2);
  for (;;) pause();
}

// A process killed while it holds the fabric lock (a robust mutex's
// EOWNERDEAD case): the next process that wants the lock takes it over
// within the lock's staleness bound, while the dead one is a zombie and
// once it is reaped, and the lock works as before afterwards.
TEST_F(FabricDir, LockOfAKilledHolderIsTakenOver) {
  Fabric* f = Fabric::Attach("lockdead");
  ASSERT_NE(f, nullptr);
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  for (bool reap_first : {false, true}) {
    pid_t child = fork();
    ASSERT_GE(child, 0);
    if (child == 0) HoldLockUntilKilled("lockdead", ready[1]);
    char r;
    ASSERT_EQ(read(ready[0], &r, 1), 1);
    EXPECT_EQ(f->hdr()->lock.word.load() & ~kLockWaiters, static_cast<uint32_t>(child));
    ASSERT_EQ(kill(child, SIGKILL), 0);
    int status;
    if (reap_first) {
      ASSERT_EQ(waitpid(child, &status, 0), child);
    } else {
      siginfo_t info{};
      ASSERT_EQ(waitid(P_PID, child, &info, WEXITED | WNOWAIT), 0);  // a zombie now
    }
    const auto t0 = std::chrono::steady_clock::now();
    f->Lock();
    EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(3)) << "reaped: " << reap_first;
    EXPECT_EQ(f->hdr()->lock.word.load() & ~kLockWaiters, static_cast<uint32_t>(getpid()));
    f->Unlock();
    EXPECT_EQ(f->hdr()->lock.word.load(), 0u);
    if (!reap_first) {
      ASSERT_EQ(waitpid(child, &status, 0), child);
    }
  }
  close(ready[0]);
  close(ready[1]);
  f->Lock();
  f->Unlock();
  f->Detach();
  delete f;
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
  c->stage_sge0 = {reinterpret_cast<uint64_t>(&victim), 8, mr_[1]->lkey};  // a real key, not its range
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
  c->stage_sge0 = {reinterpret_cast<uint64_t>(buf_[1].data() + 16), 8, mr_[1]->lkey};
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

// The user directory and leftovers (issue 29 items 2 and 11; softnic/user_dir.h,
// softnic/leftovers.h).

std::string Uid() { return std::to_string(geteuid()); }

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0;
}

std::string DirOf(const std::string& path) { return path.substr(0, path.rfind('/')); }

bool StartsWith(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

// RDMASAN_SOFTNIC_DIR set to a fresh directory for the test.
class UserDir : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rdmasan-user-dir-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    base_ = tmpl;
    setenv("RDMASAN_SOFTNIC_DIR", base_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("RDMASAN_SOFTNIC_DIR");
    EXPECT_EQ(system(("rm -rf '" + base_ + "'").c_str()), 0);
  }
  // The name the fabric file had before issue 29, predictable.
  std::string OldName(const std::string& name) const { return base_ + "/rdmasan-" + Uid() + "-" + name; }
  std::string Predictable() const { return base_ + "/rdmasan-" + Uid() + ".d"; }
  std::string base_;
};

TEST_F(UserDir, ADirectoryAtTheFabricsOldNameDoesNotDenySoftnic) {
  ASSERT_EQ(mkdir(OldName("d").c_str(), 0777), 0);
  Fabric* f = Fabric::Attach("d");
  ASSERT_NE(f, nullptr) << "a directory squatting the name denied softnic: " << strerror(errno);
  EXPECT_NE(f->path(), OldName("d"));
  f->Detach();
  delete f;
}

TEST_F(UserDir, FilesAndLinksAtTheOldNameAreNeverUsed) {
  const int fd = open(OldName("sq").c_str(), O_CREAT | O_WRONLY, 0644);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string target = base_ + "/victim";
  close(open(target.c_str(), O_CREAT | O_WRONLY, 0600));
  ASSERT_EQ(symlink(target.c_str(), OldName("ln").c_str()), 0);
  for (const char* name : {"sq", "ln"}) {
    Fabric* f = Fabric::Attach(name);
    ASSERT_NE(f, nullptr) << name << ": " << strerror(errno);
    EXPECT_EQ(DirOf(f->path()), Predictable());
    f->Detach();
    delete f;
  }
  struct stat st;
  ASSERT_EQ(stat(target.c_str(), &st), 0);
  EXPECT_EQ(st.st_size, 0) << "the link's target was grown into a fabric";
}

TEST_F(UserDir, TakenUserDirectoryMovesToARandomNameEveryProcessFinds) {
  ASSERT_EQ(mkdir(Predictable().c_str(), 0755), 0);
  ASSERT_EQ(chmod(Predictable().c_str(), 0755), 0);  // open to others: as good as another user's
  ASSERT_EQ(mkdir(OldName("both").c_str(), 0777), 0);
  Fabric* f = Fabric::Attach("both");
  ASSERT_NE(f, nullptr) << "the name and the per-user directory taken denied softnic: " << strerror(errno);
  const std::string dir = DirOf(f->path());
  EXPECT_TRUE(StartsWith(dir, base_ + "/rdmasan-" + Uid() + ".")) << dir;
  EXPECT_NE(dir, Predictable());
  struct stat st;
  ASSERT_EQ(lstat(dir.c_str(), &st), 0);
  EXPECT_TRUE(S_ISDIR(st.st_mode));
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  // Another process of the user meets it there.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Fabric* g = Fabric::Attach("both");
    const std::string path = g ? g->path() : "none";
    if (write(fds[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) _exit(2);
    if (g) g->Detach();
    _exit(0);
  }
  close(fds[1]);
  char buf[4096] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_EQ(std::string(buf, n > 0 ? n : 0), f->path()) << "another process of the user did not meet it";
  f->Detach();
  delete f;
  EXPECT_FALSE(Exists(dir + "/fabric-both")) << "the last one out removes the file";
}

TEST_F(UserDir, LinkAtTheUserDirectoryIsNotFollowed) {
  const std::string elsewhere = base_ + "/elsewhere";
  ASSERT_EQ(mkdir(elsewhere.c_str(), 0700), 0);
  ASSERT_EQ(symlink(elsewhere.c_str(), Predictable().c_str()), 0);
  Fabric* f = Fabric::Attach("ln");
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_FALSE(StartsWith(f->path(), Predictable() + "/")) << f->path();
  EXPECT_FALSE(Exists(elsewhere + "/fabric-ln"));
  f->Detach();
  delete f;
}

// An inbox socket file at `path` whose socket is closed (its channel's
// process died), or, with `keep`, still bound: its fd.
int Inbox(const std::string& path, bool keep) {
  const int s = socket(AF_UNIX, SOCK_DGRAM, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", path.c_str());
  if (s < 0 || bind(s, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) != 0) return -1;
  if (keep) return s;
  close(s);
  return 0;
}

pid_t DeadPid() {
  const pid_t p = fork();
  if (p == 0) _exit(0);
  waitpid(p, nullptr, 0);
  return p;
}

TEST_F(UserDir, AttachSweepsTheRdmaCmNamesNobodyHolds) {
  std::string ud;
  ASSERT_TRUE(UserPrivateDir(&ud));
  // A folder a SIGKILLed channel left: its inbox (named with a pid that
  // runs again: this process's) and a port file nobody holds.
  const std::string gone = ud + "/cm-gone";
  ASSERT_EQ(mkdir(gone.c_str(), 0700), 0);
  ASSERT_EQ(Inbox(gone + "/" + std::to_string(getpid()) + ".0.00aa", false), 0);
  cm::PortRecord rec{};
  int fd = open((gone + "/p2-7471").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_EQ(write(fd, &rec, sizeof(rec)), static_cast<ssize_t>(sizeof(rec)));
  close(fd);
  // A live one: a bound inbox named with a pid that ended (a forked child
  // holds its parent's), and a held port file.
  const std::string live = ud + "/cm-live";
  ASSERT_EQ(mkdir(live.c_str(), 0700), 0);
  const std::string inbox = live + "/" + std::to_string(DeadPid()) + ".0.00bb";
  const int bound = Inbox(inbox, true);
  ASSERT_GT(bound, 0);
  const int held = open((live + "/p2-7472").c_str(), O_CREAT | O_WRONLY, 0600);
  ASSERT_EQ(write(held, &rec, sizeof(rec)), static_cast<ssize_t>(sizeof(rec)));
  ASSERT_EQ(flock(held, LOCK_EX), 0);

  Fabric* f = Fabric::Attach("sweep");
  ASSERT_NE(f, nullptr);
  EXPECT_FALSE(Exists(gone)) << "the dead channel's folder is left behind";
  EXPECT_TRUE(Exists(inbox)) << "a bound inbox was removed";
  EXPECT_TRUE(Exists(live + "/p2-7472")) << "a held port file was removed";
  f->Detach();
  delete f;
  close(bound);
  close(held);
}

TEST_F(UserDir, SigtermRemovesTheFabricFileAsAnExitDoes) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    Fabric* g = Fabric::Attach("term");
    const std::string path = g ? g->path() : "none";
    if (write(fds[1], path.data(), path.size()) != static_cast<ssize_t>(path.size())) _exit(2);
    close(fds[1]);
    for (;;) pause();
  }
  close(fds[1]);
  char buf[4096] = {};
  const ssize_t n = read(fds[0], buf, sizeof(buf) - 1);
  close(fds[0]);
  const std::string path(buf, n > 0 ? n : 0);
  ASSERT_TRUE(Exists(path)) << path;
  kill(child, SIGTERM);
  int status;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGTERM) << "the process must still die of SIGTERM";
  EXPECT_FALSE(Exists(path)) << "SIGTERM left the fabric file behind";
}

// XDG_RUNTIME_DIR set to a fresh private directory on tmpfs, and
// RDMASAN_SOFTNIC_DIR unset.
class RuntimeDir : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* s = getenv("RDMASAN_SOFTNIC_DIR")) saved_dir_ = s;
    if (const char* x = getenv("XDG_RUNTIME_DIR")) saved_xdg_ = x;
    unsetenv("RDMASAN_SOFTNIC_DIR");
    char tmpl[] = "/dev/shm/rdmasan-xdg-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    xdg_ = tmpl;
    setenv("XDG_RUNTIME_DIR", xdg_.c_str(), 1);
  }
  void TearDown() override {
    if (saved_dir_.empty())
      unsetenv("RDMASAN_SOFTNIC_DIR");
    else
      setenv("RDMASAN_SOFTNIC_DIR", saved_dir_.c_str(), 1);
    if (saved_xdg_.empty())
      unsetenv("XDG_RUNTIME_DIR");
    else
      setenv("XDG_RUNTIME_DIR", saved_xdg_.c_str(), 1);
    EXPECT_EQ(system(("rm -rf '" + xdg_ + "'").c_str()), 0);
  }
  std::string xdg_, saved_dir_, saved_xdg_;
};

TEST_F(RuntimeDir, FabricLivesInTheUsersRuntimeDirectory) {
  const std::string name = "xdg-" + std::to_string(getpid());
  Fabric* f = Fabric::Attach(name);
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_EQ(f->path(), xdg_ + "/rdmasan/fabric-" + name);
  struct stat st;
  ASSERT_EQ(lstat((xdg_ + "/rdmasan").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  f->Detach();
  delete f;
}

TEST_F(RuntimeDir, ARuntimeDirectoryOthersCanReachIsIgnored) {
  ASSERT_EQ(chmod(xdg_.c_str(), 0755), 0);
  Fabric* f = Fabric::Attach("xdg-open-" + std::to_string(getpid()));
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_FALSE(StartsWith(f->path(), xdg_ + "/")) << f->path();
  f->Detach();
  delete f;
}

// sudo -E: the variable names another user's runtime directory.
TEST_F(RuntimeDir, AnotherUsersRuntimeDirectoryIsIgnored) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to give the directory away";
  ASSERT_EQ(chown(xdg_.c_str(), 65534, 65534), 0);
  Fabric* f = Fabric::Attach("xdg-other-" + std::to_string(getpid()));
  ASSERT_NE(f, nullptr) << strerror(errno);
  EXPECT_FALSE(StartsWith(f->path(), xdg_ + "/")) << f->path();
  f->Detach();
  delete f;
}

}  // namespace
}  // namespace rdmasan::softnic
