// softnic receive posting: ibv_post_recv and ibv_post_srq_recv write WQEs
// into the receive rings in the fabric, where requesters take them.
//
// While destination fingerprints are on (fingerprint.h), each WQE carries
// the fingerprint of its buffers as they are at the post.
//
// A post takes the queue's own lock (posts of the owner's threads), not the
// fabric lock: the owner is the ring's only writer of WQEs and of `head`,
// which it publishes with a release store after the WQE (RqHead,
// PublishRqHead); requesters take at `tail` under the fabric lock.  A
// QP's own queue also keeps its posts in private memory (SnQp::rq_shadow),
// where its poller finds the buffers of a completion staged in one line.
//
// May not: allocate, or post beyond the queue's capacity (ENOMEM, like a
// NIC).
#include <errno.h>

#include <algorithm>
#include <mutex>

#include "softnic/fingerprint.h"
#include "softnic/internal.h"

namespace rdmasan::softnic {
namespace {

// The fingerprint of a receive's buffers (0: none): only over what the
// process's MRs of `pd` grant for local write, so nothing else is read.
// None either when a receive already waiting in the queue `rq` overlaps
// them (ibv_rc_pingpong posts every receive on one buffer): the messages
// landing in those would change its bytes before its own, and only the
// program's writes are this check's business (overlapping-destinations
// is the check for the overlap).
uint32_t RecvFingerprint(Process* p, ShmRq* rq, uint32_t pd, const ibv_recv_wr* wr) {
  if (!FingerprintsOn() || wr->num_sge <= 0 || static_cast<uint32_t>(wr->num_sge) > kMaxSge) return 0;
  ShmSge sge[kMaxSge];
  for (int i = 0; i < wr->num_sge; ++i)
    sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
  const uint64_t head = RqHead(*rq), tail = rq->tail;
  if (head - tail > rq->nslots) return 0;  // not a ring: nothing to compare with
  for (uint64_t k = tail; k < head; ++k) {
    const ShmRecvWqe* o = p->fab->RqEntry(*rq, k);
    if (!o) return 0;
    const uint32_t on = std::min(o->num_sge, std::min(rq->max_sge, kMaxSge));
    for (uint32_t a = 0; a < on; ++a)
      for (int b = 0; b < wr->num_sge; ++b)
        if (o->sge[a].length && sge[b].length && o->sge[a].addr < sge[b].addr + sge[b].length &&
            sge[b].addr < o->sge[a].addr + o->sge[a].length)
          return 0;
  }
  const MrTables t{p->fab->hdr(), p->own_mrs, p->fab->self_proc(), p->own_mws};
  Seg seg[kMaxSge];
  uint32_t n = 0;
  uint64_t total = 0;
  if (!ValidateSges(t, p->fab->self_proc(), pd, sge, static_cast<uint32_t>(wr->num_sge),
                    IBV_ACCESS_LOCAL_WRITE, seg, &n, &total) ||
      !n)
    return 0;
  return FingerprintSegs(p->pid, p->pid, seg, n);
}

template <typename Count>
int PostRecvCommon(Process* p, QueueMutex* mu, ShmRq* rq, Count* outstanding, uint32_t max_wr,
                   uint32_t max_sge, ibv_recv_wr* wr, ibv_recv_wr** bad, ShmQp* flush_qp, uint32_t pd,
                   std::vector<RecvShadow>* shadow) {
  std::lock_guard<QueueMutex> g(*mu);
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge ||
        (wr->num_sge > 0 && !wr->sg_list)) {
      rc = EINVAL;
      break;
    }
    if (Outstanding(*outstanding) + 1 > max_wr) {
      rc = ENOMEM;
      break;
    }
    // The ring's fields live in shared memory: a ring they no longer
    // describe (or a WR wider than it) is refused, never written through.
    const uint64_t head = RqHead(*rq);
    auto* w = p->fab->RqEntry(*rq, head);
    if (!w || static_cast<uint32_t>(wr->num_sge) > rq->max_sge) {
      rc = ENOMEM;
      break;
    }
    w->wr_id = wr->wr_id;
    w->num_sge = wr->num_sge;
    if (__builtin_expect(FingerprintsOn(), 0)) {
      FabricLock lock(p->fab);  // the MR tables, and the queue's tail
      w->pad = RecvFingerprint(p, rq, pd, wr);
    } else {
      w->pad = 0;
    }
    for (int i = 0; i < wr->num_sge; ++i)
      w->sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    if (shadow && !shadow->empty()) {
      RecvShadow& s = (*shadow)[head & (shadow->size() - 1)];  // RingSlots: a power of two
      s.wr_id = wr->wr_id;
      s.num_sge = static_cast<uint32_t>(wr->num_sge);
      const uint32_t kept = std::min<uint32_t>(s.num_sge, kStageSges);
      for (uint32_t i = 0; i < kept; ++i) s.sge[i] = w->sge[i];
    }
    // Published: a requester that reads the new head finds the WQE whole.
    PublishRqHead(rq, head + 1);
    NotePosted(*outstanding);
  }
  if (rc) *bad = wr;
  // A QP that went to error meanwhile (a peer's flush ran under the fabric
  // lock before it saw this head) flushes what was just posted: the head's
  // store above and the state's store in MoveToErrorLocked are both
  // sequentially consistent, so one of the two sides sees the other.
  if (flush_qp && flush_qp->state.load(std::memory_order_seq_cst) == IBV_QPS_ERR) {
    FabricLock lock(p->fab);
    MoveToErrorLocked(p, flush_qp);
  }
  return rc;
}

}  // namespace

int PostRecvOp(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Process* p = GetProcess();
  SnQp* qp = Qp(ibqp);
  // With an SRQ, or XRC (an initiator has no receive queue, a target's
  // receives are its domain's SRQs'), a QP takes no receives of its own.
  // An RSS QP's receives are its WQs'.
  if (!p || qp->srq || IsXrc(qp->shm->type) || !qp->recv_cq) {
    *bad = wr;
    return p ? EINVAL : ENODEV;
  }
  if (qp->shm->state.load(std::memory_order_relaxed) == IBV_QPS_RESET) {
    *bad = wr;
    return EINVAL;
  }
  return PostRecvCommon(p, &qp->rq_mu, &qp->shm->rq, &qp->rq_outstanding, qp->max_recv_wr, qp->max_recv_sge,
                        wr, bad, qp->shm, qp->shm->pd, &qp->rq_shadow);
}

int PostSrqRecvOp(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Process* p = GetProcess();
  SnSrq* srq = Srq(ibsrq);
  if (!p) {
    *bad = wr;
    return ENODEV;
  }
  return PostRecvCommon(p, &srq->rq_mu, &srq->shm->rq, &srq->outstanding, srq->shm->rq.max_wr,
                        srq->shm->rq.max_sge, wr, bad, nullptr, srq->shm->pd, nullptr);
}

}  // namespace rdmasan::softnic
