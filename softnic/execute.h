// softnic/execute: the requester's execution of one work request, shared
// by the rooms of softnic's data path: datapath.cc (post, run the SQ,
// SENDs, complete, flush), small_send.cc (the common SEND),
// tag_matching.cc (SENDs to a tag-matching SRQ) and one_sided.cc (RDMA
// WRITE and READ, the atomics).  Every function here runs under the
// fabric lock, on the post/poll path.
//
// May not: touch memory outside what a valid key grants, allocate, or call
// the application.
#ifndef RDMASAN_SOFTNIC_EXECUTE_H_
#define RDMASAN_SOFTNIC_EXECUTE_H_

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <algorithm>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "softnic/access.h"
#include "softnic/internal.h"

namespace rdmasan::softnic::exec {

constexpr int kPending = -1;  // RNR: stays in the SQ

// One WR executing: its process and QP, the keys it may use, and what it
// leaves behind (the reason of an error completion, a rendezvous's FIN).
struct Exec {
  // `why` is not zeroed (200 bytes per run of a send queue): every path
  // that reads it writes it first, or clears its first byte.
  Exec(Process* p_, ShmHeader* h_, SnQp* qp_, pid_t self_, const MrTables& mrs_)
      : p(p_), h(h_), qp(qp_), self(self_), mrs(mrs_) {
    why[0] = 0;
  }
  Process* p;
  ShmHeader* h;
  SnQp* qp;
  pid_t self;
  MrTables mrs;
  uint64_t wr_id = 0;  // of the WR executing
  // While chaos may place messages in chunks (kPlace): the QP's placement
  // state (placement.h), else null.
  PlaceState* place = nullptr;
  char why[kWhyText];  // the reason of its error completion
  // Its destination (a receive's buffers, a READ's or atomic's local one)
  // changed between its post and the placement (fingerprint.h): the
  // completion is marked.
  bool dest_modified = false;
  // Where the executing WR lands at its responder: the PD its keys must
  // be of (an XRC target's: the SRQ's), and an XRC message's SRQ slot.
  uint32_t resp_proc = kNone;
  uint32_t resp_pd = kNone;
  uint32_t xrc_srq = kNone;
  // The ring slot of the receive WQE TakeRecv took last (kStagedInLine).
  uint32_t rq_slot = 0;
  // Tag matching: the tag a message took (given back if it cannot land),
  // and a rendezvous's FIN, which reaches the requester after its SEND's
  // own completion.
  uint32_t tm_srq = kNone;
  uint32_t tm_handle = kNone;
  bool fin_pending = false;
  uint64_t fin_tag = 0;  // network order, as in the TMH
  uint32_t fin_from = 0;
};

// Says why the executing WR completes in error (the fabric's ring keeps it,
// explain.cc).
__attribute__((format(printf, 2, 3))) inline void Why(Exec& x, const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(x.why, sizeof(x.why), fmt, ap);
  va_end(ap);
}

// A receive WQE as the requester uses it: copied out of shared memory once
// (its owner, or anyone, may rewrite the ring meanwhile), with num_sge
// bounded by the queue's SGE count.
struct RecvCopy {
  alignas(ShmRecvWqe) uint8_t bytes[sizeof(ShmRecvWqe) + kMaxSge * sizeof(ShmSge)];
  ShmRecvWqe* wqe() { return reinterpret_cast<ShmRecvWqe*>(bytes); }
};

// Taking a receive WQE off a ring: taken, none posted, or a ring whose
// shared fields describe no ring.
enum class Take { kTaken, kEmpty, kCorrupt };

// Takes the next WQE of receive ring `rq` (a QP's own queue or an SRQ's)
// into `copy` and moves the ring's tail past it; x.rq_slot is its slot.
// Each shared field is read once; on kEmpty or kCorrupt nothing is taken.
// The step of TakeRecv and of the common SEND (small_send.cc).
inline Take TakeFromRing(Exec& x, ShmRq& rq, RecvCopy* copy) {
  const uint64_t tail = rq.tail;
  uint64_t head = rq.head_seen;
  const uint32_t nslots = rq.nslots;
  // What it saw is used up (or was never a ring position past the tail: a
  // flush moved the tail on): read the owner's line.
  if (head - tail - 1 >= nslots) {
    head = RqHead(rq);
    if (tail == head) return Take::kEmpty;
    rq.head_seen = head;
  }
  const uint32_t stride = rq.stride, max_sge = rq.max_sge;
  const uint8_t* ring = x.p->fab->RqRing(rq.ring_off, nslots, stride, max_sge);
  if (!ring || head - tail > nslots) return Take::kCorrupt;
  const uint32_t slot = static_cast<uint32_t>(tail & (nslots - 1));  // RqRing found nslots a power of two
  ShmRecvWqe* w = copy->wqe();
  memcpy(w, ring + uint64_t(slot) * stride, sizeof(ShmRecvWqe) + max_sge * sizeof(ShmSge));
  w->num_sge = std::min(w->num_sge, max_sge);
  x.rq_slot = slot;
  rq.tail = tail + 1;
  // The next WQE, if posted, is read by the next take: fetch it now, off
  // that message's path (a hint only: a ring rewritten meanwhile costs
  // nothing).
  if (head - tail > 1) __builtin_prefetch(ring + uint64_t((slot + 1) & (nslots - 1)) * stride);
  return Take::kTaken;
}

// The responder QP `qpn` names, or nullptr.
inline ShmQp* FindQp(ShmHeader* h, uint32_t qpn) {
  uint32_t slot = qpn & 0xfff;
  if (slot >= kMaxQps) return nullptr;
  ShmQp& q = h->qps[slot];
  return (q.in_use && q.qpn == qpn) ? &q : nullptr;
}

// Whether QP `q` takes messages (RTR and after, not ERR).
inline bool CanReceive(const ShmQp& q) {
  auto s = q.state.load(std::memory_order_relaxed);
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD;
}

// ---- datapath.cc: the steps the other rooms share.

// Executes WR `w` of x.qp: its completion status, or kPending.
int Execute(Exec& x, SendWqe& w, uint32_t* byte_len);
// Runs the pending WRs of `qp` in order (sq_mu and the fabric lock held).
void RunSqLocked(Process* p, SnQp* qp);

// Takes the next receive WQE of the responder (its SRQ or RQ) into `copy`;
// nullptr if none is posted.  *corrupt: the queue's shared fields do not
// describe a ring (its owner sees a dead responder).
ShmRecvWqe* TakeRecv(Exec& x, ShmQp& resp, uint32_t* srq_slot, RecvCopy* copy, bool* corrupt);
// Completes receive WQE `w` of `resp` with `c` and `status`.
void RecvCompletion(Exec& x, ShmQp& resp, ShmRecvWqe* w, ShmCqe& c, uint32_t status);
// The responder's QP goes to ERR with async `event` (reliable QPs only).
void ResponderError(Exec& x, ShmQp& resp, uint32_t event);
// The responder does not answer: RETRY_EXC_ERR on a reliable QP.
int NoResponder(Exec& x, const char* what);
// No receive WQE at the responder: RNR (kPending while retries are left).
int NoReceiveWqe(Exec& x, const ShmQp& me, const ShmQp& resp, SendWqe& w);
// The responder's completion of a SEND-like WR `w` of `len` bytes.
void InitRecvCqe(const SendWqe& w, uint64_t len, ShmCqe* c);
// Lands a SEND's payload `lseg` in receive WQE `rw` and completes it with `c`.
int DeliverSend(Exec& x, const SendWqe& w, ShmQp& resp, ShmRecvWqe* rw, uint32_t srq_slot, ShmCqe& c,
                pid_t dst_pid, const Seg* lseg, uint32_t nl, uint64_t len);
// Whether local segments `lseg` are (no longer) accessible: a copy that
// failed faulted on this side.
bool LocalFault(const Seg* lseg, uint32_t nl, bool write);
// Gives back the receive WQE TakeRecv just took (fabric lock still held).
void UntakeRecv(Exec& x, ShmQp& resp, uint32_t srq_slot);
// Whether the responder's process still runs (asked every 10 ms per QP).
bool PeerAlive(Exec& x, const ShmQp& resp);
// Stages a payload of at most kLineBytes for a QP's own receive WQE
// (x.rq_slot) in the completion's one line; false if it could not be read.
bool StageInLine(Exec& x, const Seg* src, uint32_t ns, uint64_t need, ShmCqe* c, bool own);

// ---- small_send.cc

// The common SEND (small_send.cc's header says which), executed whole:
// true with its status in *st and its length in *byte_len; false, having
// changed nothing the general path depends on, for any other WR.
bool SmallSend(Exec& x, SendWqe& w, uint32_t* byte_len, int* st);

// ---- tag_matching.cc

// A SEND to an RC QP on a tag-matching SRQ.
int ExecuteTmSend(Exec& x, SendWqe& w, ShmQp& resp, const Seg* lseg, uint32_t nl, uint64_t len);
// The FIN of a rendezvous, into the requester's next receive (after its
// SEND's completion).
void DeliverFinLocked(Exec& x);

// ---- one_sided.cc: at the memory the WR's rkey grants at `resp`.

// RDMA_WRITE of `lseg`; RDMA_READ into it.
int ExecuteWrite(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                 uint64_t len);
int ExecuteRead(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                uint64_t len);
// CMP_AND_SWP, FETCH_AND_ADD: the original value lands in the local SGE.
int ExecuteAtomic(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                  uint64_t len);
// ATOMIC_WRITE: 8 bytes to an 8-aligned address, in one copy.
int ExecuteAtomicWrite(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                       uint64_t len);

}  // namespace rdmasan::softnic::exec

#endif  // RDMASAN_SOFTNIC_EXECUTE_H_
