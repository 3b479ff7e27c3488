// softnic/tag_matching: a SEND to an RC QP on a tag-matching SRQ (tm.cc
// keeps the tag list), executed by the requester (execute.h): its payload
// starts with a struct ibv_tmh.  EAGER with a matching tag: the payload
// after the TMH lands in the tagged buffer (IBV_WC_TM_RECV, TM_MATCH |
// TM_DATA_VALID, the tag and app_ctx in the TM info).  RNDV with a match:
// a TM_RECV with TM_MATCH at once, then the responder reads the data the
// struct ibv_rvh names from the requester (its rkey must grant
// REMOTE_READ) into the tagged buffer (TM_RECV, TM_DATA_VALID; a read that
// fails completes TM_RNDV_INCOMPLETE and software finishes it), and sends
// the requester a FIN (a TMH of op IBV_TMH_FIN) into its next receive.
// Unmatched EAGER or RNDV: unexpected, the whole message lands in an
// ordinary receive of the SRQ (TM_RECV, no TM flags) and the SRQ counts
// it; NO_TAG likewise, as IBV_WC_TM_NO_TAG, uncounted.  Anything else is
// a plain IBV_WC_RECV.
//
// May not: touch memory outside what a valid key grants, allocate, or call
// the application (it runs on the post path, under the fabric lock).
#include <endian.h>
#include <errno.h>
#include <unistd.h>

#include <infiniband/tm_types.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "softnic/access.h"
#include "softnic/execute.h"
#include "softnic/internal.h"

namespace rdmasan::softnic::exec {
namespace {

// Segments `lseg` less their first `skip` bytes.
uint32_t SkipBytes(const Seg* lseg, uint32_t nl, uint64_t skip, Seg* out) {
  uint32_t n = 0;
  for (uint32_t i = 0; i < nl; ++i) {
    if (skip >= lseg[i].len) {
      skip -= lseg[i].len;
      continue;
    }
    out[n++] = {lseg[i].va + skip, static_cast<uint32_t>(lseg[i].len - skip), lseg[i].key};
    skip = 0;
  }
  return n;
}

// A tag entry as a receive WQE (its buffer and recv_wr_id).
ShmRecvWqe* TagAsRecv(const ShmTag& t, RecvCopy* copy) {
  ShmRecvWqe* w = copy->wqe();
  w->wr_id = t.recv_wr_id;
  w->num_sge = t.num_sge;
  for (uint32_t i = 0; i < t.num_sge; ++i) w->sge[i] = t.sge[i];
  return w;
}

int DeliverRndv(Exec& x, const SendWqe& w, ShmQp& resp, const ShmTag& t, const ibv_tmh& tmh,
                const ibv_rvh& rvh, pid_t dst_pid, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  RecvCopy copy;
  ShmRecvWqe* rw = TagAsRecv(t, &copy);
  ShmCqe head{};
  InitRecvCqe(w, len, &head);
  head.opcode = IBV_WC_TM_RECV;
  head.wc_flags |= IBV_WC_TM_MATCH;
  head.tm = kTmTagFirst;
  head.tm_srq = x.tm_srq;
  head.tm_handle = x.tm_handle;
  head.tm_tag = be64toh(tmh.tag);
  head.tm_priv = be32toh(tmh.app_ctx);
  RecvCompletion(x, resp, rw, head, IBV_WC_SUCCESS);
  // The responder's RDMA READ: the requester's QP is its responder.
  const uint32_t rlen = be32toh(rvh.len);
  const uint32_t srq_pd = x.h->srqs[x.tm_srq].pd;
  Seg rseg[kMaxSge];
  uint32_t nr = 0;
  uint64_t cap = 0, src_va = 0;
  uint32_t status = IBV_WC_SUCCESS;
  if (!ValidateSges(x.mrs, x.resp_proc, srq_pd, rw->sge, std::min(rw->num_sge, kTmMaxSge),
                    IBV_ACCESS_LOCAL_WRITE, rseg, &nr, &cap) ||
      rlen > cap ||
      !ValidateRkeyIn(x.mrs, me, x.p->fab->self_proc(), me.pd, be32toh(rvh.rkey), be64toh(rvh.va), rlen,
                      IBV_ACCESS_REMOTE_READ, &src_va)) {
    Why(x,
        "TM_RNDV_INCOMPLETE at the responder QP 0x%x: the rendezvous read of %u bytes (rkey 0x%x) was "
        "refused",
        resp.qpn, rlen, be32toh(rvh.rkey));
    status = IBV_WC_TM_RNDV_INCOMPLETE;
  } else if (rlen) {
    Seg src{src_va, rlen};
    if (Move(x.self, dst_pid, rseg, nr, x.self, &src, 1)) {
      Why(x, "TM_RNDV_INCOMPLETE at the responder QP 0x%x: memory of the rendezvous read is gone", resp.qpn);
      status = IBV_WC_TM_RNDV_INCOMPLETE;
    }
  }
  ShmCqe data{};
  data.opcode = IBV_WC_TM_RECV;
  data.wc_flags = status == IBV_WC_SUCCESS ? IBV_WC_TM_DATA_VALID : 0;
  data.byte_len = status == IBV_WC_SUCCESS ? rlen : 0;
  data.tm = kTmTagLast;
  data.tm_srq = x.tm_srq;
  data.tm_handle = x.tm_handle;
  RecvCompletion(x, resp, rw, data, status);
  if (status == IBV_WC_SUCCESS) {
    x.fin_pending = true;
    x.fin_tag = tmh.tag;
    x.fin_from = resp.qpn;
  }
  return IBV_WC_SUCCESS;
}

}  // namespace

// The FIN of a rendezvous, into the requester's next receive (after its
// SEND's completion).  With none posted the FIN is lost (a NIC's responder
// would retry on RNR; software learns of the data from its own SEND).
void DeliverFinLocked(Exec& x) {
  x.fin_pending = false;
  ShmQp& me = *x.qp->shm;
  x.xrc_srq = kNone;
  x.tm_handle = kNone;
  uint32_t srq_slot;
  RecvCopy copy;
  bool corrupt;
  ShmRecvWqe* rw = TakeRecv(x, me, &srq_slot, &copy, &corrupt);
  if (!rw) return;
  ibv_tmh fin{};
  fin.opcode = IBV_TMH_FIN;
  fin.tag = x.fin_tag;
  const uint32_t pd = srq_slot != kNone ? x.h->srqs[srq_slot].pd : me.pd;
  Seg rseg[kMaxSge];
  uint32_t nr = 0;
  uint64_t cap = 0;
  uint32_t status = IBV_WC_SUCCESS;
  if (!ValidateSges(x.mrs, x.p->fab->self_proc(), pd, rw->sge, std::min(rw->num_sge, kMaxSge),
                    IBV_ACCESS_LOCAL_WRITE, rseg, &nr, &cap)) {
    status = IBV_WC_LOC_PROT_ERR;
  } else if (cap < sizeof(fin)) {
    status = IBV_WC_LOC_LEN_ERR;
  } else {
    Seg src{reinterpret_cast<uint64_t>(&fin), sizeof(fin)};
    if (Move(x.self, x.self, rseg, nr, x.self, &src, 1)) status = IBV_WC_LOC_PROT_ERR;
  }
  ShmCqe c{};
  c.wr_id = rw->wr_id;
  c.status = status;
  c.opcode = IBV_WC_RECV;
  c.byte_len = sizeof(fin);
  c.qp_num = me.qpn;
  c.qp_slot = x.qp->slot;
  c.src_qp = x.fin_from;
  c.slid = 1;
  PushCqeLocked(x.p, me.recv_cq, c);
}

int ExecuteTmSend(Exec& x, SendWqe& w, ShmQp& resp, const Seg* lseg, uint32_t nl, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  uint8_t hdr[sizeof(ibv_tmh) + sizeof(ibv_rvh)] = {};
  const uint32_t hl = static_cast<uint32_t>(std::min<uint64_t>(len, sizeof(hdr)));
  Seg hs{reinterpret_cast<uint64_t>(hdr), hl};
  if (hl && Move(x.self, x.self, &hs, 1, x.self, lseg, nl)) {
    Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
    return IBV_WC_LOC_PROT_ERR;
  }
  ibv_tmh tmh;
  ibv_rvh rvh;
  memcpy(&tmh, hdr, sizeof(tmh));
  memcpy(&rvh, hdr + sizeof(tmh), sizeof(rvh));
  const uint32_t srq = resp.srq;
  const uint32_t op = len >= sizeof(tmh) ? tmh.opcode : 0xff;
  const bool tagged = op == IBV_TMH_EAGER || (op == IBV_TMH_RNDV && len >= sizeof(hdr));
  const pid_t dst_pid = x.resp_proc == x.p->fab->self_proc() ? x.self : x.p->fab->PeerPid(x.resp_proc);
  if (!dst_pid) return NoResponder(x, "its process is gone");
  if (tagged) {
    ShmTag t;
    const uint32_t handle = MatchTagLocked(x.p->fab, srq, be64toh(tmh.tag), &t);
    if (handle != kNone) {
      x.tm_srq = srq;
      x.tm_handle = handle;
      if (op == IBV_TMH_RNDV) return DeliverRndv(x, w, resp, t, tmh, rvh, dst_pid, len);
      RecvCopy copy;
      ShmRecvWqe* rw = TagAsRecv(t, &copy);
      Seg body[kMaxSge];
      const uint32_t nb = SkipBytes(lseg, nl, sizeof(tmh), body);
      ShmCqe c{};
      InitRecvCqe(w, len - sizeof(tmh), &c);
      c.opcode = IBV_WC_TM_RECV;
      c.wc_flags |= IBV_WC_TM_MATCH | IBV_WC_TM_DATA_VALID;
      c.tm = kTmTagLast;
      c.tm_srq = srq;
      c.tm_handle = handle;
      c.tm_tag = be64toh(tmh.tag);
      c.tm_priv = be32toh(tmh.app_ctx);
      return DeliverSend(x, w, resp, rw, srq, c, dst_pid, body, nb, len - sizeof(tmh));
    }
  }
  // Unexpected, NO_TAG, or no TMH: an ordinary receive of the SRQ.
  uint32_t srq_slot;
  RecvCopy copy;
  bool corrupt;
  ShmRecvWqe* rw = TakeRecv(x, resp, &srq_slot, &copy, &corrupt);
  if (corrupt) return NoResponder(x, "its receive queue's shared fields describe no ring");
  if (!rw) return NoReceiveWqe(x, me, resp, w);
  ShmCqe c{};
  InitRecvCqe(w, len, &c);
  c.opcode = tagged ? IBV_WC_TM_RECV : op == IBV_TMH_NO_TAG ? IBV_WC_TM_NO_TAG : IBV_WC_RECV;
  const int st = DeliverSend(x, w, resp, rw, srq_slot, c, dst_pid, lseg, nl, len);
  if (st == IBV_WC_SUCCESS && tagged) ++x.h->srqs[srq].tm_unexpected;
  return st;
}

}  // namespace rdmasan::softnic::exec
