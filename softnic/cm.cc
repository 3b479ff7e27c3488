// softnic/cm: the rdma_ucm commands and the connection state machine.  See
// cm.h for what it does; cm_wire.h for the messages and names.
//
// Every id lives in this process's table under one lock.  A command runs
// under the lock and collects the messages it must send; they leave after
// the lock is dropped (a send may wait for a full inbox), and a send that
// fails turns into the event the kernel would give (UNREACHABLE for a
// connect, DISCONNECTED for a disconnect).  GET_EVENT delivers the
// channel's queued events first, then reads its inbox (without the lock),
// turns each message into state and events, and blocks in epoll_wait only
// when the channel is blocking and both are empty.
#include "softnic/cm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <infiniband/verbs.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "core/options.h"
#include "softnic/access.h"
#include "softnic/cm_wire.h"
#include "softnic/internal.h"
#include "softnic/interrupt.h"
#include "softnic/leftovers.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic::cm {

std::atomic<int> g_open_channels{0};

namespace {

// enum rdma_cm_event_type of <rdma/rdma_cma.h> (librdmacm's ABI with the
// kernel; that header cannot be included beside the kernel's).
enum : uint32_t {
  kEvAddrResolved = 0,
  kEvAddrError = 1,
  kEvRouteResolved = 2,
  kEvRouteError = 3,
  kEvConnectRequest = 4,
  kEvConnectResponse = 5,
  kEvUnreachable = 7,
  kEvRejected = 8,
  kEvEstablished = 9,
  kEvDisconnected = 10,
  kEvMulticastJoin = 12,
};
constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
// IB CM reject reasons and SIDR statuses the kernel reports.
constexpr uint8_t kRejInvalidServiceId = 8;
constexpr uint8_t kRejConsumer = 28;
constexpr uint8_t kSidrReject = 1;
constexpr uint8_t kSidrUnsupported = 2;
// Private data room in each IB CM message, less the 36-byte rdma_cm header
// of the IP port spaces (what the kernel lets a user send and reports).
constexpr int kCmaHeader = 36;
constexpr int kReqRoom = 92, kRepRoom = 196, kRejRoom = 148, kSidrReqRoom = 216, kSidrRepRoom = 136;
constexpr uint32_t kInvalidIndex = 0xffffffffu;

enum class St : uint8_t {
  kIdle,
  kAddrResolved,
  kRouteResolved,
  kListen,
  kConnect,  // REQ (or SIDR REQ) sent
  kReqRcvd,  // born of a REQ, not yet accepted
  kRepSent,  // accepted, waiting for RTU
  kRepRcvd,  // REP in, RTU not yet sent (librdmacm sends it as ACCEPT)
  kEstablished,
  kDreqSent,
  kDisconnected,
};

struct Event {
  uint32_t owner;  // the id whose uid it carries and whose count it raises
  uint32_t mc;     // a multicast event: the join's handle (its uid and count instead)
  rdma_ucm_event_resp resp;
};

// A multicast join of an id (JOIN_MCAST, JOIN_IP_MCAST): the group its
// address maps to, and the events reported on it (LEAVE_MCAST's answer).
struct Join {
  uint32_t handle = 0;
  uint64_t uid = 0;
  ibv_gid mgid{};
  uint16_t mlid = 0;
  uint16_t flags = 0;  // RDMA_MC_JOIN_FLAG_*
  uint32_t events_reported = 0;
};

struct Chan {
  int fd = -1;     // the epoll fd the program holds
  int inbox = -1;  // unix datagram socket: other processes' messages
  int efd = -1;    // eventfd: one count per queued event
  std::string name;
  std::deque<Event> events;
};

struct Id {
  uint32_t handle = 0;
  uint64_t uid = 0;
  int chan = -1;
  uint16_t ps = 0;
  uint8_t qp_type = IBV_QPT_RC;
  St st = St::kIdle;
  sockaddr_in6 src{};  // AF_INET or AF_INET6 inside
  sockaddr_in6 dst{};
  bool on_device = false;  // bound to softnic0 (a specific address, or resolved)
  bool route = false;
  uint16_t port = 0;  // host order; 0: unbound
  int port_fd = -1;
  int backlog = 0;
  uint32_t listener = 0;  // for an id born of a REQ
  bool reported_disconnect = false;
  // The peer.
  std::string peer_inbox;
  uint32_t peer_handle = 0;
  uint32_t remote_qpn = 0, remote_psn = 0, remote_qkey = 0;
  // This end.
  uint32_t qpn = 0, psn = 0, qkey = 0;
  uint8_t responder_resources = 0, initiator_depth = 0;
  uint8_t retry_count = 7, rnr_retry_count = 7;  // what the RTS transition uses
  uint8_t ack_timeout = 18;                      // RTS's timeout; RDMA_OPTION_ID_ACK_TIMEOUT sets it
  uint32_t events_reported = 0;
  std::vector<Join> joins;
};

struct Outgoing {
  std::string to;
  Msg msg;
  uint32_t handle;   // the sending id, for on_fail
  uint32_t on_fail;  // event raised on it if the send fails (~0u: none)
  int32_t fail_status;
};

struct State {
  std::mutex mu;  // pthread's: visible to ThreadSanitizer, unlike Debian's uninstrumented Abseil
  absl::flat_hash_map<int, Chan> chans;
  absl::flat_hash_map<std::string, int> chan_by_name;
  absl::flat_hash_map<uint32_t, Id> ids;
  uint32_t next_handle = 1;
  std::string folder;
  bool swept = false;
};

State& S() {
  static State* s = new State();
  return *s;
}

// Which fds are channels: a byte per fd (a channel is never above
// kMaxMarked: Open refuses one with EMFILE).
constexpr int kMaxMarked = 1 << 16;
std::atomic<uint8_t> g_marked[kMaxMarked];

uint32_t Random24() {
  uint32_t r = 0;
  if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(r)))
    r = static_cast<uint32_t>(NowNs());
  return r & 0xffffff;
}

// ------------------------------------------------------------ addresses --

bool IsInet(const sockaddr_in6& a) { return a.sin6_family == AF_INET; }
const sockaddr_in& V4(const sockaddr_in6& a) { return reinterpret_cast<const sockaddr_in&>(a); }
sockaddr_in& V4(sockaddr_in6& a) { return reinterpret_cast<sockaddr_in&>(a); }

uint16_t PortOf(const sockaddr_in6& a) { return ntohs(IsInet(a) ? V4(a).sin_port : a.sin6_port); }
void SetPort(sockaddr_in6* a, uint16_t port) {
  if (IsInet(*a))
    V4(*a).sin_port = htons(port);
  else
    a->sin6_port = htons(port);
}

bool IsAny(const sockaddr_in6& a) {
  if (IsInet(a)) return V4(a).sin_addr.s_addr == htonl(INADDR_ANY);
  return IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr);
}

// Whether `a` is an address of this host: loopback, or an interface's own.
bool IsLocal(const sockaddr_in6& a) {
  if (IsInet(a)) {
    if ((ntohl(V4(a).sin_addr.s_addr) >> 24) == 127) return true;
  } else if (a.sin6_family == AF_INET6) {
    if (IN6_IS_ADDR_LOOPBACK(&a.sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr) && a.sin6_addr.s6_addr[12] == 127) return true;
  } else {
    return false;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != a.sin6_family) continue;
    if (IsInet(a)) {
      found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == V4(a).sin_addr.s_addr;
    } else {
      found = memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &a.sin6_addr, 16) == 0;
    }
  }
  freeifaddrs(list);
  return found;
}

// The loopback address of `family` (AF_INET, else AF_INET6), port 0.
sockaddr_in6 Loopback(sa_family_t family) {
  sockaddr_in6 a{};
  if (family == AF_INET) {
    V4(a).sin_family = AF_INET;
    V4(a).sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else {
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
  }
  return a;
}

// An IP multicast address (224.0.0.0/4, ff00::/8).
bool IsMcastAddr(const sockaddr_in6& a) {
  if (IsInet(a)) return (ntohl(V4(a).sin_addr.s_addr) >> 28) == 0xe;
  return a.sin6_family == AF_INET6 && a.sin6_addr.s6_addr[0] == 0xff;
}

// RoCE: the GID of an IP address (an IPv4 address IPv4-mapped), and the
// index of this host's RoCE v2 GID for a local address (the default v2
// GID, index 1, for a local address the table has no entry of: another
// 127/8 address).  rdma_cm over RoCE uses RoCE v2, as the kernel's does.
ibv_gid GidOfAddr(const sockaddr_in6& a) {
  if (IsInet(a)) return GidOfIpv4(V4(a).sin_addr);
  ibv_gid g;
  memcpy(g.raw, a.sin6_addr.s6_addr, 16);
  return g;
}

uint8_t SgidIndexOf(const sockaddr_in6& a) {
  const int i = PortGidIndex(GidOfAddr(a), IBV_GID_TYPE_ROCE_V2);
  return static_cast<uint8_t>(i < 0 ? 1 : i);
}

// The address vector of a path to `dst` from `src`: a GRH on RoCE.
void RoceAv(const sockaddr_in6& src, const sockaddr_in6& dst, ib_uverbs_ah_attr* ah) {
  if (!PortIsEthernet()) return;
  ah->dlid = 0;
  ah->is_global = 1;
  const ibv_gid d = GidOfAddr(dst);
  memcpy(ah->grh.dgid, d.raw, sizeof(ah->grh.dgid));
  ah->grh.sgid_index = SgidIndexOf(src);
  ah->grh.hop_limit = 64;
}

// The MGID an IP group address maps to on an InfiniBand port, as the
// kernel maps it (the IPoIB mapping under the default P_Key's link-local
// broadcast group; the UDP port space marks its groups with 0x01 in place
// of the IP signature's 0x1b): IPv4 ff12:401b:ffff::a.b.c.d, IPv6
// ff12:601b:ffff: and the address's last 10 bytes; an IPv6 address that
// is already an SA-assigned MGID (ff1x:a01b::) is used as it is.
ibv_gid McastGid(const sockaddr_in6& a, uint16_t ps) {
  ibv_gid g{};
  // RoCE: the group's own address (IPv4-mapped), as the kernel maps it.
  if (PortIsEthernet()) return GidOfAddr(a);
  if (!IsInet(a) && a.sin6_addr.s6_addr[0] == 0xff && (a.sin6_addr.s6_addr[1] & 0xf0) == 0x10 &&
      a.sin6_addr.s6_addr[2] == 0xa0 && a.sin6_addr.s6_addr[3] == 0x1b) {
    memcpy(g.raw, a.sin6_addr.s6_addr, sizeof(g.raw));
    return g;
  }
  g.raw[0] = 0xff;
  g.raw[1] = 0x12;  // scope 2: link-local
  g.raw[2] = IsInet(a) ? 0x40 : 0x60;
  g.raw[3] = ps == RDMA_PS_UDP ? 0x01 : 0x1b;
  g.raw[4] = g.raw[5] = 0xff;  // the P_Key
  if (IsInet(a))
    memcpy(g.raw + 12, &V4(a).sin_addr.s_addr, 4);
  else
    memcpy(g.raw + 6, a.sin6_addr.s6_addr + 6, 10);
  return g;
}

// The group's multicast LID: what an SA would assign, the same for every
// process that joins the group (a hash of the MGID into 0xC000-0xFFFE).
uint16_t McastLid(const ibv_gid& g) {
  if (PortIsEthernet()) return 0;  // no LIDs on RoCE
  uint32_t h = 2166136261u;
  for (uint8_t b : g.raw) h = (h ^ b) * 16777619u;
  return static_cast<uint16_t>(0xc000 + h % 0x3fff);
}

// Copies a user sockaddr of `len` bytes (at most a sockaddr_in6).
bool TakeAddr(const void* p, size_t len, sockaddr_in6* out) {
  *out = {};
  const auto* sa = static_cast<const sockaddr*>(p);
  if (len >= sizeof(sockaddr_in) && sa->sa_family == AF_INET) {
    memcpy(out, p, sizeof(sockaddr_in));
    return true;
  }
  if (len >= sizeof(sockaddr_in6) && sa->sa_family == AF_INET6) {
    memcpy(out, p, sizeof(sockaddr_in6));
    return true;
  }
  return false;
}

// ------------------------------------------------------ user memory ------

// Copies to the program's response buffer; EFAULT instead of a fault.
int CopyOut(uint64_t uaddr, const void* src, size_t n) {
  if (n == 0) return 0;
  if (uaddr == 0) return EFAULT;
  Seg d{uaddr, static_cast<uint32_t>(n)};
  Seg s{reinterpret_cast<uint64_t>(src), static_cast<uint32_t>(n)};
  return CopyLocal(&d, 1, &s, 1);
}

int CopyIn(void* dst, uint64_t uaddr, size_t n) {
  if (n == 0) return 0;
  if (uaddr == 0) return EFAULT;
  Seg d{reinterpret_cast<uint64_t>(dst), static_cast<uint32_t>(n)};
  Seg s{uaddr, static_cast<uint32_t>(n)};
  return CopyLocal(&d, 1, &s, 1);
}

// ------------------------------------------------------------- helpers ---

class Cm {
 public:
  Cm() : s_(S()) {}

  ssize_t Command(int fd, const void* buf, size_t len);
  // Destroys every id of channel `fd`, as when the kernel releases the
  // file (peers hear a DREQ or a REJ), and forgets the channel.
  void CloseChannel(int fd);

 private:
  using Out = std::vector<Outgoing>;

  Id* Find(uint32_t handle, int fd) {
    auto it = s_.ids.find(handle);
    if (it == s_.ids.end() || it->second.chan != fd) return nullptr;
    return &it->second;
  }

  void Queue(Id& owner, uint32_t id, uint32_t event, int32_t status, Event* prepared = nullptr) {
    auto it = s_.chans.find(owner.chan);
    if (it == s_.chans.end()) return;
    Event e{};
    if (prepared) e = *prepared;
    e.owner = owner.handle;
    e.resp.id = id;
    e.resp.event = event;
    e.resp.status = static_cast<uint32_t>(status);
    it->second.events.push_back(e);
    const uint64_t one = 1;
    if (::write(it->second.efd, &one, sizeof(one)) != sizeof(one)) {
      // The counter is far from its maximum; nothing to do.
    }
  }

  static Join* FindJoin(Id& id, uint32_t handle) {
    for (Join& j : id.joins)
      if (j.handle == handle) return &j;
    return nullptr;
  }

  // JOIN_MCAST (and JOIN_IP_MCAST, which is it with a full member's join):
  // the join's handle in *mc_handle, or an errno.
  int JoinMcast(Id& id, const sockaddr_in6& addr, uint16_t flags, uint64_t uid, uint32_t* mc_handle);
  // LEAVE_MCAST: the events reported on the join in *reported.
  int LeaveMcast(int fd, uint32_t mc_handle, uint32_t* reported);

  Msg NewMsg(const Id& from, MsgType type) {
    Msg m{};
    m.magic = kMsgMagic;
    m.version = kMsgVersion;
    m.type = static_cast<uint16_t>(type);
    m.src_handle = from.handle;
    m.dst_handle = from.peer_handle;
    auto it = s_.chans.find(from.chan);
    if (it != s_.chans.end()) snprintf(m.reply_to, sizeof(m.reply_to), "%s", it->second.name.c_str());
    m.ps = from.ps;
    m.qp_type = from.qp_type;
    m.src_addr = from.src;
    m.dst_addr = from.dst;
    return m;
  }

  void Send(Out* out, const Id& from, const Msg& m, uint32_t on_fail = ~0u, int32_t status = 0) {
    out->push_back({from.peer_inbox, m, from.handle, on_fail, status});
  }

  // Sends what a command or a message produced; failures become events.
  void Flush(Out* out);

  int ReservePortFor(Id& id, uint16_t want);
  void ReleasePortOf(Id& id);
  void PublishPort(const Id& id);
  // Tears an id down as the kernel does when it is destroyed: the peer
  // hears a REJ or DREQ, its queued events go.
  void Teardown(Id& id, Out* out);
  void Erase(uint32_t handle);

  int BindIp(Id& id, const sockaddr_in6& a);
  void FillPath(const Id& id, ib_user_path_rec* p);
  int InitQpAttr(const Id& id, uint32_t state, ib_uverbs_qp_attr* a);
  // `src`, `dst`: this end's address and the peer's (RoCE: the GRH).
  void FillUd(uint32_t qpn, uint32_t qkey, const Msg* m, const sockaddr_in6& src, const sockaddr_in6& dst,
              rdma_ucm_ud_param* ud);

  // A message from another channel, received on channel `fd`.
  void Receive(int fd, const Msg& m, Out* out);
  void ReceiveRequest(int fd, const Msg& m, Out* out);
  ssize_t GetEvent(int fd, uint64_t response, size_t out_len);

  State& s_;
};

void CopyConn(const Msg& m, int room, rdma_ucm_conn_param* c) {
  c->qp_num = m.qpn;
  c->qkey = m.qkey;
  // As the kernel reports it: the whole room of the message, zero-padded.
  const int n = std::max(0, std::min(room, static_cast<int>(sizeof(c->private_data))));
  memset(c->private_data, 0, sizeof(c->private_data));
  memcpy(c->private_data, m.private_data, std::min<int>(n, m.private_data_len));
  c->private_data_len = static_cast<uint8_t>(n);
  // What the sender offers, seen from here: its initiator depth is the
  // responder resources this end needs, and the other way round.
  c->responder_resources = m.initiator_depth;
  c->initiator_depth = m.responder_resources;
  c->flow_control = m.flow_control;
  c->retry_count = m.retry_count;
  c->rnr_retry_count = m.rnr_retry_count;
  c->srq = m.srq;
  c->valid = 1;
}

int Room(uint16_t ps, int room) { return ps == RDMA_PS_IB ? room : room - kCmaHeader; }

void Cm::Flush(Out* out) {
  std::string folder;
  {
    std::lock_guard<std::mutex> l(s_.mu);
    folder = s_.folder;
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const Outgoing o = (*out)[i];  // a copy: local deliveries append to *out
    int err = 0;
    bool local = false;
    {
      std::lock_guard<std::mutex> l(s_.mu);
      auto it = s_.chan_by_name.find(o.to);
      if (it != s_.chan_by_name.end()) {
        // A channel of this process: no socket needed.
        local = true;
        Receive(it->second, o.msg, out);  // what it answers is sent by this loop too
      }
    }
    if (!local) err = o.to.empty() ? ENOENT : SendMsg(folder, o.to, o.msg);
    if (err && o.on_fail != ~0u) {
      std::lock_guard<std::mutex> l(s_.mu);
      auto it = s_.ids.find(o.handle);
      if (it == s_.ids.end()) continue;
      Id& id = it->second;
      if (o.on_fail == kEvUnreachable && id.st != St::kConnect) continue;
      if (o.on_fail == kEvDisconnected) {
        if (id.reported_disconnect) continue;
        id.reported_disconnect = true;
        id.st = St::kDisconnected;
      }
      if (o.on_fail == kEvUnreachable) id.st = St::kRouteResolved;
      Queue(id, id.handle, o.on_fail, o.fail_status);
    }
  }
  out->clear();
}

int Cm::ReservePortFor(Id& id, uint16_t want) {
  if (s_.folder.empty()) return ENODEV;
  const auto rec = [&] {
    auto it = s_.chans.find(id.chan);
    return MakePortRecord(id.handle, false, it == s_.chans.end() ? "" : it->second.name);
  };
  if (want) {
    const int fd = ReservePort(s_.folder, id.ps, want, rec());
    if (fd < 0) return errno;
    id.port = want;
    id.port_fd = fd;
    return 0;
  }
  // An ephemeral port, as the kernel picks one from ip_local_port_range.
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint16_t p = static_cast<uint16_t>(32768 + Random24() % (60999 - 32768 + 1));
    const int fd = ReservePort(s_.folder, id.ps, p, rec());
    if (fd >= 0) {
      id.port = p;
      id.port_fd = fd;
      return 0;
    }
    if (errno != EADDRINUSE) return errno;
  }
  return EADDRNOTAVAIL;
}

void Cm::ReleasePortOf(Id& id) {
  if (id.port_fd >= 0) ReleasePort(s_.folder, id.ps, id.port, id.port_fd);
  id.port_fd = -1;
}

void Cm::PublishPort(const Id& id) {
  if (id.port_fd < 0) return;
  auto it = s_.chans.find(id.chan);
  UpdatePort(id.port_fd,
             MakePortRecord(id.handle, id.st == St::kListen, it == s_.chans.end() ? "" : it->second.name));
}

void Cm::Teardown(Id& id, Out* out) {
  switch (id.st) {
    case St::kReqRcvd:
    case St::kRepSent:
    case St::kConnect: {
      if (id.peer_inbox.empty()) break;
      Msg m = NewMsg(id, id.qp_type == IBV_QPT_UD ? MsgType::kSidrRep : MsgType::kRej);
      m.reason = id.qp_type == IBV_QPT_UD ? kSidrReject : kRejConsumer;
      Send(out, id, m);
      break;
    }
    case St::kRepRcvd:
    case St::kEstablished:
      if (id.qp_type != IBV_QPT_UD) Send(out, id, NewMsg(id, MsgType::kDreq));
      break;
    default:
      break;
  }
  ReleasePortOf(id);
  auto it = s_.chans.find(id.chan);
  if (it != s_.chans.end()) {
    auto& q = it->second.events;
    for (auto e = q.begin(); e != q.end();) {
      if (e->owner == id.handle || e->resp.id == id.handle) {
        // A connect request nobody will see: its id goes too.
        if (e->resp.event == kEvConnectRequest && e->resp.id != id.handle) {
          auto child = s_.ids.find(e->resp.id);
          if (child != s_.ids.end()) {
            Id& c = child->second;
            Msg m = NewMsg(c, c.qp_type == IBV_QPT_UD ? MsgType::kSidrRep : MsgType::kRej);
            m.reason = c.qp_type == IBV_QPT_UD ? kSidrReject : kRejConsumer;
            Send(out, c, m);
            s_.ids.erase(child);
          }
        }
        uint64_t v;
        if (::read(it->second.efd, &v, sizeof(v)) != sizeof(v)) {
          // Already drained by a reader racing us: nothing to undo.
        }
        e = q.erase(e);
      } else {
        ++e;
      }
    }
  }
}

void Cm::Erase(uint32_t handle) { s_.ids.erase(handle); }

void Cm::CloseChannel(int fd) {
  Out out;
  {
    std::lock_guard<std::mutex> l(s_.mu);
    auto it = s_.chans.find(fd);
    if (it == s_.chans.end()) return;
    std::vector<uint32_t> mine;
    for (auto& [h, id] : s_.ids)
      if (id.chan == fd) mine.push_back(h);
    for (uint32_t h : mine) {
      auto f = s_.ids.find(h);  // a child torn down with its listener is gone already
      if (f == s_.ids.end()) continue;
      Teardown(f->second, &out);
      Erase(h);
    }
    Chan& c = it->second;
    close(c.inbox);
    close(c.efd);
    unlink((s_.folder + "/" + c.name).c_str());
    rmdir(s_.folder.c_str());  // the fabric's folder goes with its last name
    s_.chan_by_name.erase(c.name);
    s_.chans.erase(it);
    if (fd < kMaxMarked) g_marked[fd].store(0, std::memory_order_release);
    g_open_channels.fetch_sub(1, std::memory_order_relaxed);
  }
  Flush(&out);
}

int Cm::BindIp(Id& id, const sockaddr_in6& a) {
  if (id.port || id.st != St::kIdle) return EINVAL;
  if (!IsAny(a) && !IsLocal(a)) return EADDRNOTAVAIL;
  const int err = ReservePortFor(id, PortOf(a));
  if (err) return err;
  id.src = a;
  SetPort(&id.src, id.port);
  id.on_device = !IsAny(a);
  return 0;
}

void Cm::FillPath(const Id& id, ib_user_path_rec* p) {
  *p = {};
  if (PortIsEthernet()) {  // RoCE: the GIDs are the two ends' addresses
    const ibv_gid s = PortGid(SgidIndexOf(id.src)), d = GidOfAddr(id.dst);
    memcpy(p->sgid, s.raw, 16);
    memcpy(p->dgid, d.raw, 16);
  } else {
    const ibv_gid gid = PortGid(0);
    memcpy(p->sgid, gid.raw, 16);
    memcpy(p->dgid, gid.raw, 16);  // every peer is on this host's softnic0
  }
  p->slid = htobe16(PortLid());
  p->dlid = htobe16(PortLid());
  p->pkey = htobe16(0xffff);
  p->mtu = IBV_MTU_4096;
  p->mtu_selector = 2;
  p->rate = 3;  // 10 Gb/s
  p->rate_selector = 2;
  p->packet_life_time = 14;
  p->packet_life_time_selector = 2;
  p->numb_path = 1;
  p->hop_limit = PortIsEthernet() ? 64 : 0;
  p->reversible = 1;
}

int Cm::InitQpAttr(const Id& id, uint32_t state, ib_uverbs_qp_attr* a) {
  *a = {};
  a->qp_state = state;
  const bool ud = id.qp_type == IBV_QPT_UD;
  const bool connected = id.st == St::kReqRcvd || id.st == St::kRepSent || id.st == St::kRepRcvd ||
                         id.st == St::kEstablished || id.st == St::kConnect;
  if (!id.on_device) return EINVAL;
  switch (state) {
    case IBV_QPS_INIT:
      a->qp_attr_mask = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT;
      a->pkey_index = 0;
      a->port_num = 1;
      if (ud) {
        a->qkey = id.qkey ? id.qkey : kUdpQkey;
        a->qp_attr_mask |= IBV_QP_QKEY;
      } else {
        // Before a connection the kernel grants no remote access; the CM's
        // INIT (librdmacm asks again when connecting) grants what the
        // connection negotiated.
        a->qp_access_flags = 0;
        if (connected) {
          a->qp_access_flags = IBV_ACCESS_REMOTE_WRITE;
          if (id.responder_resources) a->qp_access_flags |= IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
        }
        a->qp_attr_mask |= IBV_QP_ACCESS_FLAGS;
      }
      return 0;
    case IBV_QPS_RTR:
      if (ud) {
        a->qp_attr_mask = IBV_QP_STATE;
        return 0;
      }
      if (!connected || id.st == St::kConnect) return EINVAL;
      a->qp_attr_mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
      a->ah_attr.dlid = PortLid();
      a->ah_attr.port_num = 1;
      RoceAv(id.src, id.dst, &a->ah_attr);
      a->path_mtu = IBV_MTU_4096;
      a->dest_qp_num = id.remote_qpn;
      a->rq_psn = id.remote_psn;
      if (id.qp_type == IBV_QPT_RC) {
        a->qp_attr_mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        a->max_dest_rd_atomic = id.responder_resources;
        a->min_rnr_timer = 0;
      }
      return 0;
    case IBV_QPS_RTS:
      a->qp_attr_mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
      if (ud) return 0;
      if (!connected || id.st == St::kConnect) return EINVAL;
      a->sq_psn = id.psn;
      if (id.qp_type == IBV_QPT_RC) {
        a->qp_attr_mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        a->timeout = id.ack_timeout;
        a->retry_cnt = id.retry_count;
        a->rnr_retry = id.rnr_retry_count;
        a->max_rd_atomic = id.initiator_depth;
      }
      return 0;
    default:
      return EINVAL;
  }
}

void Cm::FillUd(uint32_t qpn, uint32_t qkey, const Msg* m, const sockaddr_in6& src, const sockaddr_in6& dst,
                rdma_ucm_ud_param* ud) {
  *ud = {};
  ud->qp_num = qpn;
  ud->qkey = qkey;
  ud->ah_attr.dlid = PortLid();
  ud->ah_attr.port_num = 1;
  RoceAv(src, dst, &ud->ah_attr);
  if (m) {
    ud->private_data_len = m->private_data_len;
    memcpy(ud->private_data, m->private_data, m->private_data_len);
  }
}

// ------------------------------------------------------------ messages ---

void Cm::ReceiveRequest(int fd, const Msg& m, Out* out) {
  auto lit = s_.ids.find(m.dst_handle);
  Id* listener = lit == s_.ids.end() ? nullptr : &lit->second;
  const bool ud = m.type == static_cast<uint16_t>(MsgType::kSidrReq);
  if (!listener || listener->st != St::kListen || listener->ps != m.ps) {
    // Nobody listens there (any more): the CM answers for it.
    Msg r{};
    r.magic = kMsgMagic;
    r.version = kMsgVersion;
    r.type = static_cast<uint16_t>(ud ? MsgType::kSidrRep : MsgType::kRej);
    r.reason = ud ? kSidrUnsupported : kRejInvalidServiceId;
    r.dst_handle = m.src_handle;
    auto it = s_.chans.find(fd);
    if (it != s_.chans.end()) snprintf(r.reply_to, sizeof(r.reply_to), "%s", it->second.name.c_str());
    out->push_back({m.reply_to, r, 0, ~0u, 0});
    return;
  }
  Id child;
  child.handle = s_.next_handle++;
  child.chan = listener->chan;
  child.ps = listener->ps;
  child.qp_type = listener->qp_type;
  child.st = St::kReqRcvd;
  child.src = m.dst_addr;  // the address the peer connected to
  child.dst = m.src_addr;
  child.on_device = true;
  child.route = true;
  child.listener = listener->handle;
  child.peer_inbox = m.reply_to;
  child.peer_handle = m.src_handle;
  child.remote_qpn = m.qpn;
  child.remote_psn = m.psn;
  child.remote_qkey = m.qkey;
  child.responder_resources = m.initiator_depth;
  child.initiator_depth = m.responder_resources;
  child.retry_count = m.retry_count;
  child.rnr_retry_count = m.rnr_retry_count;
  child.psn = Random24();
  Event e{};
  if (ud)
    FillUd(m.qpn, m.qkey ? m.qkey : kUdpQkey, &m, m.dst_addr, m.src_addr, &e.resp.param.ud);
  else
    CopyConn(m, Room(m.ps, kReqRoom), &e.resp.param.conn);
  const uint32_t h = child.handle, lh = listener->handle;
  s_.ids.emplace(h, std::move(child));  // may rehash: `listener` is stale now
  Queue(s_.ids.find(lh)->second, h, kEvConnectRequest, 0, &e);
}

void Cm::Receive(int fd, const Msg& m, Out* out) {
  const auto type = static_cast<MsgType>(m.type);
  if (type == MsgType::kReq || type == MsgType::kSidrReq) return ReceiveRequest(fd, m, out);
  auto it = s_.ids.find(m.dst_handle);
  if (it == s_.ids.end()) return;  // a destroyed id: the kernel drops it too
  Id& id = it->second;
  // Only the peer the id talks to, or for a connect the listener's answer
  // (from the id its REQ created there).
  // A connect's answer comes from the id the REQ created, on whatever
  // channel that id has moved to by then; a move names the former inbox.
  const bool answer =
      id.st == St::kConnect && (type == MsgType::kRep || type == MsgType::kRej || type == MsgType::kSidrRep);
  const bool moved =
      type == MsgType::kMoved && id.peer_handle == m.src_handle &&
      strncmp(reinterpret_cast<const char*>(m.private_data), id.peer_inbox.c_str(), kNameLen) == 0;
  const bool from_peer = id.peer_inbox == m.reply_to && id.peer_handle == m.src_handle;
  if (!answer && !moved && !from_peer) return;
  if (answer) id.peer_inbox = m.reply_to;
  Event e{};
  switch (type) {
    case MsgType::kRep:
      if (id.st != St::kConnect || id.qp_type == IBV_QPT_UD) return;
      id.peer_handle = m.src_handle;
      id.remote_qpn = m.qpn;
      id.remote_psn = m.psn;
      // The passive side's answer bounds this end's depths.
      id.initiator_depth = std::min(id.initiator_depth, m.responder_resources);
      id.rnr_retry_count = m.rnr_retry_count;
      id.st = St::kRepRcvd;
      CopyConn(m, kRepRoom, &e.resp.param.conn);
      Queue(id, id.handle, kEvConnectResponse, 0, &e);
      return;
    case MsgType::kRtu:
      if (id.st != St::kRepSent) return;
      id.st = St::kEstablished;
      CopyConn(m, 0, &e.resp.param.conn);
      e.resp.param.conn.qp_num = id.remote_qpn;
      Queue(id, id.handle, kEvEstablished, 0, &e);
      return;
    case MsgType::kRej:
      if (id.st != St::kConnect && id.st != St::kRepSent && id.st != St::kRepRcvd) return;
      id.st = id.st == St::kConnect ? St::kRouteResolved : St::kDisconnected;
      id.reported_disconnect = true;
      CopyConn(m, m.reason == kRejConsumer ? kRejRoom : 0, &e.resp.param.conn);
      Queue(id, id.handle, kEvRejected, m.reason, &e);
      return;
    case MsgType::kSidrRep:
      if (id.st != St::kConnect) return;
      if (m.reason != 0) {
        id.st = St::kRouteResolved;
        Queue(id, id.handle, kEvUnreachable, m.reason == kSidrUnsupported ? -ECONNREFUSED : -EINVAL);
        return;
      }
      id.peer_handle = m.src_handle;
      id.remote_qpn = m.qpn;
      id.remote_qkey = m.qkey;
      id.st = St::kEstablished;
      FillUd(m.qpn, m.qkey, &m, id.src, id.dst, &e.resp.param.ud);
      Queue(id, id.handle, kEvEstablished, 0, &e);
      return;
    case MsgType::kDreq:
      if (id.st == St::kEstablished || id.st == St::kRepRcvd || id.st == St::kRepSent ||
          id.st == St::kDreqSent) {
        Send(out, id, NewMsg(id, MsgType::kDrep));
        id.st = St::kDisconnected;
        if (!id.reported_disconnect) {
          id.reported_disconnect = true;
          Queue(id, id.handle, kEvDisconnected, 0);
        }
      }
      return;
    case MsgType::kDrep:
      if (id.st != St::kDreqSent) return;
      id.st = St::kDisconnected;
      if (!id.reported_disconnect) {
        id.reported_disconnect = true;
        Queue(id, id.handle, kEvDisconnected, 0);
      }
      return;
    case MsgType::kMoved:
      id.peer_inbox = m.reply_to;
      return;
    default:
      return;
  }
}

int Cm::JoinMcast(Id& id, const sockaddr_in6& addr, uint16_t flags, uint64_t uid, uint32_t* mc_handle) {
  if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) return EINVAL;
  // rdma_join_multicast: an id on the device, bound or address-resolved,
  // of a UD port space; a group address (the SA-assigned MGID of a join to
  // the any address is not softnic's).
  if (!id.on_device || (id.st != St::kIdle && id.st != St::kAddrResolved)) return EINVAL;
  if (id.qp_type != IBV_QPT_UD || IsAny(addr)) return EINVAL;
  Join j;
  j.handle = s_.next_handle++;
  j.uid = uid;
  j.mgid = McastGid(addr, id.ps);
  j.mlid = McastLid(j.mgid);
  j.flags = flags;
  // The SA answers at once: the join event, with the group's address
  // vector (its GID and LID, a GRH), QPN 0xFFFFFF and the Q_Key.
  Event e{};
  e.mc = j.handle;
  rdma_ucm_ud_param& ud = e.resp.param.ud;
  FillUd(kMcastQpn, id.qkey ? id.qkey : kUdpQkey, nullptr, id.src, addr, &ud);
  ud.ah_attr.dlid = j.mlid;
  ud.ah_attr.is_global = 1;
  memcpy(ud.ah_attr.grh.dgid, j.mgid.raw, sizeof(ud.ah_attr.grh.dgid));
  ud.ah_attr.grh.sgid_index = PortIsEthernet() ? SgidIndexOf(id.src) : 0;
  ud.ah_attr.grh.hop_limit = 1;
  id.joins.push_back(j);
  Queue(id, j.handle, kEvMulticastJoin, 0, &e);
  *mc_handle = j.handle;
  return 0;
}

int Cm::LeaveMcast(int fd, uint32_t mc_handle, uint32_t* reported) {
  for (auto& [h, id] : s_.ids) {
    for (auto j = id.joins.begin(); j != id.joins.end(); ++j) {
      if (j->handle != mc_handle) continue;
      if (id.chan != fd) return EINVAL;  // another channel's join
      *reported = j->events_reported;
      id.joins.erase(j);
      // Its events not yet read go with it.
      auto it = s_.chans.find(fd);
      if (it == s_.chans.end()) return 0;
      auto& q = it->second.events;
      for (auto e = q.begin(); e != q.end();) {
        if (e->owner == id.handle && e->mc == mc_handle) {
          uint64_t v;
          if (::read(it->second.efd, &v, sizeof(v)) != sizeof(v)) {
            // Already drained by a reader racing us: nothing to undo.
          }
          e = q.erase(e);
        } else {
          ++e;
        }
      }
      return 0;
    }
  }
  return ENOENT;
}

ssize_t Cm::GetEvent(int fd, uint64_t response, size_t out_len) {
  if (out_len < sizeof(rdma_ucm_event_resp)) {
    errno = ENOSPC;
    return -1;
  }
  for (;;) {
    int inbox = -1;
    {
      std::lock_guard<std::mutex> l(s_.mu);
      auto it = s_.chans.find(fd);
      if (it == s_.chans.end()) {
        errno = EBADF;
        return -1;
      }
      Chan& c = it->second;
      while (!c.events.empty()) {
        Event e = c.events.front();
        c.events.pop_front();
        uint64_t v;
        if (::read(c.efd, &v, sizeof(v)) != sizeof(v)) {
          // The count is at least the queue's length; never empty here.
        }
        auto owner = s_.ids.find(e.owner);
        if (owner == s_.ids.end()) continue;
        if (e.mc) {
          // A join's event carries the join's uid and counts for it, not
          // for its id (librdmacm acks it on the join).
          Join* j = FindJoin(owner->second, e.mc);
          if (!j) continue;
          e.resp.uid = j->uid;
          ++j->events_reported;
        } else {
          e.resp.uid = owner->second.uid;
          ++owner->second.events_reported;
        }
        if (const int err = CopyOut(response, &e.resp, sizeof(e.resp))) {
          errno = err;
          return -1;
        }
        return 0;  // the caller returns the command's length
      }
      inbox = c.inbox;
    }
    Msg m;
    const ssize_t n = recv(inbox, &m, sizeof(m), MSG_DONTWAIT);
    if (n >= 0) {
      if (!ValidMsg(m, static_cast<size_t>(n))) continue;  // not from a softnic CM: dropped unread
      Out out;
      {
        std::lock_guard<std::mutex> l(s_.mu);
        Receive(fd, m, &out);
      }
      Flush(&out);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    const int fl = fcntl(fd, F_GETFL);
    if (fl >= 0 && (fl & O_NONBLOCK)) {
      errno = EAGAIN;
      return -1;
    }
    epoll_event ev;
    const int r = epoll_wait(fd, &ev, 1, -1);
    // Interrupted: as the kernel's wait is, unless every handler restarts.
    if (r < 0 && (errno != EINTR || !RestartAfterSignal())) return -1;
  }
}

// ------------------------------------------------------------ commands ---

template <typename T>
T Arg(const uint8_t* in, size_t in_len) {
  T t{};
  memcpy(&t, in, std::min(in_len, sizeof(T)));
  return t;
}

ssize_t Cm::Command(int fd, const void* buf, size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof(hdr)) {
    errno = EINVAL;
    return -1;
  }
  memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.in + sizeof(hdr) > len) {
    errno = EINVAL;
    return -1;
  }
  const uint8_t* in = static_cast<const uint8_t*>(buf) + sizeof(hdr);
  const size_t in_len = hdr.in;
  const ssize_t ok = static_cast<ssize_t>(len);
  Out out;
  int err = 0;
  auto fail = [&](int e) -> ssize_t {
    errno = e;
    return -1;
  };

  if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) {
    const auto cmd = Arg<rdma_ucm_get_event>(in, in_len);
    return GetEvent(fd, cmd.response, hdr.out) < 0 ? -1 : ok;
  }

  {
    std::lock_guard<std::mutex> l(s_.mu);
    if (!s_.chans.contains(fd)) return fail(EBADF);
    switch (hdr.cmd) {
      case RDMA_USER_CM_CMD_CREATE_ID: {
        const auto cmd = Arg<rdma_ucm_create_id>(in, in_len);
        if (hdr.out < sizeof(rdma_ucm_create_id_resp)) return fail(ENOSPC);
        if (cmd.ps != RDMA_PS_TCP && cmd.ps != RDMA_PS_UDP && cmd.ps != RDMA_PS_IPOIB && cmd.ps != RDMA_PS_IB)
          return fail(EINVAL);
        if (cmd.qp_type != IBV_QPT_RC && cmd.qp_type != IBV_QPT_UC && cmd.qp_type != IBV_QPT_UD)
          return fail(EINVAL);
        Id id;
        id.handle = s_.next_handle++;
        id.uid = cmd.uid;
        id.chan = fd;
        id.ps = cmd.ps;
        id.qp_type = cmd.qp_type;
        id.src.sin6_family = AF_INET;
        rdma_ucm_create_id_resp resp{id.handle};
        if (const int e = CopyOut(cmd.response, &resp, sizeof(resp))) return fail(e);
        s_.ids.emplace(id.handle, std::move(id));
        return ok;
      }
      case RDMA_USER_CM_CMD_DESTROY_ID: {
        const auto cmd = Arg<rdma_ucm_destroy_id>(in, in_len);
        if (hdr.out < sizeof(rdma_ucm_destroy_id_resp)) return fail(ENOSPC);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        Teardown(*id, &out);
        rdma_ucm_destroy_id_resp resp{id->events_reported};
        Erase(cmd.id);
        if (const int e = CopyOut(cmd.response, &resp, sizeof(resp))) err = e;
        break;
      }
      case RDMA_USER_CM_CMD_BIND_IP:
      case RDMA_USER_CM_CMD_BIND: {
        uint32_t h;
        sockaddr_in6 a;
        if (hdr.cmd == RDMA_USER_CM_CMD_BIND_IP) {
          const auto cmd = Arg<rdma_ucm_bind_ip>(in, in_len);
          h = cmd.id;
          if (!TakeAddr(&cmd.addr, sizeof(cmd.addr), &a)) return fail(EAFNOSUPPORT);
        } else {
          const auto cmd = Arg<rdma_ucm_bind>(in, in_len);
          h = cmd.id;
          // AF_IB addresses are not softnic's: librdmacm then uses the IP calls.
          if (!TakeAddr(&cmd.addr, std::min<size_t>(cmd.addr_size, sizeof(cmd.addr)), &a))
            return fail(EAFNOSUPPORT);
        }
        Id* id = Find(h, fd);
        if (!id) return fail(EINVAL);
        if (const int e = BindIp(*id, a)) return fail(e);
        return ok;
      }
      case RDMA_USER_CM_CMD_RESOLVE_IP:
      case RDMA_USER_CM_CMD_RESOLVE_ADDR: {
        uint32_t h;
        sockaddr_in6 src{}, dst{};
        bool have_src = false, have_dst = false;
        if (hdr.cmd == RDMA_USER_CM_CMD_RESOLVE_IP) {
          const auto cmd = Arg<rdma_ucm_resolve_ip>(in, in_len);
          h = cmd.id;
          have_src = TakeAddr(&cmd.src_addr, sizeof(cmd.src_addr), &src);
          have_dst = TakeAddr(&cmd.dst_addr, sizeof(cmd.dst_addr), &dst);
        } else {
          const auto cmd = Arg<rdma_ucm_resolve_addr>(in, in_len);
          h = cmd.id;
          have_src = cmd.src_size &&
                     TakeAddr(&cmd.src_addr, std::min<size_t>(cmd.src_size, sizeof(cmd.src_addr)), &src);
          have_dst = TakeAddr(&cmd.dst_addr, std::min<size_t>(cmd.dst_size, sizeof(cmd.dst_addr)), &dst);
        }
        Id* id = Find(h, fd);
        if (!id) return fail(EINVAL);
        if (!have_dst) return fail(EAFNOSUPPORT);
        if (id->st != St::kIdle && id->st != St::kAddrResolved) return fail(EINVAL);
        if (!id->port) {
          // Resolving binds: to the given source, else to the destination's
          // own address (a local destination is this host), else unbound.
          sockaddr_in6 a{};
          if (have_src && !IsAny(src)) {
            if (!IsLocal(src)) return fail(EADDRNOTAVAIL);
            a = src;
          } else if (IsLocal(dst)) {
            a = dst;
            SetPort(&a, have_src ? PortOf(src) : 0);
          } else if (IsMcastAddr(dst)) {
            // A group: its traffic leaves by softnic0 (the loopback's).
            a = Loopback(dst.sin6_family);
            SetPort(&a, have_src ? PortOf(src) : 0);
          } else {
            a.sin6_family = dst.sin6_family;
          }
          if (const int e = ReservePortFor(*id, PortOf(a))) return fail(e);
          id->src = a;
          SetPort(&id->src, id->port);
        }
        id->dst = dst;
        if (!IsLocal(dst) && !IsMcastAddr(dst)) {
          // Another host: softnic reaches only this one.
          Queue(*id, id->handle, kEvAddrError, -EHOSTUNREACH);
          return ok;
        }
        if (IsAny(id->src)) {
          const uint16_t p = id->port;
          id->src = IsMcastAddr(dst) ? Loopback(dst.sin6_family) : dst;
          SetPort(&id->src, p);
        }
        id->on_device = true;
        id->st = St::kAddrResolved;
        Queue(*id, id->handle, kEvAddrResolved, 0);
        return ok;
      }
      case RDMA_USER_CM_CMD_RESOLVE_ROUTE: {
        const auto cmd = Arg<rdma_ucm_resolve_route>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (id->st != St::kAddrResolved && id->st != St::kRouteResolved) return fail(EINVAL);
        id->route = true;
        id->st = St::kRouteResolved;
        Queue(*id, id->handle, kEvRouteResolved, 0);
        return ok;
      }
      case RDMA_USER_CM_CMD_QUERY_ROUTE: {
        const auto cmd = Arg<rdma_ucm_query>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        rdma_ucm_query_route_resp resp{};
        if (id->on_device) {
          resp.node_guid = DeviceGuid();
          resp.port_num = 1;
          FillPath(*id, &resp.ib_route[0]);
          resp.num_paths = id->route ? 1 : 0;
        }
        resp.ibdev_index = kInvalidIndex;
        memcpy(&resp.src_addr, &id->src, sizeof(resp.src_addr));
        memcpy(&resp.dst_addr, &id->dst, sizeof(resp.dst_addr));
        // The kernel leaves ibdev_index alone when the caller's buffer ends
        // before it; so do we.
        if (const int e =
                CopyOut(cmd.response, &resp,
                        std::min<size_t>(hdr.out, offsetof(rdma_ucm_query_route_resp, ibdev_index))))
          return fail(e);
        return ok;
      }
      case RDMA_USER_CM_CMD_QUERY: {
        const auto cmd = Arg<rdma_ucm_query>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (cmd.option == RDMA_USER_CM_QUERY_ADDR) {
          rdma_ucm_query_addr_resp resp{};
          if (id->on_device) {
            resp.node_guid = DeviceGuid();
            resp.port_num = 1;
            resp.pkey = htobe16(0xffff);
          }
          resp.src_size = IsInet(id->src) ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
          resp.dst_size = IsInet(id->dst) ? sizeof(sockaddr_in) : sizeof(sockaddr_in6);
          memcpy(&resp.src_addr, &id->src, sizeof(id->src));
          memcpy(&resp.dst_addr, &id->dst, sizeof(id->dst));
          resp.ibdev_index = kInvalidIndex;
          if (const int e =
                  CopyOut(cmd.response, &resp,
                          std::min<size_t>(hdr.out, offsetof(rdma_ucm_query_addr_resp, ibdev_index))))
            return fail(e);
          return ok;
        }
        if (cmd.option == RDMA_USER_CM_QUERY_PATH) {
          rdma_ucm_query_path_resp resp{};
          resp.num_paths = 0;  // librdmacm asks this only of AF_IB ids, which softnic refuses
          if (const int e = CopyOut(cmd.response, &resp, std::min<size_t>(hdr.out, sizeof(resp))))
            return fail(e);
          return ok;
        }
        return fail(EINVAL);
      }
      case RDMA_USER_CM_CMD_LISTEN: {
        const auto cmd = Arg<rdma_ucm_listen>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (id->st == St::kListen) {
          id->backlog = static_cast<int>(cmd.backlog);
          return ok;
        }
        if (id->st != St::kIdle) return fail(EINVAL);
        if (!id->port) {
          sockaddr_in6 any{};
          any.sin6_family = id->src.sin6_family ? id->src.sin6_family : AF_INET;
          if (const int e = BindIp(*id, any)) return fail(e);
        }
        id->st = St::kListen;
        id->backlog = static_cast<int>(cmd.backlog);
        PublishPort(*id);
        return ok;
      }
      case RDMA_USER_CM_CMD_CONNECT: {
        const auto cmd = Arg<rdma_ucm_connect>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (id->st != St::kRouteResolved) return fail(EINVAL);
        const bool ud = id->qp_type == IBV_QPT_UD;
        const auto& cp = cmd.conn_param;
        if (cp.private_data_len > Room(id->ps, ud ? kSidrReqRoom : kReqRoom)) return fail(EINVAL);
        id->qpn = cp.qp_num & 0xffffff;
        id->psn = Random24();
        id->qkey = cp.qkey ? cp.qkey : kUdpQkey;
        id->responder_resources = cp.responder_resources;
        id->initiator_depth = cp.initiator_depth;
        id->retry_count = cp.retry_count;
        PortRecord rec;
        Msg m = NewMsg(*id, ud ? MsgType::kSidrReq : MsgType::kReq);
        m.qpn = id->qpn;
        m.psn = id->psn;
        m.qkey = id->qkey;
        m.responder_resources = cp.responder_resources;
        m.initiator_depth = cp.initiator_depth;
        m.flow_control = cp.flow_control;
        m.retry_count = cp.retry_count;
        m.rnr_retry_count = cp.rnr_retry_count;
        m.srq = cp.srq;
        m.private_data_len = cp.private_data_len;
        memcpy(m.private_data, cp.private_data, cp.private_data_len);
        id->st = St::kConnect;
        if (!LookupPort(s_.folder, id->ps, PortOf(id->dst), &rec) || !rec.listening) {
          // No listener: the remote CM's answer, given at once.
          if (ud) {
            id->st = St::kRouteResolved;
            Queue(*id, id->handle, kEvUnreachable, -ECONNREFUSED);
          } else {
            id->st = St::kRouteResolved;
            Queue(*id, id->handle, kEvRejected, kRejInvalidServiceId);
          }
          return ok;
        }
        id->peer_inbox = rec.inbox;
        id->peer_handle = rec.handle;
        m.dst_handle = rec.handle;
        Send(&out, *id, m, kEvUnreachable, -ETIMEDOUT);
        break;
      }
      case RDMA_USER_CM_CMD_ACCEPT: {
        const auto cmd = Arg<rdma_ucm_accept>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        const auto& cp = cmd.conn_param;
        if (id->st == St::kRepRcvd) {
          // The active side's RTU (librdmacm's ucma_process_conn_resp).
          Send(&out, *id, NewMsg(*id, MsgType::kRtu));
          id->st = St::kEstablished;
          break;
        }
        if (id->st != St::kReqRcvd) return fail(EINVAL);
        const bool ud = id->qp_type == IBV_QPT_UD;
        if (cp.private_data_len > (ud ? kSidrRepRoom : kRepRoom)) return fail(EINVAL);
        if (cmd.uid) id->uid = cmd.uid;
        id->qpn = cp.qp_num & 0xffffff;
        if (cp.valid) {
          id->responder_resources = cp.responder_resources;
          id->initiator_depth = cp.initiator_depth;
        }
        Msg m = NewMsg(*id, ud ? MsgType::kSidrRep : MsgType::kRep);
        m.qpn = id->qpn;
        m.psn = id->psn;
        m.qkey = ud ? (cp.qkey ? cp.qkey : kUdpQkey) : 0;
        m.responder_resources = id->responder_resources;
        m.initiator_depth = id->initiator_depth;
        m.flow_control = cp.flow_control;
        m.rnr_retry_count = cp.rnr_retry_count;
        m.srq = cp.srq;
        m.private_data_len = cp.private_data_len;
        memcpy(m.private_data, cp.private_data, cp.private_data_len);
        id->st = ud ? St::kEstablished : St::kRepSent;
        Send(&out, *id, m);
        break;
      }
      case RDMA_USER_CM_CMD_REJECT: {
        const auto cmd = Arg<rdma_ucm_reject>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (id->st != St::kReqRcvd && id->st != St::kRepRcvd) return fail(EINVAL);
        const bool ud = id->qp_type == IBV_QPT_UD;
        if (cmd.private_data_len > (ud ? kSidrRepRoom : kRejRoom)) return fail(EINVAL);
        Msg m = NewMsg(*id, ud ? MsgType::kSidrRep : MsgType::kRej);
        m.reason = ud ? kSidrReject : (cmd.reason ? cmd.reason : kRejConsumer);
        m.private_data_len = cmd.private_data_len;
        memcpy(m.private_data, cmd.private_data, cmd.private_data_len);
        Send(&out, *id, m);
        id->st = St::kDisconnected;
        id->reported_disconnect = true;
        break;
      }
      case RDMA_USER_CM_CMD_DISCONNECT: {
        const auto cmd = Arg<rdma_ucm_disconnect>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (id->st == St::kDisconnected || id->st == St::kDreqSent) {
          if (id->st == St::kDisconnected && !id->peer_inbox.empty())
            Send(&out, *id, NewMsg(*id, MsgType::kDrep));
          break;
        }
        if (id->st != St::kEstablished && id->st != St::kRepRcvd && id->st != St::kRepSent)
          return fail(EINVAL);
        id->st = St::kDreqSent;
        Send(&out, *id, NewMsg(*id, MsgType::kDreq), kEvDisconnected, 0);
        break;
      }
      case RDMA_USER_CM_CMD_INIT_QP_ATTR: {
        const auto cmd = Arg<rdma_ucm_init_qp_attr>(in, in_len);
        if (hdr.out < sizeof(ib_uverbs_qp_attr)) return fail(ENOSPC);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        ib_uverbs_qp_attr a;
        if (const int e = InitQpAttr(*id, cmd.qp_state, &a)) return fail(e);
        if (const int e = CopyOut(cmd.response, &a, sizeof(a))) return fail(e);
        return ok;
      }
      case RDMA_USER_CM_CMD_SET_OPTION: {
        const auto cmd = Arg<rdma_ucm_set_option>(in, in_len);
        Id* id = Find(cmd.id, fd);
        if (!id) return fail(EINVAL);
        if (cmd.level == RDMA_OPTION_ID) {
          if (cmd.optname > RDMA_OPTION_ID_ACK_TIMEOUT) return fail(ENOSYS);
          uint8_t v[4] = {};
          if (cmd.optlen > sizeof(v) || cmd.optlen == 0) return fail(EINVAL);
          if (const int e = CopyIn(v, cmd.optval, cmd.optlen)) return fail(e);
          // The ACK timeout is what the RTS attributes carry (as the kernel
          // does, 5 bits); type of service, address reuse and v6-only have
          // no effect on softnic.
          if (cmd.optname == RDMA_OPTION_ID_ACK_TIMEOUT) id->ack_timeout = v[0] & 0x1f;
          return ok;
        }
        if (cmd.level == RDMA_OPTION_IB && cmd.optname == RDMA_OPTION_IB_PATH) {
          if (cmd.optlen == 0 || cmd.optlen % sizeof(ib_path_rec_data) != 0) return fail(EINVAL);
          if (id->st != St::kAddrResolved && id->st != St::kRouteResolved) return fail(EINVAL);
          id->route = true;
          id->st = St::kRouteResolved;
          Queue(*id, id->handle, kEvRouteResolved, 0);
          return ok;
        }
        return fail(ENOSYS);
      }
      case RDMA_USER_CM_CMD_NOTIFY: {
        const auto cmd = Arg<rdma_ucm_notify>(in, in_len);
        if (!Find(cmd.id, fd)) return fail(EINVAL);
        return ok;
      }
      case RDMA_USER_CM_CMD_MIGRATE_ID: {
        const auto cmd = Arg<rdma_ucm_migrate_id>(in, in_len);
        if (hdr.out < sizeof(rdma_ucm_migrate_resp)) return fail(ENOSPC);
        Id* id = Find(cmd.id, static_cast<int>(cmd.fd));
        if (!id) return fail(EINVAL);
        const int old = id->chan;
        rdma_ucm_migrate_resp resp{id->events_reported};
        if (old != fd) {
          auto from = s_.chans.find(old);
          auto to = s_.chans.find(fd);
          // Queued events of the id move with it, as the kernel moves them.
          for (auto e = from->second.events.begin(); e != from->second.events.end();) {
            if (e->owner == id->handle) {
              to->second.events.push_back(*e);
              uint64_t v;
              const uint64_t one = 1;
              if (::read(from->second.efd, &v, sizeof(v)) != sizeof(v) ||
                  ::write(to->second.efd, &one, sizeof(one)) != sizeof(one)) {
                // Counts stay consistent enough: a reader re-checks the queue.
              }
              e = from->second.events.erase(e);
            } else {
              ++e;
            }
          }
          const std::string former = from->second.name;
          id->chan = fd;
          PublishPort(*id);
          if (!id->peer_inbox.empty() && id->st != St::kIdle) {
            Msg m = NewMsg(*id, MsgType::kMoved);
            snprintf(reinterpret_cast<char*>(m.private_data), kNameLen, "%s", former.c_str());
            Send(&out, *id, m);
          }
        }
        if (const int e = CopyOut(cmd.response, &resp, sizeof(resp))) err = e;
        break;
      }
      case RDMA_USER_CM_CMD_JOIN_IP_MCAST:
      case RDMA_USER_CM_CMD_JOIN_MCAST: {
        if (hdr.out < sizeof(rdma_ucm_create_id_resp)) return fail(ENOSPC);
        uint32_t h;
        uint64_t uid, response;
        uint16_t flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
        sockaddr_in6 a{};
        bool have = false;
        if (hdr.cmd == RDMA_USER_CM_CMD_JOIN_IP_MCAST) {
          const auto cmd = Arg<rdma_ucm_join_ip_mcast>(in, in_len);
          h = cmd.id, uid = cmd.uid, response = cmd.response;
          have = TakeAddr(&cmd.addr, sizeof(cmd.addr), &a);
        } else {
          const auto cmd = Arg<rdma_ucm_join_mcast>(in, in_len);
          h = cmd.id, uid = cmd.uid, response = cmd.response, flags = cmd.join_flags;
          have = cmd.addr_size <= sizeof(cmd.addr) && TakeAddr(&cmd.addr, cmd.addr_size, &a);
        }
        Id* id = Find(h, fd);
        if (!id) return fail(EINVAL);
        if (!have) return fail(EINVAL);
        rdma_ucm_create_id_resp resp{};
        if (const int e = JoinMcast(*id, a, flags, uid, &resp.id)) return fail(e);
        if (const int e = CopyOut(response, &resp, sizeof(resp))) err = e;
        break;
      }
      case RDMA_USER_CM_CMD_LEAVE_MCAST: {
        const auto cmd = Arg<rdma_ucm_destroy_id>(in, in_len);
        if (hdr.out < sizeof(rdma_ucm_destroy_id_resp)) return fail(ENOSPC);
        rdma_ucm_destroy_id_resp resp{};
        if (const int e = LeaveMcast(fd, cmd.id, &resp.events_reported)) return fail(e);
        if (const int e = CopyOut(cmd.response, &resp, sizeof(resp))) err = e;
        break;
      }
      case RDMA_USER_CM_CMD_GET_OPTION:
        return fail(ENOSYS);
      default:
        return fail(EINVAL);
    }
  }
  Flush(&out);
  if (err) return fail(err);
  return ok;
}

}  // namespace

// ------------------------------------------------------------ channels ---

bool IsChannelSlow(int fd) {
  // No lock: close() of the channel's own sockets comes here with it held.
  return fd >= 0 && fd < kMaxMarked && g_marked[fd].load(std::memory_order_acquire) != 0;
}

int Open(int flags) {
  State& s = S();
  const std::string& fabric = rdmasan::core::GlobalOptions().softnic_fabric;
  const std::string folder_fabric = fabric == "inproc" ? "inproc-" + std::to_string(getpid()) : fabric;
  std::string folder = Folder(folder_fabric);
  if (folder.empty()) {
    errno = ENODEV;
    return -1;
  }
  {
    std::lock_guard<std::mutex> l(s.mu);
    if (!s.swept) SweepCmFolder(folder);
    s.swept = true;
    s.folder = folder;
  }
  Chan c;
  c.inbox = MakeInbox(folder, &c.name);
  if (c.inbox < 0 && errno == ENOENT) {
    // Another process's last channel of this fabric just removed the folder.
    folder = Folder(folder_fabric);
    c.inbox = folder.empty() ? -1 : MakeInbox(folder, &c.name);
  }
  if (c.inbox < 0) return -1;
  c.efd = eventfd(0, EFD_SEMAPHORE | EFD_NONBLOCK | EFD_CLOEXEC);
  c.fd = epoll_create1((flags & O_CLOEXEC) ? EPOLL_CLOEXEC : 0);
  epoll_event ev{};
  ev.events = EPOLLIN;
  bool ok = c.efd >= 0 && c.fd >= 0;
  if (ok) {
    ev.data.fd = c.inbox;
    ok = epoll_ctl(c.fd, EPOLL_CTL_ADD, c.inbox, &ev) == 0;
  }
  if (ok) {
    ev.data.fd = c.efd;
    ok = epoll_ctl(c.fd, EPOLL_CTL_ADD, c.efd, &ev) == 0;
  }
  if (ok && (flags & O_NONBLOCK)) ok = fcntl(c.fd, F_SETFL, O_NONBLOCK) == 0;
  if (ok && c.fd >= kMaxMarked) {
    ok = false;  // beyond the fd table of IsChannel
    errno = EMFILE;
  }
  if (!ok) {
    const int err = errno;
    if (c.fd >= 0) close(c.fd);
    if (c.efd >= 0) close(c.efd);
    close(c.inbox);
    unlink((folder + "/" + c.name).c_str());
    errno = err;
    return -1;
  }
  const int fd = c.fd;
  std::lock_guard<std::mutex> l(s.mu);
  s.chan_by_name[c.name] = fd;
  s.chans.emplace(fd, std::move(c));
  if (fd < kMaxMarked) g_marked[fd].store(1, std::memory_order_release);
  g_open_channels.fetch_add(1, std::memory_order_relaxed);
  return fd;
}

ssize_t Write(int fd, const void* buf, size_t len) {
  Cm cm;
  return cm.Command(fd, buf, len);
}

void Stat(int fd, struct stat* st) {
  (void)fd;
  // The kernel's node, where it exists; otherwise a misc device number.
  struct stat real;
  const dev_t rdev = stat(kDevicePath, &real) == 0 && S_ISCHR(real.st_mode) ? real.st_rdev : makedev(10, 58);
  memset(st, 0, sizeof(*st));
  st->st_mode = S_IFCHR | 0666;
  st->st_rdev = rdev;
  st->st_nlink = 1;
  st->st_blksize = 4096;
}

void Close(int fd) {
  Cm cm;
  cm.CloseChannel(fd);
}

}  // namespace rdmasan::softnic::cm
