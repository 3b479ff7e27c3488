// softnic receive posting: ibv_post_recv and ibv_post_srq_recv write WQEs
// into the receive rings in the fabric, where requesters take them.
//
// May not: allocate, or post beyond the queue's capacity (ENOMEM, like a
// NIC).
#include <errno.h>

#include "softnic/internal.h"

namespace rdmasan::softnic {
namespace {

int PostRecvCommon(Process* p, ShmRq* rq, std::atomic<uint32_t>* outstanding, uint32_t max_wr,
                   uint32_t max_sge, ibv_recv_wr* wr, ibv_recv_wr** bad, ShmQp* flush_qp) {
  FabricLock lock(p->fab);
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge ||
        (wr->num_sge > 0 && !wr->sg_list)) {
      *bad = wr;
      return EINVAL;
    }
    if (outstanding->load(std::memory_order_relaxed) + 1 > max_wr) {
      *bad = wr;
      return ENOMEM;
    }
    // The ring's fields live in shared memory: a ring they no longer
    // describe (or a WR wider than it) is refused, never written through.
    auto* w = p->fab->RqEntry(*rq, rq->head);
    if (!w || static_cast<uint32_t>(wr->num_sge) > rq->max_sge) {
      *bad = wr;
      return ENOMEM;
    }
    w->wr_id = wr->wr_id;
    w->num_sge = wr->num_sge;
    for (int i = 0; i < wr->num_sge; ++i)
      w->sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    ++rq->head;
    outstanding->fetch_add(1, std::memory_order_relaxed);
  }
  if (flush_qp && flush_qp->state.load(std::memory_order_relaxed) == IBV_QPS_ERR)
    MoveToErrorLocked(p, flush_qp);
  return 0;
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
  return PostRecvCommon(p, &qp->shm->rq, &qp->rq_outstanding, qp->max_recv_wr, qp->max_recv_sge, wr, bad,
                        qp->shm);
}

int PostSrqRecvOp(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Process* p = GetProcess();
  SnSrq* srq = Srq(ibsrq);
  if (!p) {
    *bad = wr;
    return ENODEV;
  }
  return PostRecvCommon(p, &srq->shm->rq, &srq->outstanding, srq->shm->rq.max_wr, srq->shm->rq.max_sge, wr,
                        bad, nullptr);
}

}  // namespace rdmasan::softnic
