// softnic/cm_commands: the rdma_ucm commands a program writes to a channel
// (cm_state.h), one handler per command and a table from command number
// to handler.  Each handler decodes its argument struct (cm_abi.h), checks
// it against the id's state as the kernel's rdma_ucm does, moves the
// state machine and collects the messages to send; Command runs it under
// the table's lock and sends those messages after dropping it.
//
// May not: send or block in a handler (the lock is held), or touch the
// program's memory except through CopyIn/CopyOut.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <string>

#include "softnic/cm_abi.h"
#include "softnic/cm_address.h"
#include "softnic/cm_state.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic::cm {
namespace {

// One command written to a channel: the channel, the command's number, the
// room of its response (the header's `out`), its argument bytes, and where
// the messages it produces go.
struct CommandCall {
  int fd;
  uint32_t cmd;
  uint32_t out_len;
  const uint8_t* in;
  size_t in_len;
  Outbox* out;

  template <typename T>
  T Arg() const {
    return cm::Arg<T>(in, in_len);
  }
};

// A command's handler, run with the table's lock held: 0, or the errno the
// command fails with.
using CommandHandler = int (*)(ConnectionManager& cm, const CommandCall& call);

int CreateId(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_create_id>();
  if (call.out_len < sizeof(rdma_ucm_create_id_resp)) return ENOSPC;
  if (cmd.ps != RDMA_PS_TCP && cmd.ps != RDMA_PS_UDP && cmd.ps != RDMA_PS_IPOIB && cmd.ps != RDMA_PS_IB)
    return EINVAL;
  if (cmd.qp_type != IBV_QPT_RC && cmd.qp_type != IBV_QPT_UC && cmd.qp_type != IBV_QPT_UD) return EINVAL;
  CmId id;
  id.handle = cm.table().next_handle++;
  id.uid = cmd.uid;
  id.chan = call.fd;
  id.ps = cmd.ps;
  id.qp_type = cmd.qp_type;
  id.src.sin6_family = AF_INET;
  rdma_ucm_create_id_resp resp{id.handle};
  if (const int e = CopyOut(cmd.response, &resp, sizeof(resp))) return e;
  cm.table().ids.emplace(id.handle, std::move(id));
  return 0;
}

int DestroyId(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_destroy_id>();
  if (call.out_len < sizeof(rdma_ucm_destroy_id_resp)) return ENOSPC;
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  cm.Teardown(*id, call.out);
  rdma_ucm_destroy_id_resp resp{id->events_reported};
  cm.Erase(cmd.id);
  return CopyOut(cmd.response, &resp, sizeof(resp));
}

// BIND_IP and BIND (AF_IB addresses are not softnic's).
int Bind(ConnectionManager& cm, const CommandCall& call) {
  uint32_t h;
  sockaddr_in6 a;
  if (call.cmd == RDMA_USER_CM_CMD_BIND_IP) {
    const auto cmd = call.Arg<rdma_ucm_bind_ip>();
    h = cmd.id;
    if (!TakeAddr(&cmd.addr, sizeof(cmd.addr), &a)) return EAFNOSUPPORT;
  } else {
    const auto cmd = call.Arg<rdma_ucm_bind>();
    h = cmd.id;
    // AF_IB addresses are not softnic's: librdmacm then uses the IP calls.
    if (!TakeAddr(&cmd.addr, std::min<size_t>(cmd.addr_size, sizeof(cmd.addr)), &a)) return EAFNOSUPPORT;
  }
  CmId* id = cm.Find(h, call.fd);
  if (!id) return EINVAL;
  if (const int e = cm.BindIp(*id, a)) return e;
  return 0;
}

// RESOLVE_IP and RESOLVE_ADDR.
int ResolveAddr(ConnectionManager& cm, const CommandCall& call) {
  uint32_t h;
  sockaddr_in6 src{}, dst{};
  bool have_src = false, have_dst = false;
  if (call.cmd == RDMA_USER_CM_CMD_RESOLVE_IP) {
    const auto cmd = call.Arg<rdma_ucm_resolve_ip>();
    h = cmd.id;
    have_src = TakeAddr(&cmd.src_addr, sizeof(cmd.src_addr), &src);
    have_dst = TakeAddr(&cmd.dst_addr, sizeof(cmd.dst_addr), &dst);
  } else {
    const auto cmd = call.Arg<rdma_ucm_resolve_addr>();
    h = cmd.id;
    have_src =
        cmd.src_size && TakeAddr(&cmd.src_addr, std::min<size_t>(cmd.src_size, sizeof(cmd.src_addr)), &src);
    have_dst = TakeAddr(&cmd.dst_addr, std::min<size_t>(cmd.dst_size, sizeof(cmd.dst_addr)), &dst);
  }
  CmId* id = cm.Find(h, call.fd);
  if (!id) return EINVAL;
  if (!have_dst) return EAFNOSUPPORT;
  if (id->st != IdState::kIdle && id->st != IdState::kAddrResolved) return EINVAL;
  if (!id->port) {
    // Resolving binds: to the given source, else to the destination's
    // own address (a local destination is this host), else unbound.
    sockaddr_in6 a{};
    if (have_src && !IsAny(src)) {
      if (!IsLocal(src)) return EADDRNOTAVAIL;
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
    if (const int e = cm.ReservePortFor(*id, PortOf(a))) return e;
    id->src = a;
    SetPort(&id->src, id->port);
  }
  id->dst = dst;
  if (!IsLocal(dst) && !IsMcastAddr(dst)) {
    // Another host: softnic reaches only this one.
    cm.Queue(*id, id->handle, kEventAddrError, -EHOSTUNREACH);
    return 0;
  }
  if (IsAny(id->src)) {
    const uint16_t p = id->port;
    id->src = IsMcastAddr(dst) ? Loopback(dst.sin6_family) : dst;
    SetPort(&id->src, p);
  }
  id->on_device = true;
  id->st = IdState::kAddrResolved;
  cm.Queue(*id, id->handle, kEventAddrResolved, 0);
  return 0;
}

int ResolveRoute(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_resolve_route>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  if (id->st != IdState::kAddrResolved && id->st != IdState::kRouteResolved) return EINVAL;
  id->route = true;
  id->st = IdState::kRouteResolved;
  cm.Queue(*id, id->handle, kEventRouteResolved, 0);
  return 0;
}

int QueryRoute(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_query>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
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
  if (const int e = CopyOut(cmd.response, &resp,
                            std::min<size_t>(call.out_len, offsetof(rdma_ucm_query_route_resp, ibdev_index))))
    return e;
  return 0;
}

int Query(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_query>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
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
                    std::min<size_t>(call.out_len, offsetof(rdma_ucm_query_addr_resp, ibdev_index))))
      return e;
    return 0;
  }
  if (cmd.option == RDMA_USER_CM_QUERY_PATH) {
    rdma_ucm_query_path_resp resp{};
    resp.num_paths = 0;  // librdmacm asks this only of AF_IB ids, which softnic refuses
    if (const int e = CopyOut(cmd.response, &resp, std::min<size_t>(call.out_len, sizeof(resp)))) return e;
    return 0;
  }
  return EINVAL;
}

int Listen(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_listen>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  if (id->st == IdState::kListen) {
    id->backlog = static_cast<int>(cmd.backlog);
    return 0;
  }
  if (id->st != IdState::kIdle) return EINVAL;
  if (!id->port) {
    sockaddr_in6 any{};
    any.sin6_family = id->src.sin6_family ? id->src.sin6_family : AF_INET;
    if (const int e = cm.BindIp(*id, any)) return e;
  }
  id->st = IdState::kListen;
  id->backlog = static_cast<int>(cmd.backlog);
  cm.PublishPort(*id);
  return 0;
}

int Connect(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_connect>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  if (id->st != IdState::kRouteResolved) return EINVAL;
  const bool ud = id->qp_type == IBV_QPT_UD;
  const auto& cp = cmd.conn_param;
  if (cp.private_data_len > Room(id->ps, ud ? kSidrReqRoom : kReqRoom)) return EINVAL;
  id->qpn = cp.qp_num & 0xffffff;
  id->psn = Random24();
  id->qkey = cp.qkey ? cp.qkey : kUdpQkey;
  id->responder_resources = cp.responder_resources;
  id->initiator_depth = cp.initiator_depth;
  id->retry_count = cp.retry_count;
  PortRecord rec;
  Msg m = cm.NewMsg(*id, ud ? MsgType::kSidrReq : MsgType::kReq);
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
  id->st = IdState::kConnect;
  if (!LookupPort(cm.table().folder, id->ps, PortOf(id->dst), &rec) || !rec.listening) {
    cm.ConnectUnheard(*id, m);  // no listener (yet)
    return 0;
  }
  id->peer_inbox = rec.inbox;
  id->peer_handle = rec.handle;
  m.dst_handle = rec.handle;
  cm.Send(call.out, *id, m, kEventUnreachable, -ETIMEDOUT);
  return 0;
}

int Accept(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_accept>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  const auto& cp = cmd.conn_param;
  if (id->st == IdState::kRepRcvd) {
    // The active side's RTU (librdmacm's ucma_process_conn_resp).
    cm.Send(call.out, *id, cm.NewMsg(*id, MsgType::kRtu));
    id->st = IdState::kEstablished;
    return 0;
  }
  if (id->st != IdState::kReqRcvd) return EINVAL;
  const bool ud = id->qp_type == IBV_QPT_UD;
  if (cp.private_data_len > (ud ? kSidrRepRoom : kRepRoom)) return EINVAL;
  if (cmd.uid) id->uid = cmd.uid;
  id->qpn = cp.qp_num & 0xffffff;
  if (cp.valid) {
    id->responder_resources = cp.responder_resources;
    id->initiator_depth = cp.initiator_depth;
  }
  Msg m = cm.NewMsg(*id, ud ? MsgType::kSidrRep : MsgType::kRep);
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
  id->st = ud ? IdState::kEstablished : IdState::kRepSent;
  cm.Send(call.out, *id, m);
  return 0;
}

int Reject(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_reject>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  if (id->st != IdState::kReqRcvd && id->st != IdState::kRepRcvd) return EINVAL;
  const bool ud = id->qp_type == IBV_QPT_UD;
  if (cmd.private_data_len > (ud ? kSidrRepRoom : kRejRoom)) return EINVAL;
  Msg m = cm.NewMsg(*id, ud ? MsgType::kSidrRep : MsgType::kRej);
  m.reason = ud ? kSidrReject : (cmd.reason ? cmd.reason : kRejConsumer);
  m.private_data_len = cmd.private_data_len;
  memcpy(m.private_data, cmd.private_data, cmd.private_data_len);
  cm.Send(call.out, *id, m);
  id->st = IdState::kDisconnected;
  id->reported_disconnect = true;
  return 0;
}

int Disconnect(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_disconnect>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  if (id->st == IdState::kDisconnected || id->st == IdState::kDreqSent) {
    if (id->st == IdState::kDisconnected && !id->peer_inbox.empty())
      cm.Send(call.out, *id, cm.NewMsg(*id, MsgType::kDrep));
    return 0;
  }
  if (id->st != IdState::kEstablished && id->st != IdState::kRepRcvd && id->st != IdState::kRepSent)
    return EINVAL;
  id->st = IdState::kDreqSent;
  cm.Send(call.out, *id, cm.NewMsg(*id, MsgType::kDreq), kEventDisconnected, 0);
  return 0;
}

int InitQpAttrCommand(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_init_qp_attr>();
  if (call.out_len < sizeof(ib_uverbs_qp_attr)) return ENOSPC;
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  ib_uverbs_qp_attr a;
  if (const int e = InitQpAttr(*id, cmd.qp_state, &a)) return e;
  if (const int e = CopyOut(cmd.response, &a, sizeof(a))) return e;
  return 0;
}

int SetOption(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_set_option>();
  CmId* id = cm.Find(cmd.id, call.fd);
  if (!id) return EINVAL;
  if (cmd.level == RDMA_OPTION_ID) {
    if (cmd.optname > RDMA_OPTION_ID_ACK_TIMEOUT) return ENOSYS;
    uint8_t v[4] = {};
    if (cmd.optlen > sizeof(v) || cmd.optlen == 0) return EINVAL;
    if (const int e = CopyIn(v, cmd.optval, cmd.optlen)) return e;
    // The ACK timeout is what the RTS attributes carry (as the kernel
    // does, 5 bits); type of service, address reuse and v6-only have
    // no effect on softnic.
    if (cmd.optname == RDMA_OPTION_ID_ACK_TIMEOUT) id->ack_timeout = v[0] & 0x1f;
    return 0;
  }
  if (cmd.level == RDMA_OPTION_IB && cmd.optname == RDMA_OPTION_IB_PATH) {
    if (cmd.optlen == 0 || cmd.optlen % sizeof(ib_path_rec_data) != 0) return EINVAL;
    if (id->st != IdState::kAddrResolved && id->st != IdState::kRouteResolved) return EINVAL;
    id->route = true;
    id->st = IdState::kRouteResolved;
    cm.Queue(*id, id->handle, kEventRouteResolved, 0);
    return 0;
  }
  return ENOSYS;
}

int Notify(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_notify>();
  if (!cm.Find(cmd.id, call.fd)) return EINVAL;
  return 0;
}

int MigrateId(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_migrate_id>();
  if (call.out_len < sizeof(rdma_ucm_migrate_resp)) return ENOSPC;
  CmId* id = cm.Find(cmd.id, static_cast<int>(cmd.fd));
  if (!id) return EINVAL;
  const int old = id->chan;
  rdma_ucm_migrate_resp resp{id->events_reported};
  if (old != call.fd) {
    auto from = cm.table().chans.find(old);
    auto to = cm.table().chans.find(call.fd);
    // Queued events of the id move with it, as the kernel moves them.
    for (auto e = from->second.events.begin(); e != from->second.events.end();) {
      if (e->owner == id->handle) {
        to->second.events.push_back(*e);
        if (from->second.UncountEvent()) to->second.CountEvent();
        e = from->second.events.erase(e);
      } else {
        ++e;
      }
    }
    const std::string former = from->second.name;
    id->chan = call.fd;
    cm.PublishPort(*id);
    if (!id->peer_inbox.empty() && id->st != IdState::kIdle) {
      Msg m = cm.NewMsg(*id, MsgType::kMoved);
      snprintf(reinterpret_cast<char*>(m.private_data), kNameLen, "%s", former.c_str());
      cm.Send(call.out, *id, m);
    }
  }
  return CopyOut(cmd.response, &resp, sizeof(resp));
}

// JOIN_IP_MCAST and JOIN_MCAST.
int JoinMcastCommand(ConnectionManager& cm, const CommandCall& call) {
  if (call.out_len < sizeof(rdma_ucm_create_id_resp)) return ENOSPC;
  uint32_t h;
  uint64_t uid, response;
  uint16_t flags = RDMA_MC_JOIN_FLAG_FULLMEMBER;
  sockaddr_in6 a{};
  bool have = false;
  if (call.cmd == RDMA_USER_CM_CMD_JOIN_IP_MCAST) {
    const auto cmd = call.Arg<rdma_ucm_join_ip_mcast>();
    h = cmd.id, uid = cmd.uid, response = cmd.response;
    have = TakeAddr(&cmd.addr, sizeof(cmd.addr), &a);
  } else {
    const auto cmd = call.Arg<rdma_ucm_join_mcast>();
    h = cmd.id, uid = cmd.uid, response = cmd.response, flags = cmd.join_flags;
    have = cmd.addr_size <= sizeof(cmd.addr) && TakeAddr(&cmd.addr, cmd.addr_size, &a);
  }
  CmId* id = cm.Find(h, call.fd);
  if (!id) return EINVAL;
  if (!have) return EINVAL;
  rdma_ucm_create_id_resp resp{};
  if (const int e = cm.JoinMcast(*id, a, flags, uid, &resp.id)) return e;
  return CopyOut(response, &resp, sizeof(resp));
}

int LeaveMcastCommand(ConnectionManager& cm, const CommandCall& call) {
  const auto cmd = call.Arg<rdma_ucm_destroy_id>();
  if (call.out_len < sizeof(rdma_ucm_destroy_id_resp)) return ENOSPC;
  rdma_ucm_destroy_id_resp resp{};
  if (const int e = cm.LeaveMcast(call.fd, cmd.id, &resp.events_reported)) return e;
  return CopyOut(cmd.response, &resp, sizeof(resp));
}

int GetOption(ConnectionManager&, const CommandCall&) { return ENOSYS; }

// GET_EVENT is not here: it reads the inbox and may block, so it runs
// without the lock (ConnectionManager::GetEvent).  Unknown commands: EINVAL.
constexpr std::array<CommandHandler, RDMA_USER_CM_CMD_JOIN_MCAST + 1> kHandlers = [] {
  std::array<CommandHandler, RDMA_USER_CM_CMD_JOIN_MCAST + 1> t{};
  t[RDMA_USER_CM_CMD_CREATE_ID] = CreateId;
  t[RDMA_USER_CM_CMD_DESTROY_ID] = DestroyId;
  t[RDMA_USER_CM_CMD_BIND_IP] = Bind;
  t[RDMA_USER_CM_CMD_BIND] = Bind;
  t[RDMA_USER_CM_CMD_RESOLVE_IP] = ResolveAddr;
  t[RDMA_USER_CM_CMD_RESOLVE_ADDR] = ResolveAddr;
  t[RDMA_USER_CM_CMD_RESOLVE_ROUTE] = ResolveRoute;
  t[RDMA_USER_CM_CMD_QUERY_ROUTE] = QueryRoute;
  t[RDMA_USER_CM_CMD_QUERY] = Query;
  t[RDMA_USER_CM_CMD_LISTEN] = Listen;
  t[RDMA_USER_CM_CMD_CONNECT] = Connect;
  t[RDMA_USER_CM_CMD_ACCEPT] = Accept;
  t[RDMA_USER_CM_CMD_REJECT] = Reject;
  t[RDMA_USER_CM_CMD_DISCONNECT] = Disconnect;
  t[RDMA_USER_CM_CMD_INIT_QP_ATTR] = InitQpAttrCommand;
  t[RDMA_USER_CM_CMD_GET_OPTION] = GetOption;
  t[RDMA_USER_CM_CMD_SET_OPTION] = SetOption;
  t[RDMA_USER_CM_CMD_NOTIFY] = Notify;
  t[RDMA_USER_CM_CMD_MIGRATE_ID] = MigrateId;
  t[RDMA_USER_CM_CMD_JOIN_IP_MCAST] = JoinMcastCommand;
  t[RDMA_USER_CM_CMD_JOIN_MCAST] = JoinMcastCommand;
  t[RDMA_USER_CM_CMD_LEAVE_MCAST] = LeaveMcastCommand;
  return t;
}();

ssize_t Fail(int err) {
  errno = err;
  return -1;
}

}  // namespace

ssize_t ConnectionManager::Command(int fd, const void* buf, size_t len) {
  rdma_ucm_cmd_hdr hdr;
  if (len < sizeof(hdr)) return Fail(EINVAL);
  memcpy(&hdr, buf, sizeof(hdr));
  if (hdr.in + sizeof(hdr) > len) return Fail(EINVAL);
  const uint8_t* in = static_cast<const uint8_t*>(buf) + sizeof(hdr);
  const ssize_t ok = static_cast<ssize_t>(len);

  if (hdr.cmd == RDMA_USER_CM_CMD_GET_EVENT) {
    const auto cmd = Arg<rdma_ucm_get_event>(in, hdr.in);
    return GetEvent(fd, cmd.response, hdr.out) < 0 ? -1 : ok;
  }

  Outbox out;
  int err = 0;
  {
    std::lock_guard<std::mutex> l(table_.mu);
    if (!table_.chans.contains(fd)) return Fail(EBADF);
    const CommandHandler handler = hdr.cmd < kHandlers.size() ? kHandlers[hdr.cmd] : nullptr;
    err = handler ? handler(*this, CommandCall{fd, hdr.cmd, hdr.out, in, hdr.in, &out}) : EINVAL;
    RetryAwaiting(&out);  // a listen of this process, a destroyed waiting id
  }
  Flush(&out);
  if (err) return Fail(err);
  return ok;
}

}  // namespace rdmasan::softnic::cm
