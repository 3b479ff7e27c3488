// softnic/cm_state: see cm_state.h.
#include "softnic/cm_state.h"

#include <errno.h>
#include <sys/random.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "core/options.h"
#include "softnic/cm_abi.h"
#include "softnic/cm_address.h"
#include "softnic/fabric.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic::cm {

bool Channel::CountEvent() const {
  const uint64_t one = 1;
  return ::write(efd, &one, sizeof(one)) == sizeof(one);
}

bool Channel::UncountEvent() const {
  uint64_t v;
  return ::read(efd, &v, sizeof(v)) == sizeof(v);
}

CmTable& Table() {
  static CmTable* table = new CmTable();
  return *table;
}

uint32_t Random24() {
  uint32_t r = 0;
  if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != static_cast<ssize_t>(sizeof(r)))
    r = static_cast<uint32_t>(NowNs());
  return r & 0xffffff;
}

void ConnectionManager::Queue(CmId& owner, uint32_t id, uint32_t event, int32_t status, CmEvent* prepared) {
  auto it = table_.chans.find(owner.chan);
  if (it == table_.chans.end()) return;
  CmEvent e{};
  if (prepared) e = *prepared;
  e.owner = owner.handle;
  e.resp.id = id;
  e.resp.event = event;
  e.resp.status = static_cast<uint32_t>(status);
  it->second.events.push_back(e);
  it->second.CountEvent();  // the counter is far from its maximum
}

Msg ConnectionManager::NewMsg(const CmId& from, MsgType type) {
  Msg m{};
  m.magic = kMsgMagic;
  m.version = kMsgVersion;
  m.type = static_cast<uint16_t>(type);
  m.src_handle = from.handle;
  m.dst_handle = from.peer_handle;
  auto it = table_.chans.find(from.chan);
  if (it != table_.chans.end()) snprintf(m.reply_to, sizeof(m.reply_to), "%s", it->second.name.c_str());
  m.ps = from.ps;
  m.qp_type = from.qp_type;
  m.src_addr = from.src;
  m.dst_addr = from.dst;
  return m;
}

void ConnectionManager::Flush(Outbox* out) {
  if (out->empty()) return;
  std::string folder;
  {
    std::lock_guard<std::mutex> l(table_.mu);
    folder = table_.folder;
  }
  for (size_t i = 0; i < out->size(); ++i) {
    const OutgoingMsg o = (*out)[i];  // a copy: local deliveries append to *out
    int err = 0;
    bool local = false;
    {
      std::lock_guard<std::mutex> l(table_.mu);
      auto it = table_.chan_by_name.find(o.to);
      if (it != table_.chan_by_name.end()) {
        // A channel of this process: no socket needed.
        local = true;
        Receive(it->second, o.msg, out);  // what it answers is sent by this loop too
      }
    }
    if (!local) err = o.to.empty() ? ENOENT : SendMsg(folder, o.to, o.msg);
    if (err && o.on_fail != ~0u) {
      std::lock_guard<std::mutex> l(table_.mu);
      auto it = table_.ids.find(o.handle);
      if (it == table_.ids.end()) continue;
      CmId& id = it->second;
      if (o.on_fail == kEventUnreachable && id.st != IdState::kConnect) continue;
      if (o.on_fail == kEventDisconnected) {
        if (id.reported_disconnect) continue;
        id.reported_disconnect = true;
        id.st = IdState::kDisconnected;
      }
      if (o.on_fail == kEventUnreachable) id.st = IdState::kRouteResolved;
      Queue(id, id.handle, o.on_fail, o.fail_status);
    }
  }
  out->clear();
}

namespace {

// The period of a waiting channel's timer: how soon a connect sees the
// listener that came.
constexpr long kListenPollNs = 1000000;

void SetTicking(Channel& c, bool on) {
  if (c.ticking == on || c.tfd < 0) return;
  itimerspec t{};
  if (on) t.it_value.tv_nsec = t.it_interval.tv_nsec = kListenPollNs;
  if (timerfd_settime(c.tfd, 0, &t, nullptr) == 0) c.ticking = on;
  uint64_t ticks;
  if (!on) (void)::read(c.tfd, &ticks, sizeof(ticks));  // a tick already due: not a wake any more
}

}  // namespace

void ConnectionManager::ConnectUnheard(CmId& id, const Msg& req) {
  const uint64_t wait_ns = static_cast<uint64_t>(core::GlobalOptions().softnic_cm_listen_wait) * 1000000u;
  auto ch = table_.chans.find(id.chan);
  if (wait_ns && ch != table_.chans.end() && ch->second.tfd >= 0) {
    id.awaiting_listener = true;
    id.await_deadline_ns = NowNs() + wait_ns;
    id.awaiting_req = req;
    table_.awaiting.insert(id.handle);
    SetTicking(ch->second, true);
    return;
  }
  AnswerUnheard(id);
}

void ConnectionManager::AnswerUnheard(CmId& id) {
  // The remote CM's answer for a port nobody listens on: a REJ, invalid
  // service ID (a SIDR REP the kernel reports as UNREACHABLE).
  id.awaiting_listener = false;
  id.st = IdState::kRouteResolved;
  if (id.qp_type == IBV_QPT_UD)
    Queue(id, id.handle, kEventUnreachable, -ECONNREFUSED);
  else
    Queue(id, id.handle, kEventRejected, kRejInvalidServiceId);
}

void ConnectionManager::RetryAwaiting(Outbox* out) {
  if (table_.awaiting.empty()) {
    for (auto& [fd, c] : table_.chans) SetTicking(c, false);
    return;
  }
  for (auto& [fd, c] : table_.chans) {
    uint64_t ticks;
    if (c.ticking) (void)::read(c.tfd, &ticks, sizeof(ticks));  // this look answers the ticks so far
  }
  const uint64_t now = NowNs();
  absl::flat_hash_set<int> waiting_chans;
  for (auto it = table_.awaiting.begin(); it != table_.awaiting.end();) {
    auto f = table_.ids.find(*it);
    if (f == table_.ids.end() || !f->second.awaiting_listener || f->second.st != IdState::kConnect) {
      table_.awaiting.erase(it++);  // destroyed, or moved on (a disconnect, a destroy and a reuse)
      continue;
    }
    CmId& id = f->second;
    PortRecord rec;
    if (LookupPort(table_.folder, id.ps, PortOf(id.dst), &rec) && rec.listening) {
      // The listener came: the REQ leaves, from the channel the id has now.
      Msg m = id.awaiting_req;
      auto ch = table_.chans.find(id.chan);
      if (ch != table_.chans.end()) snprintf(m.reply_to, sizeof(m.reply_to), "%s", ch->second.name.c_str());
      m.dst_handle = rec.handle;
      id.awaiting_listener = false;
      id.peer_inbox = rec.inbox;
      id.peer_handle = rec.handle;
      Send(out, id, m, kEventUnreachable, -ETIMEDOUT);
      table_.awaiting.erase(it++);
      continue;
    }
    if (now >= id.await_deadline_ns) {
      table_.awaiting.erase(it++);
      AnswerUnheard(id);  // no wait left
      continue;
    }
    waiting_chans.insert(id.chan);
    ++it;
  }
  for (auto& [fd, c] : table_.chans) SetTicking(c, waiting_chans.contains(fd));
}

int ConnectionManager::ReservePortFor(CmId& id, uint16_t want) {
  if (table_.folder.empty()) return ENODEV;
  const auto rec = [&] {
    auto it = table_.chans.find(id.chan);
    return MakePortRecord(id.handle, false, it == table_.chans.end() ? "" : it->second.name);
  };
  if (want) {
    const int fd = ReservePort(table_.folder, id.ps, want, rec());
    if (fd < 0) return errno;
    id.port = want;
    id.port_fd = fd;
    return 0;
  }
  // An ephemeral port, as the kernel picks one from ip_local_port_range.
  for (int attempt = 0; attempt < 64; ++attempt) {
    const uint16_t p = static_cast<uint16_t>(32768 + Random24() % (60999 - 32768 + 1));
    const int fd = ReservePort(table_.folder, id.ps, p, rec());
    if (fd >= 0) {
      id.port = p;
      id.port_fd = fd;
      return 0;
    }
    if (errno != EADDRINUSE) return errno;
  }
  return EADDRNOTAVAIL;
}

void ConnectionManager::ReleasePortOf(CmId& id) {
  if (id.port_fd >= 0) ReleasePort(table_.folder, id.ps, id.port, id.port_fd);
  id.port_fd = -1;
}

void ConnectionManager::PublishPort(const CmId& id) {
  if (id.port_fd < 0) return;
  auto it = table_.chans.find(id.chan);
  UpdatePort(id.port_fd, MakePortRecord(id.handle, id.st == IdState::kListen,
                                        it == table_.chans.end() ? "" : it->second.name));
}

void ConnectionManager::SendRefusal(const CmId& id, Outbox* out) {
  Msg m = NewMsg(id, id.qp_type == IBV_QPT_UD ? MsgType::kSidrRep : MsgType::kRej);
  m.reason = id.qp_type == IBV_QPT_UD ? kSidrReject : kRejConsumer;
  Send(out, id, m);
}

void ConnectionManager::Teardown(CmId& id, Outbox* out) {
  switch (id.st) {
    case IdState::kReqRcvd:
    case IdState::kRepSent:
    case IdState::kConnect: {
      if (id.peer_inbox.empty()) break;
      SendRefusal(id, out);
      break;
    }
    case IdState::kRepRcvd:
    case IdState::kEstablished:
      if (id.qp_type != IBV_QPT_UD) Send(out, id, NewMsg(id, MsgType::kDreq));
      break;
    default:
      break;
  }
  ReleasePortOf(id);
  auto it = table_.chans.find(id.chan);
  if (it != table_.chans.end()) {
    auto& q = it->second.events;
    for (auto e = q.begin(); e != q.end();) {
      if (e->owner == id.handle || e->resp.id == id.handle) {
        // A connect request nobody will see: its id goes too.
        if (e->resp.event == kEventConnectRequest && e->resp.id != id.handle) {
          auto child = table_.ids.find(e->resp.id);
          if (child != table_.ids.end()) {
            SendRefusal(child->second, out);
            table_.ids.erase(child);
          }
        }
        it->second.UncountEvent();  // a reader racing us may have drained it
        e = q.erase(e);
      } else {
        ++e;
      }
    }
  }
}

void ConnectionManager::CloseChannel(int fd) {
  Outbox out;
  {
    std::lock_guard<std::mutex> l(table_.mu);
    auto it = table_.chans.find(fd);
    if (it == table_.chans.end()) return;
    std::vector<uint32_t> mine;
    for (auto& [h, id] : table_.ids)
      if (id.chan == fd) mine.push_back(h);
    for (uint32_t h : mine) {
      auto f = table_.ids.find(h);  // a child torn down with its listener is gone already
      if (f == table_.ids.end()) continue;
      Teardown(f->second, &out);
      Erase(h);
    }
    Channel& c = it->second;
    close(c.inbox);
    close(c.efd);
    if (c.tfd >= 0) close(c.tfd);
    unlink((table_.folder + "/" + c.name).c_str());
    rmdir(table_.folder.c_str());  // the fabric's folder goes with its last name
    table_.chan_by_name.erase(c.name);
    table_.chans.erase(it);
    MarkChannel(fd, false);
  }
  Flush(&out);
}

int ConnectionManager::BindIp(CmId& id, const sockaddr_in6& a) {
  if (id.port || id.st != IdState::kIdle) return EINVAL;
  if (!IsAny(a) && !IsLocal(a)) return EADDRNOTAVAIL;
  const int err = ReservePortFor(id, PortOf(a));
  if (err) return err;
  id.src = a;
  SetPort(&id.src, id.port);
  id.on_device = !IsAny(a);
  return 0;
}

int ConnectionManager::JoinMcast(CmId& id, const sockaddr_in6& addr, uint16_t flags, uint64_t uid,
                                 uint32_t* mc_handle) {
  if (flags != RDMA_MC_JOIN_FLAG_FULLMEMBER && flags != RDMA_MC_JOIN_FLAG_SENDONLY_FULLMEMBER) return EINVAL;
  // rdma_join_multicast: an id on the device, bound or address-resolved,
  // of a UD port space; a group address (the SA-assigned MGID of a join to
  // the any address is not softnic's).
  if (!id.on_device || (id.st != IdState::kIdle && id.st != IdState::kAddrResolved)) return EINVAL;
  if (id.qp_type != IBV_QPT_UD || IsAny(addr)) return EINVAL;
  McastJoin j;
  j.handle = table_.next_handle++;
  j.uid = uid;
  j.mgid = McastGid(addr, id.ps);
  j.mlid = McastLid(j.mgid);
  j.flags = flags;
  // The SA answers at once: the join event, with the group's address
  // vector (its GID and LID, a GRH), QPN 0xFFFFFF and the Q_Key.
  CmEvent e{};
  e.mc = j.handle;
  rdma_ucm_ud_param& ud = e.resp.param.ud;
  FillUd(kMcastQpn, id.qkey ? id.qkey : kUdpQkey, nullptr, id.src, addr, &ud);
  ud.ah_attr.dlid = j.mlid;
  ud.ah_attr.is_global = 1;
  memcpy(ud.ah_attr.grh.dgid, j.mgid.raw, sizeof(ud.ah_attr.grh.dgid));
  ud.ah_attr.grh.sgid_index = PortIsEthernet() ? SgidIndexOf(id.src) : 0;
  ud.ah_attr.grh.hop_limit = 1;
  id.joins.push_back(j);
  Queue(id, j.handle, kEventMulticastJoin, 0, &e);
  *mc_handle = j.handle;
  return 0;
}

int ConnectionManager::LeaveMcast(int fd, uint32_t mc_handle, uint32_t* reported) {
  for (auto& [h, id] : table_.ids) {
    for (auto j = id.joins.begin(); j != id.joins.end(); ++j) {
      if (j->handle != mc_handle) continue;
      if (id.chan != fd) return EINVAL;  // another channel's join
      *reported = j->events_reported;
      id.joins.erase(j);
      // Its events not yet read go with it.
      auto it = table_.chans.find(fd);
      if (it == table_.chans.end()) return 0;
      auto& q = it->second.events;
      for (auto e = q.begin(); e != q.end();) {
        if (e->owner == id.handle && e->mc == mc_handle) {
          it->second.UncountEvent();  // a reader racing us may have drained it
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

}  // namespace rdmasan::softnic::cm
