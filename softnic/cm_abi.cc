// softnic/cm_abi: see cm_abi.h.
#include "softnic/cm_abi.h"

#include <arpa/inet.h>

#include "softnic/access.h"
#include "softnic/cm_address.h"
#include "softnic/cm_state.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic::cm {

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

void FillUd(uint32_t qpn, uint32_t qkey, const Msg* m, const sockaddr_in6& src, const sockaddr_in6& dst,
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

void FillPath(const CmId& id, ib_user_path_rec* p) {
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

int InitQpAttr(const CmId& id, uint32_t state, ib_uverbs_qp_attr* a) {
  *a = {};
  a->qp_state = state;
  const bool ud = id.qp_type == IBV_QPT_UD;
  const bool connected = id.st == IdState::kReqRcvd || id.st == IdState::kRepSent ||
                         id.st == IdState::kRepRcvd || id.st == IdState::kEstablished ||
                         id.st == IdState::kConnect;
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
      if (!connected || id.st == IdState::kConnect) return EINVAL;
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
      if (!connected || id.st == IdState::kConnect) return EINVAL;
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

}  // namespace rdmasan::softnic::cm
