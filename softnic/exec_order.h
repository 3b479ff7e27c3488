// softnic/exec_order: the order a QP's work requests execute in, against
// each other and against other QPs, when chaos says so (`--chaos=fence`,
// `relaxed`, `lag`).  Without chaos softnic executes every WR of a QP in
// post order, at its post, and every QP as soon as it posts: the
// friendliest order there is.  The spec allows three others:
//
//   kFence    IBTA vol. 1's ordering rules (table 79 as openucx/ucx#7215
//             cites it) let a SEND, RDMA WRITE (with or without immediate)
//             or LOCAL_INV start before an earlier RDMA READ or atomic of
//             its QP has landed, unless it carries IBV_SEND_FENCE
//             (ibv_post_send(3); ibv_wr_post(3): "do not start this work
//             request until prior work has completed"); the responder,
//             too, may execute later SENDs and WRITEs before it reads for
//             an earlier READ.  The decision (outcome 1) is taken when a
//             READ or atomic reaches the head of its QP: it then waits up
//             to one step (kOrderStepNs) for an unfenced WR of those kinds
//             behind it, which executes first (gathering its source before
//             the READ's data lands, landing before the READ reads); the
//             READ then executes a step later, not in the same call, so
//             the order is seen between the requester's verbs calls.  A
//             fenced WR behind it waits, as the spec says.
//   kRelaxed  an MR registered with IBV_ACCESS_RELAXED_ORDERING lets the
//             system reorder accesses to it (ibv_reg_mr(3)): of two RDMA
//             WRITEs of one QP that both target such MRs, the later may
//             land first.  Decided when the earlier reaches the head (it
//             waits up to one step for the later).  A WRITE_WITH_IMM never
//             overtakes: its completion is written after the data before it
//             (PCIe orders a strongly ordered write after relaxed ones).
//             The earlier lands a step after the later (as for kFence): a
//             reader polling the later WRITE's flag between the
//             requester's verbs calls finds the earlier one's data missing.
//   kLag      nothing orders two QPs (IBTA orders WRs within one QP only):
//             a QP's head WR may wait one step while other QPs run.  The
//             QP's WRs stay in order among themselves.
//
// A NIC runs what was posted without the program's help: a WR that chaos
// holds (a lag, a wait for an overtaker, a placement step, a late gather)
// is run by the program's later post/poll/wait calls, and, should none
// come (a program blocked in rdma_get_cm_event or a socket read, or one
// that posts its last SEND and closes), by the process's driver thread
// (WakeDriver): started at the first such hold, it runs a held WR once
// kDriverGraceNs have passed after its wait ended, so the program's own
// calls still make every step they make without it, and a hold never
// lasts longer than a NIC's slowest step would.
//
// Completions stay in post order per send queue: a WR that executed ahead
// keeps its outcome (OrderState::ahead) and completes when its turn comes.
// A WR that cannot execute ahead now (RNR, a responder not ready) simply
// runs in its turn.  No WR overtakes more than the one ahead of it.
//
// May not: decide anything but through ChaosDecide, allocate (but for the
// driver's thread, once per process), execute a
// fenced WR before the READs and atomics ahead of it, let a WR overtake
// anything but a READ/atomic (kFence) or a relaxed WRITE (kRelaxed), or
// cost more than one relaxed load per executed WR while these points are
// off.
#ifndef RDMASAN_SOFTNIC_EXEC_ORDER_H_
#define RDMASAN_SOFTNIC_EXEC_ORDER_H_

#include <cstdint>

#include "softnic/chaos.h"
#include "softnic/execute.h"
#include "softnic/internal.h"

namespace rdmasan::softnic::exec {

// How long a head WR waits for a WR to overtake it, or lags: a placement
// step (placement.h), long enough for another process to act meanwhile.
inline constexpr uint64_t kOrderStepNs = 2 * 1000 * 1000;

inline constexpr uint32_t kOrderBits =
    ChaosBit(ChaosPoint::kFence) | ChaosBit(ChaosPoint::kRelaxed) | ChaosBit(ChaosPoint::kLag);

// How long after a held WR's wait ends the driver runs it, if the
// program's own calls have not: long enough that a program descheduled on a
// loaded machine still looks at memory between its own calls before the
// driver moves on (at 10 ms, a planted program polling a flag missed the
// overtaking 13 times in 30 next to two busy loops; at 100 ms, 0 in 30).
inline constexpr uint64_t kDriverGraceNs = 100 * 1000 * 1000;

// Runs the pending WRs of `qp` (datapath.cc; fabric lock and sq_mu held).
void RunSqLocked(Process* p, SnQp* qp);

// Chaos held a WR of process `p` (sq_mu and the fabric lock held): makes
// sure the process's driver thread runs (started once per process, a
// forked child's anew).
void WakeDriver(Process* p);
// Tests that assert what memory holds between two of their own calls turn
// the driver off (a descheduled test thread would otherwise let it run a
// held WR meanwhile); the program's calls still make every step.
void SetDriverForTest(bool on);

enum class OrderStep {
  kRun,       // execute the head WR now
  kWait,      // it waits (lags, or waits for a WR to overtake it): pending
  kRanAhead,  // it executed already, ahead of the WR before it: *st, *byte_len (and x.why) are its outcome
};

OrderStep OrderBeforeSlow(Exec& x, SnQp* qp, SendWqe& w, int* st, uint32_t* byte_len);

// Before the head WR `w` of `qp` executes (after PlacementWaits; sq_mu and
// the fabric lock held).
inline OrderStep OrderBefore(Exec& x, SnQp* qp, SendWqe& w, int* st, uint32_t* byte_len) {
  if (qp->order.ahead == kNoPlacement && !ChaosOnAny(kOrderBits)) return OrderStep::kRun;
  return OrderBeforeSlow(x, qp, w, st, byte_len);
}

}  // namespace rdmasan::softnic::exec

#endif  // RDMASAN_SOFTNIC_EXEC_ORDER_H_
