// softnic's rdma_cm device (softnic/cm.h) driven by hand-built commands of
// the kernel's ABI: what librdmacm would never send gets the kernel's
// errors and changes nothing; datagrams that are not a softnic CM's are
// dropped unread; a channel is a pollable fd whose events come in order.
#include "softnic/cm.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <pthread.h>
#include <rdma/rdma_user_cm.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <string>
#include <thread>

#include "core/options.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic::cm {
namespace {

// A command as librdmacm lays it out: the header, then the kernel's struct.
template <typename T>
struct Cmd {
  rdma_ucm_cmd_hdr hdr;
  T body;
};

template <typename T>
Cmd<T> Make(uint32_t op, uint16_t out = 0) {
  Cmd<T> c;
  memset(&c, 0, sizeof(c));
  c.hdr.cmd = op;
  c.hdr.in = sizeof(T);
  c.hdr.out = out;
  return c;
}

class SoftnicCm : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = Open(O_RDWR | O_CLOEXEC | O_NONBLOCK);
    ASSERT_GE(fd_, 0) << strerror(errno);
    ASSERT_TRUE(IsChannel(fd_));
  }
  void TearDown() override {
    if (fd_ >= 0) {
      Close(fd_);
      close(fd_);
    }
  }

  uint32_t CreateId(uint16_t ps = RDMA_PS_TCP, uint8_t qp_type = 2 /* IBV_QPT_RC */) {
    rdma_ucm_create_id_resp resp{};
    auto c = Make<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, sizeof(resp));
    c.body.uid = 0x1234;
    c.body.response = reinterpret_cast<uintptr_t>(&resp);
    c.body.ps = ps;
    c.body.qp_type = qp_type;
    EXPECT_EQ(Write(fd_, &c, sizeof(c)), static_cast<ssize_t>(sizeof(c))) << strerror(errno);
    return resp.id;
  }

  // GET_EVENT on the nonblocking channel: the command's result and errno.
  ssize_t GetEvent(rdma_ucm_event_resp* ev) {
    auto c = Make<rdma_ucm_get_event>(RDMA_USER_CM_CMD_GET_EVENT, sizeof(*ev));
    c.body.response = reinterpret_cast<uintptr_t>(ev);
    return Write(fd_, &c, sizeof(c));
  }

  // RESOLVE_IP of `id` to 127.0.0.1:`port`: whether the command was taken.
  bool ResolveToLoopback(uint32_t id, uint16_t port) {
    auto r = Make<rdma_ucm_resolve_ip>(RDMA_USER_CM_CMD_RESOLVE_IP);
    r.body.id = id;
    auto* dst = reinterpret_cast<sockaddr_in*>(&r.body.dst_addr);
    dst->sin_family = AF_INET;
    dst->sin_port = htons(port);
    dst->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return Write(fd_, &r, sizeof(r)) == static_cast<ssize_t>(sizeof(r));
  }

  // DESTROY_ID of `id`: the events reported on it (the command's response).
  uint32_t DestroyId(uint32_t id) {
    rdma_ucm_destroy_id_resp resp{};
    auto c = Make<rdma_ucm_destroy_id>(RDMA_USER_CM_CMD_DESTROY_ID, sizeof(resp));
    c.body.id = id;
    c.body.response = reinterpret_cast<uintptr_t>(&resp);
    EXPECT_EQ(Write(fd_, &c, sizeof(c)), static_cast<ssize_t>(sizeof(c))) << strerror(errno);
    return resp.events_reported;
  }

  // The next event within `limit`, polling the nonblocking channel: a
  // wake with nothing to deliver (a waiting connect's tick) reads EAGAIN.
  bool NextEvent(rdma_ucm_event_resp* ev, std::chrono::milliseconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    while (std::chrono::steady_clock::now() < end) {
      if (GetEvent(ev) > 0) return true;
      if (errno != EAGAIN) return false;
      pollfd p{fd_, POLLIN, 0};
      poll(&p, 1, 100);
    }
    return false;
  }

  int fd_ = -1;
};

TEST_F(SoftnicCm, MalformedCommandsGetTheKernelsErrors) {
  uint32_t four = RDMA_USER_CM_CMD_CREATE_ID;
  errno = 0;
  EXPECT_EQ(Write(fd_, &four, sizeof(four)), -1);  // shorter than a header
  EXPECT_EQ(errno, EINVAL);

  auto c = Make<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, sizeof(rdma_ucm_create_id_resp));
  c.hdr.in = 200;  // says more than was written
  EXPECT_EQ(Write(fd_, &c, sizeof(c)), -1);
  EXPECT_EQ(errno, EINVAL);

  auto unknown = Make<rdma_ucm_destroy_id>(999);
  EXPECT_EQ(Write(fd_, &unknown, sizeof(unknown)), -1);
  EXPECT_EQ(errno, EINVAL);

  rdma_ucm_destroy_id_resp dresp{};
  auto destroy = Make<rdma_ucm_destroy_id>(RDMA_USER_CM_CMD_DESTROY_ID, sizeof(dresp));
  destroy.body.id = 4242;  // no such id
  destroy.body.response = reinterpret_cast<uintptr_t>(&dresp);
  EXPECT_EQ(Write(fd_, &destroy, sizeof(destroy)), -1);
  EXPECT_EQ(errno, EINVAL);

  rdma_ucm_create_id_resp resp{};
  auto bad_ps = Make<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, sizeof(resp));
  bad_ps.body.response = reinterpret_cast<uintptr_t>(&resp);
  bad_ps.body.ps = 0x7777;
  EXPECT_EQ(Write(fd_, &bad_ps, sizeof(bad_ps)), -1);
  EXPECT_EQ(errno, EINVAL);

  auto no_room = Make<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, 2);
  no_room.body.response = reinterpret_cast<uintptr_t>(&resp);
  no_room.body.ps = RDMA_PS_TCP;
  EXPECT_EQ(Write(fd_, &no_room, sizeof(no_room)), -1);
  EXPECT_EQ(errno, ENOSPC);

  // A response buffer that cannot be written: EFAULT, as copy_to_user
  // gives.  PROT_NONE, not unmapped: an unmapped page may be mapped again by
  // anyone (a sanitizer's allocator) before the command runs.
  void* gone = mmap(nullptr, 4096, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  ASSERT_NE(gone, MAP_FAILED);
  auto faulting = Make<rdma_ucm_create_id>(RDMA_USER_CM_CMD_CREATE_ID, sizeof(resp));
  faulting.body.response = reinterpret_cast<uintptr_t>(gone);
  faulting.body.ps = RDMA_PS_TCP;
  faulting.body.qp_type = 2;
  EXPECT_EQ(Write(fd_, &faulting, sizeof(faulting)), -1);
  EXPECT_EQ(errno, EFAULT);
  munmap(gone, 4096);

  // A join with no room for its answer; one of no id.
  auto join = Make<rdma_ucm_join_mcast>(RDMA_USER_CM_CMD_JOIN_MCAST);
  EXPECT_EQ(Write(fd_, &join, sizeof(join)), -1);
  EXPECT_EQ(errno, ENOSPC);
  join.hdr.out = sizeof(rdma_ucm_create_id_resp);
  join.body.response = reinterpret_cast<uintptr_t>(&resp);
  join.body.id = 4242;
  EXPECT_EQ(Write(fd_, &join, sizeof(join)), -1);
  EXPECT_EQ(errno, EINVAL);

  // None of it left an event behind.
  rdma_ucm_event_resp ev;
  EXPECT_EQ(GetEvent(&ev), -1);
  EXPECT_EQ(errno, EAGAIN);
}

TEST_F(SoftnicCm, ResolveGivesAnEventOnAPollableFd) {
  const uint32_t id = CreateId();
  pollfd p{fd_, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "nothing pending yet";

  ASSERT_TRUE(ResolveToLoopback(id, 20123)) << strerror(errno);
  EXPECT_EQ(poll(&p, 1, 1000), 1);
  EXPECT_TRUE(p.revents & POLLIN);

  rdma_ucm_event_resp ev{};
  ASSERT_GT(GetEvent(&ev), 0) << strerror(errno);
  EXPECT_EQ(ev.uid, 0x1234u);
  EXPECT_EQ(ev.id, id);
  EXPECT_EQ(ev.event, 0u);  // RDMA_CM_EVENT_ADDR_RESOLVED
  EXPECT_EQ(ev.status, 0u);
  EXPECT_EQ(poll(&p, 1, 0), 0) << "the one event was taken";

  // The route, then a connect nobody listens for: rejected, reason 8.
  auto route = Make<rdma_ucm_resolve_route>(RDMA_USER_CM_CMD_RESOLVE_ROUTE);
  route.body.id = id;
  ASSERT_EQ(Write(fd_, &route, sizeof(route)), static_cast<ssize_t>(sizeof(route)));
  ASSERT_GT(GetEvent(&ev), 0);
  EXPECT_EQ(ev.event, 2u);  // ROUTE_RESOLVED
  auto conn = Make<rdma_ucm_connect>(RDMA_USER_CM_CMD_CONNECT);
  conn.body.id = id;
  conn.body.conn_param.private_data_len = 57;  // one past what a REQ of an IP port space holds
  EXPECT_EQ(Write(fd_, &conn, sizeof(conn)), -1);
  EXPECT_EQ(errno, EINVAL);
  conn.body.conn_param.private_data_len = 56;
  // The REQ waits softnic_cm_listen_wait for a listener (cm_state.h), the
  // channel's timer waking a poll meanwhile; then the REJ.
  const auto start = std::chrono::steady_clock::now();
  ASSERT_EQ(Write(fd_, &conn, sizeof(conn)), static_cast<ssize_t>(sizeof(conn)));
  EXPECT_EQ(poll(&p, 1, 1000), 1) << "the wait's timer wakes a poll";
  ASSERT_TRUE(NextEvent(&ev, std::chrono::seconds(10)));
  EXPECT_GE(std::chrono::steady_clock::now() - start,
            std::chrono::milliseconds(core::GlobalOptions().softnic_cm_listen_wait));
  EXPECT_EQ(ev.event, 8u);  // REJECTED
  EXPECT_EQ(ev.status, 8u);
  EXPECT_EQ(poll(&p, 1, 20), 0) << "the timer stops when nothing waits";

  EXPECT_EQ(DestroyId(id), 3u) << "the events reported on the id";
}

TEST_F(SoftnicCm, AConnectThatWaitsAndIsDestroyedStopsTheTimer) {
  // A connect nobody listens for (port 20124), destroyed while it waits:
  // no event for it, and the channel's timer stops (no wake of a poll).
  const uint32_t id = CreateId();
  ASSERT_TRUE(ResolveToLoopback(id, 20124)) << strerror(errno);
  rdma_ucm_event_resp ev{};
  ASSERT_GT(GetEvent(&ev), 0) << strerror(errno);
  auto route = Make<rdma_ucm_resolve_route>(RDMA_USER_CM_CMD_RESOLVE_ROUTE);
  route.body.id = id;
  ASSERT_EQ(Write(fd_, &route, sizeof(route)), static_cast<ssize_t>(sizeof(route)));
  ASSERT_GT(GetEvent(&ev), 0);
  auto conn = Make<rdma_ucm_connect>(RDMA_USER_CM_CMD_CONNECT);
  conn.body.id = id;
  ASSERT_EQ(Write(fd_, &conn, sizeof(conn)), static_cast<ssize_t>(sizeof(conn)));
  pollfd p{fd_, POLLIN, 0};
  ASSERT_EQ(poll(&p, 1, 1000), 1) << "the wait's timer wakes a poll";
  EXPECT_EQ(GetEvent(&ev), -1) << "a tick, no event yet";
  EXPECT_EQ(errno, EAGAIN);

  EXPECT_EQ(DestroyId(id), 2u) << "the events reported on the id";
  EXPECT_EQ(poll(&p, 1, 50), 0) << "the timer stopped with the last waiting id";
}

// Multicast: a UD id resolved toward a group joins it; the join event
// carries the join's uid and handle (not the id's), the group's address
// vector (the MGID the kernel maps an IPv4 group to, a multicast LID, a
// GRH), QPN 0xFFFFFF and the UDP port space's Q_Key; it counts for the
// join (LEAVE_MCAST's answer), not for the id (DESTROY_ID's).
TEST_F(SoftnicCm, MulticastJoinAndLeave) {
  const uint32_t id = CreateId(RDMA_PS_UDP, 4 /* IBV_QPT_UD */);
  rdma_ucm_create_id_resp jresp{};
  auto join = Make<rdma_ucm_join_ip_mcast>(RDMA_USER_CM_CMD_JOIN_IP_MCAST, sizeof(jresp));
  join.body.id = id;
  join.body.uid = 0x5678;
  join.body.response = reinterpret_cast<uintptr_t>(&jresp);
  auto* group = reinterpret_cast<sockaddr_in*>(&join.body.addr);
  group->sin_family = AF_INET;
  group->sin_addr.s_addr = inet_addr("230.1.2.3");
  EXPECT_EQ(Write(fd_, &join, sizeof(join)), -1) << "not on the device yet";
  EXPECT_EQ(errno, EINVAL);

  auto r = Make<rdma_ucm_resolve_ip>(RDMA_USER_CM_CMD_RESOLVE_IP);
  r.body.id = id;
  reinterpret_cast<sockaddr_in*>(&r.body.src_addr)->sin_family = AF_INET;
  reinterpret_cast<sockaddr_in*>(&r.body.src_addr)->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  memcpy(&r.body.dst_addr, group, sizeof(*group));
  ASSERT_EQ(Write(fd_, &r, sizeof(r)), static_cast<ssize_t>(sizeof(r))) << strerror(errno);
  rdma_ucm_event_resp ev{};
  ASSERT_GT(GetEvent(&ev), 0) << strerror(errno);
  EXPECT_EQ(ev.event, 0u);  // ADDR_RESOLVED: a group is reachable
  EXPECT_EQ(ev.status, 0u);

  ASSERT_EQ(Write(fd_, &join, sizeof(join)), static_cast<ssize_t>(sizeof(join))) << strerror(errno);
  const uint32_t mc = jresp.id;
  EXPECT_NE(mc, id);
  ASSERT_GT(GetEvent(&ev), 0) << strerror(errno);
  EXPECT_EQ(ev.event, 12u);  // MULTICAST_JOIN
  EXPECT_EQ(ev.status, 0u);
  EXPECT_EQ(ev.uid, 0x5678u);
  EXPECT_EQ(ev.id, mc);
  EXPECT_EQ(ev.param.ud.qp_num, 0xffffffu);
  EXPECT_EQ(ev.param.ud.qkey, 0x01234567u);
  EXPECT_EQ(ev.param.ud.ah_attr.is_global, 1);
  EXPECT_EQ(ev.param.ud.ah_attr.port_num, 1);
  const uint8_t mgid[16] = {0xff, 0x12, 0x40, 0x01, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 230, 1, 2, 3};
  EXPECT_EQ(memcmp(ev.param.ud.ah_attr.grh.dgid, mgid, 16), 0);
  const uint16_t mlid = ev.param.ud.ah_attr.dlid;
  EXPECT_GE(mlid, 0xc000);
  EXPECT_LE(mlid, 0xfffe);

  // A send-only join (rdma_join_multicast_ex) of an IPv6 group; flags
  // past send-only are EINVAL.  Left before its event is read: the event
  // goes, and none was reported on it.
  rdma_ucm_create_id_resp jresp6{};
  auto join6 = Make<rdma_ucm_join_mcast>(RDMA_USER_CM_CMD_JOIN_MCAST, sizeof(jresp6));
  join6.body.id = id;
  join6.body.uid = 0x9abc;
  join6.body.response = reinterpret_cast<uintptr_t>(&jresp6);
  join6.body.addr_size = sizeof(sockaddr_in6);
  auto* g6 = reinterpret_cast<sockaddr_in6*>(&join6.body.addr);
  g6->sin6_family = AF_INET6;
  ASSERT_EQ(inet_pton(AF_INET6, "ff0e::1234", &g6->sin6_addr), 1);
  join6.body.join_flags = 2;  // RDMA_MC_JOIN_FLAG_RESERVED
  EXPECT_EQ(Write(fd_, &join6, sizeof(join6)), -1);
  EXPECT_EQ(errno, EINVAL);
  join6.body.join_flags = 1;  // RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER
  ASSERT_EQ(Write(fd_, &join6, sizeof(join6)), static_cast<ssize_t>(sizeof(join6))) << strerror(errno);
  rdma_ucm_destroy_id_resp lresp{};
  auto leave = Make<rdma_ucm_destroy_id>(RDMA_USER_CM_CMD_LEAVE_MCAST, sizeof(lresp));
  leave.body.id = jresp6.id;
  leave.body.response = reinterpret_cast<uintptr_t>(&lresp);
  lresp.events_reported = 99;
  ASSERT_EQ(Write(fd_, &leave, sizeof(leave)), static_cast<ssize_t>(sizeof(leave))) << strerror(errno);
  EXPECT_EQ(lresp.events_reported, 0u);
  pollfd p{fd_, POLLIN, 0};
  EXPECT_EQ(poll(&p, 1, 0), 0) << "the left join's event went with it";

  // The same group joined by another id: the same MGID and LID.
  const uint32_t id2 = CreateId(RDMA_PS_UDP, 4);
  r.body.id = id2;
  ASSERT_EQ(Write(fd_, &r, sizeof(r)), static_cast<ssize_t>(sizeof(r)));
  ASSERT_GT(GetEvent(&ev), 0);
  join.body.id = id2;
  ASSERT_EQ(Write(fd_, &join, sizeof(join)), static_cast<ssize_t>(sizeof(join)));
  ASSERT_GT(GetEvent(&ev), 0);
  EXPECT_EQ(ev.event, 12u);
  EXPECT_EQ(memcmp(ev.param.ud.ah_attr.grh.dgid, mgid, 16), 0);
  EXPECT_EQ(ev.param.ud.ah_attr.dlid, mlid);

  // Leaving: the events reported on the join; twice: ENOENT.
  leave.body.id = mc;
  ASSERT_EQ(Write(fd_, &leave, sizeof(leave)), static_cast<ssize_t>(sizeof(leave))) << strerror(errno);
  EXPECT_EQ(lresp.events_reported, 1u);
  EXPECT_EQ(Write(fd_, &leave, sizeof(leave)), -1);
  EXPECT_EQ(errno, ENOENT);

  // A connected port space's id cannot join.
  const uint32_t rc = CreateId(RDMA_PS_TCP, 2);
  r.body.id = rc;
  ASSERT_EQ(Write(fd_, &r, sizeof(r)), static_cast<ssize_t>(sizeof(r)));
  ASSERT_GT(GetEvent(&ev), 0);
  join.body.id = rc;
  EXPECT_EQ(Write(fd_, &join, sizeof(join)), -1);
  EXPECT_EQ(errno, EINVAL);

  // The id's own count: ADDR_RESOLVED only, not the join's event.
  EXPECT_EQ(DestroyId(id), 1u) << "the events reported on the id";
}

TEST_F(SoftnicCm, DatagramsThatAreNotACmsAreDroppedUnread) {
  // Find this channel's inbox among the fabric folder's names.
  const std::string fabric = core::GlobalOptions().softnic_fabric == "inproc"
                                 ? "inproc-" + std::to_string(getpid())
                                 : core::GlobalOptions().softnic_fabric;
  std::string base;
  ASSERT_TRUE(UserPrivateDir(&base));
  std::string folder;
  if (DIR* d = opendir(base.c_str())) {
    while (const dirent* e = readdir(d)) {
      const std::string n = e->d_name;
      if (n == "cm-" + fabric) folder = base + "/" + n;
    }
    closedir(d);
  }
  ASSERT_FALSE(folder.empty());
  const std::string prefix = std::to_string(getpid()) + ".";
  int out = socket(AF_UNIX, SOCK_DGRAM, 0);
  ASSERT_GE(out, 0);
  int sent = 0;
  if (DIR* d = opendir(folder.c_str())) {
    while (const dirent* e = readdir(d)) {
      if (std::string(e->d_name).rfind(prefix, 0) != 0) continue;
      sockaddr_un sa{};
      sa.sun_family = AF_UNIX;
      const std::string path = folder + "/" + e->d_name;
      if (path.size() >= sizeof(sa.sun_path)) continue;
      memcpy(sa.sun_path, path.c_str(), path.size() + 1);
      char junk[600];
      memset(junk, 0xa5, sizeof(junk));
      for (size_t len : {size_t{1}, size_t{64}, sizeof(junk)})
        if (sendto(out, junk, len, 0, reinterpret_cast<sockaddr*>(&sa), sizeof(sa)) ==
            static_cast<ssize_t>(len))
          ++sent;
    }
    closedir(d);
  }
  close(out);
  ASSERT_GT(sent, 0);
  rdma_ucm_event_resp ev;
  EXPECT_EQ(GetEvent(&ev), -1);
  EXPECT_EQ(errno, EAGAIN) << "forged datagrams produce no event";
  // The channel still works.
  const uint32_t id = CreateId(RDMA_PS_UDP, 4 /* IBV_QPT_UD */);
  EXPECT_NE(id, 0u);
}

TEST_F(SoftnicCm, CloseForgetsTheChannel) {
  CreateId();
  const int fd = fd_;
  Close(fd);
  EXPECT_FALSE(IsChannel(fd));
  close(fd);
  fd_ = -1;
}

// A GET_EVENT that found a channel at its call's entry and the channel
// closed before it looked (a CM thread's read while main destroys the
// channel, as rping's teardown does) waits as the kernel's call does, for
// events that no longer come, until a signal ends it: never EBADF, which
// made rping's CM thread exit(-1) under the program's normal exit.
void NoteSignal(int) {}
TEST_F(SoftnicCm, GetEventOnAChannelClosedUnderTheCallWaitsAsTheKernelsDoes) {
  const int fd = Open(O_RDWR | O_CLOEXEC);  // blocking
  ASSERT_GE(fd, 0) << strerror(errno);
  Close(fd);
  close(fd);
  std::atomic<bool> done{false};
  ssize_t got = 0;
  int err = 0;
  std::thread reader([&] {
    rdma_ucm_event_resp ev{};
    auto c = Make<rdma_ucm_get_event>(RDMA_USER_CM_CMD_GET_EVENT, sizeof(ev));
    c.body.response = reinterpret_cast<uintptr_t>(&ev);
    got = Write(fd, &c, sizeof(c));
    err = errno;
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_FALSE(done.load()) << "returned " << got << ", " << strerror(err);
  struct sigaction sa {
  }, old{};
  sa.sa_handler = NoteSignal;  // no SA_RESTART: the wait ends with EINTR
  ASSERT_EQ(sigaction(SIGUSR2, &sa, &old), 0);
  for (int i = 0; i < 500 && !done.load(); ++i) {  // until it has left its wait
    pthread_kill(reader.native_handle(), SIGUSR2);
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  reader.join();
  sigaction(SIGUSR2, &old, nullptr);
  EXPECT_EQ(got, -1);
  EXPECT_EQ(err, EINTR);
}

}  // namespace
}  // namespace rdmasan::softnic::cm
