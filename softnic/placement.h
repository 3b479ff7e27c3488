// softnic/placement: the order in which softnic places the bytes of one
// message, when chaos says so (`--chaos=place`, ChaosPoint::kPlace).
//
// The rule this freedom follows: the bytes of one message land in no
// defined order; only its completion (or, for WRITE_WITH_IMM, the
// receive completion of its immediate) says they are all there.  The IB
// spec orders messages, not the bytes inside one, and rdma-core's
// ibv_query_qp_data_in_order(3) exists because polling the last byte of a
// buffer is legitimate only where a device promises WHOLE_MSG or
// ALIGNED_128_BYTES (libibverbs answers "not in order" on most non-x86
// hosts; ConnectX parts place out of order under adaptive routing; NCCL's
// LL128 and several MPIs were bitten).  So softnic may place an RDMA
// WRITE, the payload of a WRITE_WITH_IMM or of a SEND, and the data of an
// RDMA READ's response in chunks, in a decided order (the decision's
// outcome: 0 all at once, ascending, as without chaos; 1 the last chunk
// first, then the rest ascending; 2 reversed; 3 shuffled, by an affine
// permutation drawn from two more decisions), spread over up to four
// progress steps of the requester (its posts, polls and waits, at least
// kPlaceStepNs apart: 2 ms, long enough for a reader in another process,
// descheduled on a loaded machine, to look between two steps), so another
// thread or process really sees a partly placed message for a while.  The WR stays pending meanwhile (the WRs
// behind it on its QP wait: a QP still executes in post order) and both
// completions are written after its last chunk.  Each step executes the
// WR again from its keys (execute.h), so a key invalidated, an MR
// deregistered or a peer dead between steps gives the error completion a
// NIC gives for it, and nothing outside what the keys grant is touched.
//
// Chunks: 64 bytes (a cache line, the smallest unit a NIC's DMA writes
// land in, and half the ALIGNED_128_BYTES promise, so even that promise
// is not assumed), doubled until a message has at most kPlaceMaxChunks of
// them (a packet-sized chunk, 1 KiB and up, for messages of 64 KiB and
// more), so a step costs at most a few dozen copies.  A message of fewer
// than two chunks is placed at once.
//
// Late gather (`--chaos=gather`, ChaosPoint::kGather) uses the same steps.
// The rule: a NIC reads a SEND's or WRITE's source by DMA at a moment of
// its own between the post and the completion, and a lost packet makes it
// read the source again for the retransmission (ibv_post_send(3): the
// buffer may be reused only after the completion; Linux xprtrdma commit
// 01bb35c89d90 met a retransmission that sent a buffer's later bytes).  So
// a message that is not placed in chunks may be gathered late (outcome 1:
// its first step places nothing, its second the whole message, from the
// source as it is then) or twice (outcome 2: placed whole at both steps).
// Inline messages are exempt (the NIC copied them at the post), and so is
// what is exempt from chunks below.
//
// Not placed in chunks (placed at once, as without chaos): UD and raw
// packet messages (one packet each), SENDs to an SRQ (an XRC or
// tag-matching one included: another QP may take the next receive of a
// shared queue between two steps), SEND_WITH_INV (its invalidation
// happens once), the atomics (8 bytes, in one copy).
//
// May not: touch memory outside what a valid key grants, allocate, decide
// anything itself (every choice is a ChaosDecide), or cost more than one
// ChaosOn() test per executed WR while chaos is off.
#ifndef RDMASAN_SOFTNIC_PLACEMENT_H_
#define RDMASAN_SOFTNIC_PLACEMENT_H_

#include <sys/types.h>

#include <cstdint>

#include "softnic/access.h"
#include "softnic/chaos.h"
#include "softnic/execute.h"
#include "softnic/internal.h"

namespace rdmasan::softnic::exec {

inline constexpr uint32_t kPlaceChunk = 64;
inline constexpr uint32_t kPlaceMaxChunks = 64;
inline constexpr uint32_t kPlaceSteps = 4;
inline constexpr uint64_t kPlaceStepNs = 2 * 1000 * 1000;

bool PlacementWaitsSlow(Exec& x, SnQp* qp);

// Before the head WR of `qp` executes (sq_mu and the fabric lock held):
// points x.place at the QP's placement state while chaos may place (else
// null), and says whether the head WR is a message partly placed whose
// next step is not due yet (it stays pending).
inline bool PlacementWaits(Exec& x, SnQp* qp) {
  if (!ChaosOnAny(ChaosBit(ChaosPoint::kPlace) | ChaosBit(ChaosPoint::kGather))) {
    x.place = nullptr;
    return false;
  }
  return PlacementWaitsSlow(x, qp);
}

// Whether the executing WR `w`, a message of `len` bytes, is placed in
// steps: it is partly placed already, or it may be (`eligible`, see the
// header comment) and a decision says so (kPlace: chunks; else kGather:
// late or twice).  `recv_id`: the wr_id of the
// receive WQE a SEND or WRITE_WITH_IMM lands in (0 for a one-sided WR); a
// message resumed into another WQE than it started in (the responder was
// reset meanwhile) starts over.  Only with x.place set.
bool PlacesInChunks(Exec& x, const SendWqe& w, uint64_t len, uint64_t recv_id, bool eligible);

// Copies this step's chunks of the message from `src` to `dst` (the whole
// message's segments; one of the two sides is ours, as for Move): 0 or an
// errno, as Move.  *more: chunks remain for later steps, and the caller
// leaves the WR pending (kPending) without completing anything.
int PlaceStep(Exec& x, pid_t dst_pid, const Seg* dst, uint32_t nd, pid_t src_pid, const Seg* src, uint32_t ns,
              bool* more);

}  // namespace rdmasan::softnic::exec

#endif  // RDMASAN_SOFTNIC_PLACEMENT_H_
