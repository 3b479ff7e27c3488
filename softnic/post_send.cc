// softnic/post_send: ibv_post_send on a softnic QP: each WR checked as a
// NIC's post checks it (opcode for the QP type, SGE count, room in the
// send queue, inline size) and copied into the QP's private send ring,
// then the ring run (datapath.cc).  While destination fingerprints are on
// (fingerprint.h), a READ's or atomic's local destination is
// fingerprinted here.
//
// May not: allocate, or accept a WR a NIC would refuse at the post.
#include <errno.h>

#include <cstring>
#include <mutex>

#include "softnic/access.h"
#include "softnic/execute.h"
#include "softnic/fingerprint.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace exec {
namespace {

// The fingerprint of a READ's or atomic's local destination at its post
// (fingerprint.h), 0 if its SGEs name nothing the QP's MRs grant, or if an
// earlier READ or atomic of the QP, not yet executed, lands in the same
// bytes (ib_read_bw reads into one buffer over and over): its landing is
// no write of the program's (overlapping-destinations is the check for
// that).
uint32_t DestinationFingerprint(Process* p, SnQp* qp, const SendWqe& w) {
  const uint32_t size = static_cast<uint32_t>(qp->sq.size());
  for (uint64_t k = qp->sq_exec; k < qp->sq_posted; ++k) {
    const SendWqe& o = qp->sq[k & (size - 1)];
    if (o.opcode != IBV_WR_RDMA_READ && o.opcode != IBV_WR_ATOMIC_CMP_AND_SWP &&
        o.opcode != IBV_WR_ATOMIC_FETCH_AND_ADD)
      continue;
    for (uint32_t a = 0; a < o.num_sge; ++a)
      for (uint32_t b = 0; b < w.num_sge; ++b)
        if (o.sge[a].length && w.sge[b].length && o.sge[a].addr < w.sge[b].addr + w.sge[b].length &&
            w.sge[b].addr < o.sge[a].addr + o.sge[a].length)
          return 0;
  }
  const MrTables t{p->fab->hdr(), p->own_mrs, p->fab->self_proc(), p->own_mws};
  Seg seg[kMaxSge];
  uint32_t n = 0;
  uint64_t total = 0;
  FabricLock lock(p->fab);
  if (!ValidateSges(t, p->fab->self_proc(), qp->shm->pd, w.sge, w.num_sge, IBV_ACCESS_LOCAL_WRITE, seg, &n,
                    &total) ||
      !n)
    return 0;
  return FingerprintSegs(p->pid, p->pid, seg, n);
}

bool OpcodeAllowed(uint32_t type, uint32_t op) {
  if (type == IBV_QPT_XRC_SEND) type = IBV_QPT_RC;           // an RC requester
  if (type == IBV_QPT_RAW_PACKET) return op == IBV_WR_SEND;  // a whole frame
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type == IBV_QPT_RC || type == IBV_QPT_UC;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
    case IBV_WR_ATOMIC_WRITE:
      return type == IBV_QPT_RC;
    case IBV_WR_BIND_MW:
    case IBV_WR_LOCAL_INV:
    case IBV_WR_SEND_WITH_INV:
      return type == IBV_QPT_RC || type == IBV_QPT_UC;
    default:
      return false;
  }
}

}  // namespace
}  // namespace exec

using exec::DestinationFingerprint;
using exec::OpcodeAllowed;
using exec::RunSqLocked;

int PostSendOp(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Process* p = GetProcess();
  SnQp* qp = Qp(ibqp);
  if (!p) {
    *bad = wr;
    return ENODEV;
  }
  if (!qp->send_cq) {  // an XRC target, an RSS QP: no send queue
    *bad = wr;
    return EINVAL;
  }
  std::lock_guard<QueueMutex> g(qp->sq_mu);
  auto state = qp->shm->state.load(std::memory_order_relaxed);
  if (state != IBV_QPS_RTS && state != IBV_QPS_SQD && state != IBV_QPS_ERR) {
    *bad = wr;
    return EINVAL;
  }
  uint64_t retire_to = qp->sq_retire_to.load(std::memory_order_acquire);
  if (retire_to > qp->sq_retired) qp->sq_retired = retire_to;
  const uint32_t type = qp->shm->type;
  const uint32_t size = static_cast<uint32_t>(qp->sq.size());
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (!OpcodeAllowed(type, wr->opcode) || wr->num_sge < 0 ||
        static_cast<uint32_t>(wr->num_sge) > qp->max_send_sge || (wr->num_sge > 0 && !wr->sg_list) ||
        (type == IBV_QPT_UD && !wr->wr.ud.ah)) {
      rc = EINVAL;
      break;
    }
    if (qp->sq_posted - qp->sq_retired + 1 > qp->max_send_wr) {
      rc = ENOMEM;
      break;
    }
    SendWqe& w = qp->sq[qp->sq_posted & (size - 1)];  // RingSlots: a power of two
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.flags = wr->send_flags;
    w.imm = wr->imm_data;
    w.num_sge = wr->num_sge;
    w.rnr_since_ns = 0;
    w.retry_since_ns = 0;
    w.inline_len = 0;
    w.has_ah = false;
    w.remote_addr = w.rkey = w.compare_add = w.swap = 0;
    w.xrc_srqn = type == IBV_QPT_XRC_SEND ? wr->qp_type.xrc.remote_srqn : 0;
    w.mw_slot = kNone;
    w.mw_access = w.mw_mr_lkey = 0;
    w.mw_length = 0;
    if (wr->opcode == IBV_WR_BIND_MW) {
      const ibv_mw* mw = wr->bind_mw.mw;
      const ibv_mw_bind_info& bi = wr->bind_mw.bind_info;
      if (!mw || !IsContext(mw->context) || (!bi.mr && bi.length) ||
          (bi.mw_access_flags & IBV_ACCESS_ZERO_BASED)) {
        rc = EINVAL;
        break;
      }
      w.mw_slot = reinterpret_cast<const SnMw*>(mw)->slot;
      w.rkey = wr->bind_mw.rkey;
      w.remote_addr = bi.addr;
      w.mw_length = bi.length;
      w.mw_access = bi.mw_access_flags;
      w.mw_mr_lkey = bi.mr && bi.length ? bi.mr->lkey : 0;
      w.num_sge = 0;
      ++qp->sq_posted;
      continue;
    }
    if (wr->opcode == IBV_WR_LOCAL_INV) {
      w.imm = wr->invalidate_rkey;
      w.num_sge = 0;
      ++qp->sq_posted;
      continue;
    }
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.remote_addr = wr->wr.atomic.remote_addr;
      w.rkey = wr->wr.atomic.rkey;
      w.compare_add = wr->wr.atomic.compare_add;
      w.swap = wr->wr.atomic.swap;
    } else if (type != IBV_QPT_UD) {
      w.remote_addr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
    }
    if (type == IBV_QPT_UD) {
      w.remote_qpn = wr->wr.ud.remote_qpn;
      w.remote_qkey = wr->wr.ud.remote_qkey;
      w.ah = reinterpret_cast<SnAh*>(wr->wr.ud.ah)->attr;
      w.has_ah = true;
    }
    // An atomic write's value is 8 bytes, from its SGEs or inline (the
    // WQE carries it whatever max_inline_data is).
    const bool atomic_write = wr->opcode == IBV_WR_ATOMIC_WRITE;
    if (atomic_write) {
      uint64_t total = 0;
      for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
      if (total != kAtomicWriteBytes) {
        rc = EINVAL;
        break;
      }
    }
    if (wr->send_flags & IBV_SEND_INLINE) {
      uint64_t total = 0;
      for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
      if ((total > qp->max_inline && !atomic_write) || wr->opcode == IBV_WR_RDMA_READ ||
          wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        rc = EINVAL;
        break;
      }
      uint32_t off = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        // A zero-length SGE may carry a null address (UCX posts one): no copy.
        if (wr->sg_list[i].length)
          memcpy(w.inline_data + off, reinterpret_cast<const void*>(wr->sg_list[i].addr),
                 wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
      w.inline_len = off;
    } else {
      for (int i = 0; i < wr->num_sge; ++i)
        w.sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    }
    w.dst_fp = 0;
    if (FingerprintsOn() && (wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                             wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD))
      w.dst_fp = DestinationFingerprint(p, qp, w);
    ++qp->sq_posted;
  }
  if (rc) *bad = wr;
  {
    FabricLock lock(p->fab);
    RunSqLocked(p, qp);
  }
  if (qp->sq_exec < qp->sq_posted) {
    qp->send_cq->stalled.store(1, std::memory_order_relaxed);
    p->sq_stalled.store(1, std::memory_order_relaxed);
    if (qp->recv_cq) qp->recv_cq->stalled.store(1, std::memory_order_relaxed);
  }
  return rc;
}

}  // namespace rdmasan::softnic
