// softnic's device behaviour under misuse and hostile neighbours (issue 10
// items 7, 9, 12): memory registration checks the range, the data path
// never faults on memory unmapped under a live MR, an RC requester retries
// while its responder is not yet in RTR, and the event sockets accept only
// their owner's datagrams and survive squatted names.
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "softnic/access.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"
#include "tests/unit/softnic_fixture.h"

namespace rdmasan::testing {
namespace {

using std::chrono::milliseconds;
using std::chrono::steady_clock;

// ---------------------------------------------------------------- item 7 --

// A fresh anonymous mapping of `pages` pages.
uint8_t* MapPages(size_t pages, int prot) {
  void* p = mmap(nullptr, pages * 4096, prot, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : static_cast<uint8_t*>(p);
}

TEST_F(SoftnicPair, RegMrOfUnmappedMemoryIsEfault) {
  uint8_t* m = MapPages(2, PROT_READ | PROT_WRITE);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(munmap(m + 4096, 4096), 0);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, m + 4096, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, m, 8192, 0), nullptr) << "the range's second page is unmapped";
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* ok = ibv_reg_mr(pd_, m, 4096, IBV_ACCESS_LOCAL_WRITE);
  EXPECT_NE(ok, nullptr) << "the mapped page alone registers";
  if (ok) {
    EXPECT_EQ(ibv_dereg_mr(ok), 0);
  }
  munmap(m, 4096);
}

TEST_F(SoftnicPair, RegMrForWriteOfReadOnlyMemoryIsEfault) {
  uint8_t* m = MapPages(1, PROT_READ);
  ASSERT_NE(m, nullptr);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, m, 4096, IBV_ACCESS_LOCAL_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  errno = 0;
  EXPECT_EQ(ibv_reg_mr(pd_, m, 4096, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE), nullptr);
  EXPECT_EQ(errno, EFAULT);
  ibv_mr* ro = ibv_reg_mr(pd_, m, 4096, IBV_ACCESS_REMOTE_READ);
  EXPECT_NE(ro, nullptr) << "read-only memory registers for reading";
  if (ro) {
    EXPECT_EQ(ibv_dereg_mr(ro), 0);
  }
  munmap(m, 4096);
}

// The device's own copies (CopyLocal) fail with EFAULT on an unmapped
// source or destination, small (SafeCopySmall's) and large (memmove's with
// a recovery point) alike, and copy what they should otherwise, also
// between overlapping ranges and across several pieces.
TEST(SoftnicCopyLocal, FaultsAreEfaultAndCopiesAreWhole) {
  using softnic::CopyLocal;
  using softnic::Seg;
  uint8_t* m = MapPages(2, PROT_READ | PROT_WRITE);
  ASSERT_NE(m, nullptr);
  ASSERT_EQ(munmap(m + 4096, 4096), 0);
  const uint64_t ok = reinterpret_cast<uint64_t>(m), gone = ok + 4096;
#ifndef RDMASAN_SOFTNIC_VM_COPY
  // A sanitizer build's runtime owns SIGSEGV (TSan's dies in it), and its
  // softnic never copies locally with CopyLocal (access.h: Move): the
  // faults are tested in the other builds only.
  for (uint32_t len : {1u, 8u, 13u, 256u, 257u, 4000u}) {
    SCOPED_TRACE(absl::StrCat(len, " bytes"));
    Seg mapped{ok, len}, unmapped{gone, len}, tail{gone - 4, len};
    EXPECT_EQ(CopyLocal(&mapped, 1, &unmapped, 1), EFAULT);
    EXPECT_EQ(CopyLocal(&unmapped, 1, &mapped, 1), EFAULT);
    if (len > 4) {
      EXPECT_EQ(CopyLocal(&tail, 1, &mapped, 1), EFAULT) << "the range runs into the unmapped page";
    }
  }
#else
  (void)gone;
#endif
  std::vector<uint8_t> src(300), dst(300, 0);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<uint8_t>(i * 7 + 1);
  const uint64_t s = reinterpret_cast<uint64_t>(src.data()), d = reinterpret_cast<uint64_t>(dst.data());
  Seg from[2] = {{s, 5}, {s + 5, 20}}, to[3] = {{d, 11}, {d + 11, 3}, {d + 14, 11}};
  ASSERT_EQ(CopyLocal(to, 3, from, 2), 0);
  EXPECT_TRUE(std::equal(src.begin(), src.begin() + 25, dst.begin()));
  EXPECT_EQ(dst[25], 0) << "nothing past the pieces";
  // Overlapping ranges copy as memmove does.
  std::vector<uint8_t> expect(src.begin(), src.end());
  memmove(expect.data() + 3, expect.data(), 40);
  Seg a{s, 40}, b{s + 3, 40};
  ASSERT_EQ(CopyLocal(&b, 1, &a, 1), 0);
  EXPECT_EQ(src, expect);
  munmap(m, 4096);
}

// Registers one page, then unmaps it under the live MR.
class SoftnicUnmapped : public SoftnicPair {
 protected:
  void SetUp() override {
    SoftnicPair::SetUp();
    page_ = MapPages(1, PROT_READ | PROT_WRITE);
    ASSERT_NE(page_, nullptr);
    mr_gone_ = ibv_reg_mr(pd_, page_, 4096, opts_.access);
    ASSERT_NE(mr_gone_, nullptr);
    ASSERT_EQ(munmap(page_, 4096), 0);
  }
  void TearDown() override {
    if (mr_gone_) {
      EXPECT_EQ(ibv_dereg_mr(mr_gone_), 0);
    }
    SoftnicPair::TearDown();
  }
  // Posts `op` from `side` with one SGE on the unmapped page (local) or on
  // the side's buffer with the unmapped page as the remote target.
  int PostGone(int side, ibv_wr_opcode op, bool local_gone) {
    ibv_sge sge{reinterpret_cast<uint64_t>(local_gone ? page_ : buf_[side].data()), 64,
                local_gone ? mr_gone_->lkey : mr_[side]->lkey};
    ibv_send_wr wr{};
    wr.wr_id = 77;
    wr.opcode = op;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    wr.wr.rdma.remote_addr = reinterpret_cast<uint64_t>(local_gone ? buf_[1 - side].data() : page_);
    wr.wr.rdma.rkey = local_gone ? mr_[1 - side]->rkey : mr_gone_->rkey;
    ibv_send_wr* bad = nullptr;
    return ibv_post_send(qp_[side], &wr, &bad);
  }
  ibv_wc_status OneStatus(int side) {
    auto c = Poll(side, 1);
    EXPECT_EQ(c.size(), 1u);
    return c.empty() ? IBV_WC_GENERAL_ERR : c[0].status;
  }
  uint8_t* page_ = nullptr;
  ibv_mr* mr_gone_ = nullptr;
};

TEST_F(SoftnicUnmapped, SendFromUnmappedMemoryIsLocalProtectionError) {
  ASSERT_EQ(PostRecv(1, 5, 0, 128), 0);
  ASSERT_EQ(PostGone(0, IBV_WR_SEND, true), 0);
  EXPECT_EQ(OneStatus(0), IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(State(1), IBV_QPS_RTS) << "the responder never saw the message";
  EXPECT_TRUE(Poll(1, 1, 50).empty()) << "its receive WQE stays posted";
}

TEST_F(SoftnicUnmapped, WriteFromUnmappedMemoryIsLocalProtectionError) {
  ASSERT_EQ(PostGone(0, IBV_WR_RDMA_WRITE, true), 0);
  EXPECT_EQ(OneStatus(0), IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(State(1), IBV_QPS_RTS);
}

TEST_F(SoftnicUnmapped, ReadIntoUnmappedMemoryIsLocalProtectionError) {
  ASSERT_EQ(PostGone(1, IBV_WR_RDMA_READ, true), 0);
  EXPECT_EQ(OneStatus(1), IBV_WC_LOC_PROT_ERR);
  EXPECT_EQ(State(0), IBV_QPS_RTS);
}

TEST_F(SoftnicUnmapped, WriteToUnmappedRemoteIsRemoteAccessError) {
  ASSERT_EQ(PostGone(0, IBV_WR_RDMA_WRITE, false), 0);
  EXPECT_EQ(OneStatus(0), IBV_WC_REM_ACCESS_ERR);
}

TEST_F(SoftnicUnmapped, AtomicOnUnmappedRemoteIsRemoteAccessError) {
  ibv_sge sge{reinterpret_cast<uint64_t>(buf_[0].data()), 8, mr_[0]->lkey};
  ibv_send_wr wr{};
  wr.wr_id = 9;
  wr.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.sg_list = &sge;
  wr.num_sge = 1;
  wr.wr.atomic.remote_addr = reinterpret_cast<uint64_t>(page_);
  wr.wr.atomic.rkey = mr_gone_->rkey;
  wr.wr.atomic.compare_add = 1;
  ibv_send_wr* bad = nullptr;
  ASSERT_EQ(ibv_post_send(qp_[0], &wr, &bad), 0);
  EXPECT_EQ(OneStatus(0), IBV_WC_REM_ACCESS_ERR);
}

// A copy of the device that meets an unmapped page fails with EFAULT; a
// fault of the program's own still reaches the program's handler (set
// before the device's first copy), or its default action: the device's
// recovery covers only its own copies.  Each role runs in a fresh process
// (this binary, re-executed), where no device copy has run yet.
constexpr char kSafeCopyRole[] = "RDMASAN_TEST_SAFE_COPY_ROLE";

[[noreturn]] void SafeCopyRole(bool own_handler) {
  uint8_t* page = MapPages(1, PROT_READ | PROT_WRITE);
  if (!page || munmap(page, 4096) != 0) _exit(2);
  if (own_handler) {
    struct sigaction sa {};
    sa.sa_handler = [](int) { _exit(42); };
    sigaction(SIGSEGV, &sa, nullptr);
  }
  uint8_t buf[64];
  const pid_t self = getpid();
  softnic::Seg dst{reinterpret_cast<uint64_t>(buf), 64}, src{reinterpret_cast<uint64_t>(page), 64};
  if (softnic::Move(self, self, &dst, 1, self, &src, 1) != EFAULT) _exit(3);
  *reinterpret_cast<volatile uint8_t*>(page) = 1;  // the program's own fault
  _exit(4);
}

int RunSafeCopyRole(const char* role) {
  pid_t pid = fork();
  if (pid == 0) {
    setenv(kSafeCopyRole, role, 1);
    execl("/proc/self/exe", "/proc/self/exe", "--gtest_filter=SoftnicSafeCopy.*", nullptr);
    _exit(5);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return status;
}

TEST(SoftnicSafeCopy, DeviceFaultsFailTheCopyAndProgramFaultsStayThePrograms) {
#ifdef RDMASAN_SOFTNIC_VM_COPY
  GTEST_SKIP() << "sanitizer build: the sanitizer owns SIGSEGV";
#endif
  if (const char* role = getenv(kSafeCopyRole)) SafeCopyRole(std::string(role) == "handler");
  int st = RunSafeCopyRole("handler");
  EXPECT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 42) << "status " << st;
  st = RunSafeCopyRole("default");
  EXPECT_TRUE(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV) << "status " << st;
}

// ---------------------------------------------------------------- item 9 --

class SoftnicLateResponder : public SoftnicPair {
 protected:
  // Puts side 1 back in RESET: side 0 (RTS) then sends to a QP not yet in RTR.
  void SetUp() override {
    SoftnicPair::SetUp();
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RESET;
    ASSERT_EQ(ibv_modify_qp(qp_[1], &a, IBV_QP_STATE), 0);
  }
  // Side 0's transport retry: timeout 4.096 us * 2^12 = 16.8 ms, 3 tries.
  void ShortRetry() {
    ibv_qp_attr a{};
    a.timeout = 12;
    a.retry_cnt = 2;
    ASSERT_EQ(ibv_modify_qp(qp_[0], &a, IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT), 0);
  }
};

TEST_F(SoftnicLateResponder, SendWaitsUntilTheResponderReachesRtr) {
  std::memcpy(buf_[0].data(), "early", 6);
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 6), 0);
  EXPECT_TRUE(Poll(0, 1, 20).empty()) << "the responder is in RESET: the send is retried";
  std::thread peer([&] {
    std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(Connect(qp_[1], qp_[0]->qp_num), 0);
    EXPECT_EQ(PostRecv(1, 2, 0, 64), 0);
  });
  auto c = Poll(0, 1);
  peer.join();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  auto r = Poll(1, 1);
  ASSERT_EQ(r.size(), 1u);
  EXPECT_EQ(r[0].status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "early");
}

TEST_F(SoftnicLateResponder, RdmaWriteWaitsUntilTheResponderReachesRtr) {
  std::memcpy(buf_[0].data(), "write", 6);
  ASSERT_EQ(Post(0, IBV_WR_RDMA_WRITE, 1, 0, 6), 0);
  std::thread peer([&] {
    std::this_thread::sleep_for(milliseconds(10));
    EXPECT_EQ(Connect(qp_[1], qp_[0]->qp_num), 0);
  });
  auto c = Poll(0, 1);
  peer.join();
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_SUCCESS);
  EXPECT_STREQ(reinterpret_cast<char*>(buf_[1].data()), "write");
}

TEST_F(SoftnicLateResponder, RetryExceededOnlyAfterTheRetryTime) {
  ShortRetry();
  auto t0 = steady_clock::now();
  ASSERT_EQ(Post(0, IBV_WR_SEND, 1, 0, 8), 0);
  auto c = Poll(0, 1);
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].status, IBV_WC_RETRY_EXC_ERR);
  // 3 tries of 16.8 ms: the error may come later, never sooner.
  EXPECT_GE(steady_clock::now() - t0, milliseconds(50));
}

// --------------------------------------------------------------- item 12 --

// The abstract name a socket is bound to (without the leading NUL).
std::string BoundName(int fd) {
  sockaddr_un sa{};
  socklen_t len = sizeof(sa);
  if (getsockname(fd, reinterpret_cast<sockaddr*>(&sa), &len) != 0) return {};
  size_t n = len - offsetof(sockaddr_un, sun_path);
  return n > 1 ? std::string(sa.sun_path + 1, n - 1) : std::string();
}

int SendTo(int fd, const std::string& name, const void* msg, size_t len) {
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, name.data(), std::min(name.size(), sizeof(sa.sun_path) - 2));
  socklen_t alen = offsetof(sockaddr_un, sun_path) + 1 + std::min(name.size(), sizeof(sa.sun_path) - 2);
  return sendto(fd, msg, len, 0, reinterpret_cast<sockaddr*>(&sa), alen) == static_cast<ssize_t>(len) ? 0
                                                                                                      : -1;
}

// Binds `name` in the abstract namespace, as another user squatting it would.
int Squat(const std::string& name) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  std::memcpy(sa.sun_path + 1, name.data(), std::min(name.size(), sizeof(sa.sun_path) - 2));
  socklen_t alen = offsetof(sockaddr_un, sun_path) + 1 + std::min(name.size(), sizeof(sa.sun_path) - 2);
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), alen) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// Every name the next context or channel could get by counting
// generations (what a squatter predicts), for the first slots.
TEST(SoftnicEventSockets, SquattedPredictableNamesDoNotDenyTheDevice) {
  ibv_context* first = OpenSoftnic();  // attaches the fabric
  ASSERT_NE(first, nullptr);
  softnic::Process* p = softnic::GetProcess();
  ASSERT_NE(p, nullptr);
  const std::string prefix = absl::StrCat("rdmasan-", getuid(), "-", softnic::FabricName());
  std::vector<int> squats;
  for (uint32_t slot = 0; slot < 4; ++slot) {
    const uint32_t ctx_gen = p->fab->hdr()->ctxs[slot].gen, ch_gen = p->fab->hdr()->channels[slot].gen;
    for (uint32_t k = 0; k <= 4; ++k) {
      squats.push_back(Squat(absl::StrCat(prefix, "-as-", slot, "-", ctx_gen + k)));
      squats.push_back(Squat(absl::StrCat(prefix, "-ch-", slot, "-", ch_gen + k)));
    }
  }
  ibv_context* ctx = OpenSoftnic();
  EXPECT_NE(ctx, nullptr) << "ibv_open_device: " << strerror(errno);
  ibv_comp_channel* ch = ctx ? ibv_create_comp_channel(ctx) : nullptr;
  EXPECT_NE(ch, nullptr) << "ibv_create_comp_channel: " << strerror(errno);
  if (ch) {
    EXPECT_EQ(ibv_destroy_comp_channel(ch), 0);
  }
  if (ctx) {
    EXPECT_EQ(ibv_close_device(ctx), 0);
  }
  for (int fd : squats)
    if (fd >= 0) close(fd);
  EXPECT_EQ(ibv_close_device(first), 0);
}

// Sends `msg` to each name from a child process running as another user;
// the child's exit status: 0 sent, 2 cannot switch user, 1 send failed.
int SendAsOtherUser(const std::vector<std::string>& names, const std::vector<std::vector<uint8_t>>& msgs) {
  pid_t pid = fork();
  if (pid == 0) {
    constexpr uid_t kOther = 54321;
    if (setresgid(kOther, kOther, kOther) != 0 || setresuid(kOther, kOther, kOther) != 0) _exit(2);
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    for (size_t i = 0; i < names.size(); ++i)
      if (SendTo(fd, names[i], msgs[i].data(), msgs[i].size()) != 0) _exit(1);
    _exit(0);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid || !WIFEXITED(status)) return 1;
  return WEXITSTATUS(status);
}

template <typename T>
std::vector<uint8_t> Bytes(const T& v) {
  const auto* b = reinterpret_cast<const uint8_t*>(&v);
  return std::vector<uint8_t>(b, b + sizeof(v));
}

// Another user forges a DEVICE_FATAL async event and a completion-channel
// wake-up; neither may reach the application.  The same datagrams from
// our own user do (the forgery is well-formed; only its sender is wrong).
TEST_F(SoftnicPair, EventsFromAnotherUserAreDropped) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to send as another user";
  const std::string async_name = BoundName(ctx_->async_fd), ch_name = BoundName(channel_->fd);
  ASSERT_FALSE(async_name.empty());
  ASSERT_FALSE(ch_name.empty());
  const uint32_t fatal[4] = {IBV_EVENT_DEVICE_FATAL, 0, 0, 0};
  const uint32_t wake[2] = {softnic::Cq(cq_[0])->slot, softnic::Cq(cq_[0])->shm->gen};
  const std::vector<std::string> names = {async_name, ch_name};
  const std::vector<std::vector<uint8_t>> msgs = {Bytes(fatal), Bytes(wake)};
  int rc = SendAsOtherUser(names, msgs);
  if (rc == 2) GTEST_SKIP() << "cannot switch to another uid here";
  ASSERT_EQ(rc, 0) << "the forger's datagrams were not sent";
  ASSERT_EQ(fcntl(ctx_->async_fd, F_SETFL, O_NONBLOCK), 0);
  ASSERT_EQ(fcntl(channel_->fd, F_SETFL, O_NONBLOCK), 0);
  ibv_async_event ev{};
  EXPECT_EQ(ibv_get_async_event(ctx_, &ev), -1) << "forged event type " << ev.event_type;
  ibv_cq* cq = nullptr;
  void* cq_ctx = nullptr;
  EXPECT_EQ(ibv_get_cq_event(channel_, &cq, &cq_ctx), -1) << "a forged wake-up completed ibv_get_cq_event";
  if (cq) ibv_ack_cq_events(cq, 1);

  int own = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  ASSERT_EQ(SendTo(own, async_name, fatal, sizeof(fatal)), 0);
  ASSERT_EQ(SendTo(own, ch_name, wake, sizeof(wake)), 0);
  close(own);
  ASSERT_EQ(ibv_get_async_event(ctx_, &ev), 0);
  EXPECT_EQ(ev.event_type, IBV_EVENT_DEVICE_FATAL);
  ibv_ack_async_event(&ev);
  ASSERT_EQ(ibv_get_cq_event(channel_, &cq, &cq_ctx), 0);
  EXPECT_EQ(cq, cq_[0]);
  ibv_ack_cq_events(cq, 1);
}

// ------------------------------------------------ device attributes (14) --

// What rdma-core's own tests (tests/test_device.py) assert of any device:
// a vendor id that is not 0 (softnic's is one no tool takes a vendor path
// for, softnic.h), a GUID that starts with it, and phys_port_cnt_ex equal
// to phys_port_cnt.
TEST(SoftnicAttributes, VendorIdIsNonZeroAndGeneric) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr a{};
  ASSERT_EQ(ibv_query_device(ctx, &a), 0);
  EXPECT_EQ(a.vendor_id, softnic::kVendorId);
  EXPECT_NE(a.vendor_id, 0u);
  for (uint32_t taken : {0x02c9u, 0x15b3u, 0x8086u, 0x1d0fu, 0xffffffu}) EXPECT_NE(a.vendor_id, taken);
  EXPECT_EQ(a.vendor_part_id, softnic::kVendorPartId);
  EXPECT_EQ(be64toh(a.node_guid) >> 40, softnic::kVendorId) << "the GUID starts with the vendor's OUI";
  EXPECT_EQ(a.sys_image_guid, a.node_guid);
  ibv_gid gid;
  ASSERT_EQ(ibv_query_gid(ctx, 1, 0, &gid), 0);
  EXPECT_EQ(gid.global.interface_id, a.node_guid);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

TEST(SoftnicAttributes, QueryDeviceExCountsThePort) {
  ibv_context* ctx = OpenSoftnic();
  ASSERT_NE(ctx, nullptr);
  ibv_device_attr_ex x{};
  ASSERT_EQ(ibv_query_device_ex(ctx, nullptr, &x), 0);
  EXPECT_EQ(x.orig_attr.phys_port_cnt, 1);
  EXPECT_EQ(x.phys_port_cnt_ex, 1u);
  EXPECT_EQ(x.orig_attr.vendor_id, softnic::kVendorId);
  EXPECT_EQ(ibv_close_device(ctx), 0);
}

// IBV_QP_INIT_ATTR_CREATE_FLAGS with create_flags 0 is a plain QP; any
// flag is EOPNOTSUPP (rxe supports none either).
TEST_F(SoftnicPair, CreateQpExTakesZeroCreateFlagsAndRefusesOthers) {
  ibv_qp_init_attr_ex qa{};
  qa.qp_type = IBV_QPT_RC;
  qa.send_cq = qa.recv_cq = cq_[0];
  qa.cap.max_send_wr = qa.cap.max_recv_wr = 4;
  qa.cap.max_send_sge = qa.cap.max_recv_sge = 1;
  qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS;
  qa.pd = pd_;
  qa.create_flags = 0;
  ibv_qp* qp = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  EXPECT_EQ(qp->qp_type, IBV_QPT_RC);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  qa.comp_mask |= IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  qa.send_ops_flags = IBV_QP_EX_WITH_SEND;
  qp = ibv_create_qp_ex(ctx_, &qa);
  ASSERT_NE(qp, nullptr) << strerror(errno);
  EXPECT_EQ(ibv_destroy_qp(qp), 0);
  for (uint32_t flag : {uint32_t{IBV_QP_CREATE_BLOCK_SELF_MCAST_LB}, uint32_t{IBV_QP_CREATE_SCATTER_FCS},
                        uint32_t{IBV_QP_CREATE_CVLAN_STRIPPING}, uint32_t{IBV_QP_CREATE_SOURCE_QPN},
                        uint32_t{IBV_QP_CREATE_PCI_WRITE_END_PADDING}}) {
    qa.create_flags = flag;
    errno = 0;
    EXPECT_EQ(ibv_create_qp_ex(ctx_, &qa), nullptr) << flag;
    EXPECT_EQ(errno, EOPNOTSUPP) << flag;
  }
}

}  // namespace
}  // namespace rdmasan::testing
