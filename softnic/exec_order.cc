// softnic/exec_order: WRs that execute out of post order, and QPs that lag
// (exec_order.h has the rules they follow).
//
// May not: decide anything but through ChaosDecide, or allocate.
#include "softnic/exec_order.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "softnic/access.h"

namespace rdmasan::softnic::exec {
namespace {

bool ReadOrAtomic(uint32_t op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// What may start before an earlier READ or atomic without a fence.
bool OvertakesRead(uint32_t op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_LOCAL_INV:
      return true;
    default:
      return false;
  }
}

// Whether `w` is an RDMA WRITE into memory registered with
// IBV_ACCESS_RELAXED_ORDERING (its rkey names such an MR, or a window on one).
bool RelaxedWrite(Exec& x, const SendWqe& w) {
  if (w.opcode != IBV_WR_RDMA_WRITE) return false;
  const uint32_t type = x.qp->shm->type;
  if (type != IBV_QPT_RC && type != IBV_QPT_UC) return false;
  uint32_t key = w.rkey;
  if (IsMwKey(key)) {
    ShmMw mw;
    if (!TrustedMw(x.mrs, key, &mw)) return false;
    key = mw.mr_key;
  }
  ShmMr m;
  return TrustedMr(x.h, x.mrs.own, x.mrs.self, key, &m) && (m.access & IBV_ACCESS_RELAXED_ORDERING);
}

// The WR behind the head WR, if it may overtake the head by point `p`.
SendWqe* Overtaker(Exec& x, SnQp* qp, const SendWqe& head, ChaosPoint p) {
  if (qp->sq_exec + 1 >= qp->sq_posted) return nullptr;
  SendWqe& next = qp->sq[(qp->sq_exec + 1) % qp->sq.size()];
  if (next.flags & IBV_SEND_FENCE) return nullptr;
  if (p == ChaosPoint::kFence)
    return ReadOrAtomic(head.opcode) && OvertakesRead(next.opcode) ? &next : nullptr;
  return RelaxedWrite(x, next) ? &next : nullptr;
}

// Executes `next`, the WR behind the head, now: its outcome waits in
// qp->order until its turn.  A WR that cannot run now runs in its turn.
void RunAhead(Exec& x, SnQp* qp, SendWqe& head, SendWqe& next) {
  PlaceState* const place = x.place;
  x.place = nullptr;  // placed at once
  x.wr_id = next.wr_id;
  x.why[0] = 0;
  x.tm_srq = x.tm_handle = kNone;
  x.fin_pending = false;
  uint32_t len = 0;
  const int st = Execute(x, next, &len);
  if (x.fin_pending) DeliverFinLocked(x);
  if (st != kPending) {
    OrderState& o = qp->order;
    o.ahead = qp->sq_exec + 1;
    o.ahead_status = st;
    o.ahead_len = len;
    memcpy(o.ahead_why, x.why, sizeof(o.ahead_why));
  }
  x.place = place;
  x.wr_id = head.wr_id;
  x.why[0] = 0;
  x.tm_srq = x.tm_handle = kNone;
  x.fin_pending = false;
}

// The first time head WR `w` comes up: may it wait for a WR to overtake
// it (kFence, kRelaxed), or lag (kLag)?
void Decide(Exec& x, SnQp* qp, const SendWqe& w) {
  OrderState& o = qp->order;
  o.decided = qp->sq_exec;
  o.wait_until_ns = 0;
  o.overtaker = 0;
  char what[160];
  ChaosPoint p = ChaosPoint::kCount;
  if (ChaosOn(ChaosPoint::kFence) && ReadOrAtomic(w.opcode)) {
    p = ChaosPoint::kFence;
    snprintf(what, sizeof(what),
             "fence: wr_id 0x%" PRIx64
             " of QP 0x%x, a READ or atomic (1: its data lands after the unfenced WR "
             "behind it, which runs first)",
             w.wr_id, qp->shm->qpn);
  } else if (ChaosOn(ChaosPoint::kRelaxed) && RelaxedWrite(x, w)) {
    p = ChaosPoint::kRelaxed;
    snprintf(what, sizeof(what),
             "relaxed: wr_id 0x%" PRIx64
             " of QP 0x%x, a WRITE into a relaxed-ordering MR (1: the next such "
             "WRITE lands first)",
             w.wr_id, qp->shm->qpn);
  }
  if (p != ChaosPoint::kCount && ChaosDecide(p, qp->ordinal, w.wr_id, 2, what, qp->shm->qpn) == 1) {
    o.overtaker = 1 + static_cast<uint32_t>(p);
    o.wait_until_ns = NowNs() + kOrderStepNs;
    return;
  }
  if (!ChaosOn(ChaosPoint::kLag)) return;
  snprintf(what, sizeof(what), "lag: wr_id 0x%" PRIx64 " of QP 0x%x (1: it waits while other QPs run)",
           w.wr_id, qp->shm->qpn);
  if (ChaosDecide(ChaosPoint::kLag, qp->ordinal, w.wr_id, 2, what, qp->shm->qpn) == 1)
    o.wait_until_ns = NowNs() + kOrderStepNs;
}

}  // namespace

OrderStep OrderBeforeSlow(Exec& x, SnQp* qp, SendWqe& w, int* st, uint32_t* byte_len) {
  OrderState& o = qp->order;
  const uint64_t head = qp->sq_exec;
  if (o.ahead == head) {
    o.ahead = kNoPlacement;
    *st = o.ahead_status;
    *byte_len = o.ahead_len;
    memcpy(x.why, o.ahead_why, sizeof(x.why));
    return OrderStep::kRanAhead;
  }
  if (qp->place.index == head) return OrderStep::kRun;  // a message partly placed: under way
  if (o.decided != head) Decide(x, qp, w);
  if (!o.wait_until_ns) return OrderStep::kRun;
  if (o.overtaker) {
    const auto p = static_cast<ChaosPoint>(o.overtaker - 1);
    if (SendWqe* next = Overtaker(x, qp, w, p)) {
      // The overtaker lands now; the head lands a step later, not in the
      // same call: a reader polling memory between the requester's verbs
      // calls (or another process) sees the later WR's data without the
      // head's for a while, as placement shows a partly placed message.
      RunAhead(x, qp, w, *next);
      o.overtaker = 0;
      o.wait_until_ns = NowNs() + kOrderStepNs;
      return OrderStep::kWait;
    }
  }
  if (NowNs() < o.wait_until_ns) return OrderStep::kWait;
  o.wait_until_ns = 0;
  return OrderStep::kRun;
}

}  // namespace rdmasan::softnic::exec
