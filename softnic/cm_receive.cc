// softnic/cm_receive: the connection manager's side of the IB CM exchange
// (cm_state.h): what a message from a peer's channel does to the id it
// names (REQ and SIDR REQ make a new id on the listener's channel; REP,
// RTU, REJ, DREQ, DREP move the id and queue the event the kernel would
// give), and GET_EVENT, which retries the connects waiting for a listener,
// delivers queued events, reads the inbox and waits on a blocking channel.
//
// May not: wait or read the inbox while holding the table's lock, or act on
// a datagram cm_wire's ValidMsg refused.
#include <errno.h>
#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "softnic/cm_abi.h"
#include "softnic/cm_state.h"
#include "softnic/interrupt.h"

namespace rdmasan::softnic::cm {

void ConnectionManager::ReceiveRequest(int fd, const Msg& m, Outbox* out) {
  auto lit = table_.ids.find(m.dst_handle);
  CmId* listener = lit == table_.ids.end() ? nullptr : &lit->second;
  const bool ud = m.type == static_cast<uint16_t>(MsgType::kSidrReq);
  if (!listener || listener->st != IdState::kListen || listener->ps != m.ps) {
    // Nobody listens there (any more): the CM answers for it.
    Msg r{};
    r.magic = kMsgMagic;
    r.version = kMsgVersion;
    r.type = static_cast<uint16_t>(ud ? MsgType::kSidrRep : MsgType::kRej);
    r.reason = ud ? kSidrUnsupported : kRejInvalidServiceId;
    r.dst_handle = m.src_handle;
    auto it = table_.chans.find(fd);
    if (it != table_.chans.end()) snprintf(r.reply_to, sizeof(r.reply_to), "%s", it->second.name.c_str());
    out->push_back({m.reply_to, r, 0, ~0u, 0});
    return;
  }
  CmId child;
  child.handle = table_.next_handle++;
  child.chan = listener->chan;
  child.ps = listener->ps;
  child.qp_type = listener->qp_type;
  child.st = IdState::kReqRcvd;
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
  CmEvent e{};
  if (ud)
    FillUd(m.qpn, m.qkey ? m.qkey : kUdpQkey, &m, m.dst_addr, m.src_addr, &e.resp.param.ud);
  else
    CopyConn(m, Room(m.ps, kReqRoom), &e.resp.param.conn);
  const uint32_t h = child.handle, lh = listener->handle;
  table_.ids.emplace(h, std::move(child));  // may rehash: `listener` is stale now
  Queue(table_.ids.find(lh)->second, h, kEventConnectRequest, 0, &e);
}

void ConnectionManager::Receive(int fd, const Msg& m, Outbox* out) {
  const auto type = static_cast<MsgType>(m.type);
  if (type == MsgType::kReq || type == MsgType::kSidrReq) return ReceiveRequest(fd, m, out);
  auto it = table_.ids.find(m.dst_handle);
  if (it == table_.ids.end()) return;  // a destroyed id: the kernel drops it too
  CmId& id = it->second;
  // Only the peer the id talks to, or for a connect the listener's answer
  // (from the id its REQ created there).
  // A connect's answer comes from the id the REQ created, on whatever
  // channel that id has moved to by then; a move names the former inbox.
  const bool answer = id.st == IdState::kConnect &&
                      (type == MsgType::kRep || type == MsgType::kRej || type == MsgType::kSidrRep);
  const bool moved =
      type == MsgType::kMoved && id.peer_handle == m.src_handle &&
      strncmp(reinterpret_cast<const char*>(m.private_data), id.peer_inbox.c_str(), kNameLen) == 0;
  const bool from_peer = id.peer_inbox == m.reply_to && id.peer_handle == m.src_handle;
  if (!answer && !moved && !from_peer) return;
  if (answer) id.peer_inbox = m.reply_to;
  CmEvent e{};
  switch (type) {
    case MsgType::kRep:
      if (id.st != IdState::kConnect || id.qp_type == IBV_QPT_UD) return;
      id.peer_handle = m.src_handle;
      id.remote_qpn = m.qpn;
      id.remote_psn = m.psn;
      // The passive side's answer bounds this end's depths.
      id.initiator_depth = std::min(id.initiator_depth, m.responder_resources);
      id.rnr_retry_count = m.rnr_retry_count;
      id.st = IdState::kRepRcvd;
      CopyConn(m, kRepRoom, &e.resp.param.conn);
      Queue(id, id.handle, kEventConnectResponse, 0, &e);
      return;
    case MsgType::kRtu:
      if (id.st != IdState::kRepSent) return;
      id.st = IdState::kEstablished;
      CopyConn(m, 0, &e.resp.param.conn);
      e.resp.param.conn.qp_num = id.remote_qpn;
      Queue(id, id.handle, kEventEstablished, 0, &e);
      return;
    case MsgType::kRej:
      if (id.st != IdState::kConnect && id.st != IdState::kRepSent && id.st != IdState::kRepRcvd) return;
      id.st = id.st == IdState::kConnect ? IdState::kRouteResolved : IdState::kDisconnected;
      id.reported_disconnect = true;
      CopyConn(m, m.reason == kRejConsumer ? kRejRoom : 0, &e.resp.param.conn);
      Queue(id, id.handle, kEventRejected, m.reason, &e);
      return;
    case MsgType::kSidrRep:
      if (id.st != IdState::kConnect) return;
      if (m.reason != 0) {
        id.st = IdState::kRouteResolved;
        Queue(id, id.handle, kEventUnreachable, m.reason == kSidrUnsupported ? -ECONNREFUSED : -EINVAL);
        return;
      }
      id.peer_handle = m.src_handle;
      id.remote_qpn = m.qpn;
      id.remote_qkey = m.qkey;
      id.st = IdState::kEstablished;
      FillUd(m.qpn, m.qkey, &m, id.src, id.dst, &e.resp.param.ud);
      Queue(id, id.handle, kEventEstablished, 0, &e);
      return;
    case MsgType::kDreq:
      if (id.st == IdState::kEstablished || id.st == IdState::kRepRcvd || id.st == IdState::kRepSent ||
          id.st == IdState::kDreqSent) {
        Send(out, id, NewMsg(id, MsgType::kDrep));
        id.st = IdState::kDisconnected;
        if (!id.reported_disconnect) {
          id.reported_disconnect = true;
          Queue(id, id.handle, kEventDisconnected, 0);
        }
      }
      return;
    case MsgType::kDrep:
      if (id.st != IdState::kDreqSent) return;
      id.st = IdState::kDisconnected;
      if (!id.reported_disconnect) {
        id.reported_disconnect = true;
        Queue(id, id.handle, kEventDisconnected, 0);
      }
      return;
    case MsgType::kMoved:
      id.peer_inbox = m.reply_to;
      return;
    default:
      return;
  }
}

namespace {

// A GET_EVENT whose channel the program closed while the call waited (its
// CM thread blocked while main tears down, as rping's does): the kernel's
// call holds the file and waits on for events that no longer come, until a
// signal interrupts it or the process ends; a non-blocking one has none.
ssize_t ChannelClosedUnderCall(bool nonblocking) {
  errno = EAGAIN;
  if (nonblocking) return -1;
  for (;;) {
    pause();
    if (!RestartAfterSignal()) {
      errno = EINTR;
      return -1;
    }
  }
}

}  // namespace

ssize_t ConnectionManager::GetEvent(int fd, uint64_t response, size_t out_len) {
  if (out_len < sizeof(rdma_ucm_event_resp)) {
    errno = ENOSPC;
    return -1;
  }
  // The channel this call reads (its inbox's name): the fd's number may
  // name another channel once the program closed this one.  The write
  // came here because the fd was a channel when it was made (IsChannel, the
  // kernel's taking of the file at the call's entry): a channel not found,
  // even at the first look, was closed under the call.
  std::string name;
  bool nonblocking = false;
  for (;;) {
    int inbox = -1;
    {
      // The connects waiting for a listener, first: this call may be what
      // their timer woke (cm_state.h).
      Outbox out;
      {
        std::lock_guard<std::mutex> l(table_.mu);
        RetryAwaiting(&out);
      }
      Flush(&out);
    }
    {
      std::lock_guard<std::mutex> l(table_.mu);
      auto it = table_.chans.find(fd);
      if (it == table_.chans.end() || (!name.empty() && it->second.name != name))
        return ChannelClosedUnderCall(nonblocking);
      Channel& c = it->second;
      if (name.empty()) name = c.name;
      while (!c.events.empty()) {
        CmEvent e = c.events.front();
        c.events.pop_front();
        c.UncountEvent();  // the count is at least the queue's length: never empty here
        auto owner = table_.ids.find(e.owner);
        if (owner == table_.ids.end()) continue;
        if (e.mc) {
          // A join's event carries the join's uid and counts for it, not
          // for its id (librdmacm acks it on the join).
          McastJoin* j = FindJoin(owner->second, e.mc);
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
      Outbox out;
      {
        std::lock_guard<std::mutex> l(table_.mu);
        Receive(fd, m, &out);
      }
      Flush(&out);
      continue;
    }
    if (errno == EINTR) continue;
    // A descriptor closed under the call (EBADF, or one reopened as no
    // socket): the loop's lookup tells whether the channel went.
    if (errno == EBADF || errno == ENOTSOCK) {
      if (ChannelGone(fd, name)) return ChannelClosedUnderCall(nonblocking);
      errno = EBADF;
      return -1;
    }
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    const int fl = fcntl(fd, F_GETFL);
    if (fl < 0 && ChannelGone(fd, name)) return ChannelClosedUnderCall(nonblocking);
    nonblocking = fl >= 0 && (fl & O_NONBLOCK);
    if (nonblocking) {
      errno = EAGAIN;
      return -1;
    }
    epoll_event ev;
    const int r = epoll_wait(fd, &ev, 1, -1);
    if (r < 0 && errno != EINTR && ChannelGone(fd, name)) return ChannelClosedUnderCall(false);
    // Interrupted: as the kernel's wait is, unless every handler restarts.
    if (r < 0 && (errno != EINTR || !RestartAfterSignal())) return -1;
  }
}

bool ConnectionManager::ChannelGone(int fd, const std::string& name) {
  std::lock_guard<std::mutex> l(table_.mu);
  auto it = table_.chans.find(fd);
  return it == table_.chans.end() || it->second.name != name;
}

}  // namespace rdmasan::softnic::cm
