// softnic/cm_state: the connection manager's books and state machine
// (cm.h): every id, channel and multicast join of this process in one
// table under one lock, the IB CM states an id moves through, and the
// machine's steps shared by the commands (cm_commands.cc), the messages
// from peers (cm_receive.cc) and the fd entry points (cm.cc): queueing an
// event, composing and sending messages, ports, tearing an id down, and
// the connects that wait for a listener.
//
// A connect that finds nobody listening on its port waits (the option
// softnic_cm_listen_wait, in ms) before the REJ the passive CM gives: its
// REQ is held as a slow fabric or a lost and retransmitted REQ would hold
// it, and leaves as soon as the port's record says it listens.  A periodic
// timerfd in the channel's epoll set wakes the program's waits while one
// of its ids waits; every GET_EVENT and command looks again.  The wait is
// only timing: no outcome a real CM could not give.
//
// May not: block or send while holding the table's lock (messages a step
// produces are collected and sent by Flush after the lock is dropped), or
// trust a message's fields before cm_wire's ValidMsg checked them.
#ifndef RDMASAN_SOFTNIC_CM_STATE_H_
#define RDMASAN_SOFTNIC_CM_STATE_H_

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/rdma_user_cm.h>
#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "softnic/cm_wire.h"

namespace rdmasan::softnic::cm {

enum class IdState : uint8_t {
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

// An event queued on a channel for GET_EVENT.
struct CmEvent {
  uint32_t owner;  // the id whose uid it carries and whose count it raises
  uint32_t mc;     // a multicast event: the join's handle (its uid and count instead)
  rdma_ucm_event_resp resp;
};

// A multicast join of an id (JOIN_MCAST, JOIN_IP_MCAST): the group its
// address maps to, and the events reported on it (LEAVE_MCAST's answer).
struct McastJoin {
  uint32_t handle = 0;
  uint64_t uid = 0;
  ibv_gid mgid{};
  uint16_t mlid = 0;
  uint16_t flags = 0;  // RDMA_MC_JOIN_FLAG_*
  uint32_t events_reported = 0;
};

// One open of the emulated device: an event channel.
struct Channel {
  int fd = -1;     // the epoll fd the program holds
  int inbox = -1;  // unix datagram socket: other processes' messages
  int efd = -1;    // eventfd: one count per queued event
  int tfd = -1;    // timerfd: ticks while an id of the channel waits for a listener
  bool ticking = false;
  std::string name;
  std::deque<CmEvent> events;

  // The eventfd counts the queued events (a semaphore the program's epoll
  // sees): one up per event queued, one down per event taken or dropped.
  // Each says whether the count moved; a count off by one only costs a
  // reader a look at an empty queue.
  bool CountEvent() const;
  bool UncountEvent() const;
};

// An rdma_cm id.
struct CmId {
  uint32_t handle = 0;
  uint64_t uid = 0;
  int chan = -1;
  uint16_t ps = 0;
  uint8_t qp_type = IBV_QPT_RC;
  IdState st = IdState::kIdle;
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
  std::vector<McastJoin> joins;
  // A connect waiting for a listener (st kConnect): its REQ, and when the
  // wait ends in the REJ (CLOCK_MONOTONIC ns).
  bool awaiting_listener = false;
  uint64_t await_deadline_ns = 0;
  Msg awaiting_req{};
};

// A message a step produced, sent by Flush once the lock is dropped.
struct OutgoingMsg {
  std::string to;
  Msg msg;
  uint32_t handle;   // the sending id, for on_fail
  uint32_t on_fail;  // event raised on it if the send fails (~0u: none)
  int32_t fail_status;
};
using Outbox = std::vector<OutgoingMsg>;

// This process's ids and channels.
struct CmTable {
  std::mutex mu;  // pthread's: visible to ThreadSanitizer, unlike Debian's uninstrumented Abseil
  absl::flat_hash_map<int, Channel> chans;
  absl::flat_hash_map<std::string, int> chan_by_name;
  absl::flat_hash_map<uint32_t, CmId> ids;
  absl::flat_hash_set<uint32_t> awaiting;  // ids whose connect waits for a listener
  uint32_t next_handle = 1;
  std::string folder;
  bool swept = false;
};

// The one table of this process (never destroyed: an exiting program's
// last close may come after static destructors).
CmTable& Table();

// Marks `fd` as a channel (or no longer one) for IsChannelSlow (cm.cc).
void MarkChannel(int fd, bool channel);

// A random 24-bit number (a PSN, an ephemeral port's seed).
uint32_t Random24();

// The machine's steps over Table().  Command, Flush, GetEvent and
// CloseChannel take Table().mu themselves; every other member runs with it
// held.
class ConnectionManager {
 public:
  ConnectionManager() : table_(Table()) {}

  CmTable& table() { return table_; }

  // The id `handle` of channel `fd`, or null.
  CmId* Find(uint32_t handle, int fd) {
    auto it = table_.ids.find(handle);
    if (it == table_.ids.end() || it->second.chan != fd) return nullptr;
    return &it->second;
  }
  static McastJoin* FindJoin(CmId& id, uint32_t handle) {
    for (McastJoin& j : id.joins)
      if (j.handle == handle) return &j;
    return nullptr;
  }

  // Queues `event` about id `id` on `owner`'s channel (with the parameters
  // of `prepared`, if given).
  void Queue(CmId& owner, uint32_t id, uint32_t event, int32_t status, CmEvent* prepared = nullptr);

  // A message from `from` to its peer, of `type`.
  Msg NewMsg(const CmId& from, MsgType type);
  void Send(Outbox* out, const CmId& from, const Msg& m, uint32_t on_fail = ~0u, int32_t status = 0) {
    out->push_back({from.peer_inbox, m, from.handle, on_fail, status});
  }
  // The consumer's refusal of `id`'s connection request, to its peer: a
  // REJ, or a SIDR REP with status REJECT.
  void SendRefusal(const CmId& id, Outbox* out);
  // Sends what a command or a message produced; failures become events.
  // Takes the lock itself.
  void Flush(Outbox* out);

  // A connect (REQ in `req`) to a port nobody listens on: waits for a
  // listener when softnic_cm_listen_wait allows, else answers at once.
  void ConnectUnheard(CmId& id, const Msg& req);
  // The connects waiting for a listener, every channel's: those whose
  // port now listens send their REQ, those past their time get the REJ;
  // the channels' timers tick only while one of theirs waits.
  void RetryAwaiting(Outbox* out);

  int ReservePortFor(CmId& id, uint16_t want);
  void ReleasePortOf(CmId& id);
  void PublishPort(const CmId& id);
  // Tears an id down as the kernel does when it is destroyed: the peer
  // hears a REJ or DREQ, its queued events go.
  void Teardown(CmId& id, Outbox* out);
  void Erase(uint32_t handle) { table_.ids.erase(handle); }
  // Destroys every id of channel `fd`, as when the kernel releases the
  // file (peers hear a DREQ or a REJ), and forgets the channel.
  void CloseChannel(int fd);

  int BindIp(CmId& id, const sockaddr_in6& a);
  // JOIN_MCAST (and JOIN_IP_MCAST, which is it with a full member's join):
  // the join's handle in *mc_handle, or an errno.
  int JoinMcast(CmId& id, const sockaddr_in6& addr, uint16_t flags, uint64_t uid, uint32_t* mc_handle);
  // LEAVE_MCAST: the events reported on the join in *reported.
  int LeaveMcast(int fd, uint32_t mc_handle, uint32_t* reported);

  // A message from another channel, received on channel `fd` (cm_receive.cc).
  void Receive(int fd, const Msg& m, Outbox* out);
  // GET_EVENT: the channel's next event to `response`, reading the inbox
  // and (a blocking channel) waiting for one; 0, or -1 with errno.  Takes
  // the lock itself.
  ssize_t GetEvent(int fd, uint64_t response, size_t out_len);
  // Whether channel `fd` is no longer the channel whose inbox is `name`
  // (the program closed it, or its number now names another).
  bool ChannelGone(int fd, const std::string& name);

  // One command written to channel `fd` (cm_commands.cc): `len`, or -1
  // with errno.
  ssize_t Command(int fd, const void* buf, size_t len);

 private:
  void ReceiveRequest(int fd, const Msg& m, Outbox* out);
  void AnswerUnheard(CmId& id);

  CmTable& table_;
};

}  // namespace rdmasan::softnic::cm

#endif  // RDMASAN_SOFTNIC_CM_STATE_H_
