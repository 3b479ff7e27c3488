// softnic/one_sided: the one-sided work requests a requester executes
// (execute.h), at the memory the WR's rkey grants at the responder, with
// no receive WQE: RDMA_WRITE, RDMA_READ, and the atomics.  CMP_AND_SWP and
// FETCH_AND_ADD read-modify-write 8 bytes at their target and return the
// original value; ATOMIC_WRITE writes 8 bytes in one copy.  All run under
// the fabric lock, so atomics are atomic with respect to each other
// (IBV_ATOMIC_HCA), not to the CPU's accesses.  Under `--chaos=place` a
// WRITE's or READ's data may land in chunks over several steps
// (placement.h).
//
// May not: touch memory outside what a valid key grants, or fault on a
// target unmapped meanwhile (copies fail instead).
#include <endian.h>
#include <errno.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstring>

#include "softnic/access.h"
#include "softnic/execute.h"
#include "softnic/internal.h"
#include "softnic/placement.h"

namespace rdmasan::softnic::exec {

int ExecuteWrite(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                 uint64_t len) {
  uint64_t va = 0;
  if (!ValidateRkeyIn(x.mrs, resp, x.resp_proc, x.resp_pd, w.rkey, w.remote_addr, len,
                      IBV_ACCESS_REMOTE_WRITE, &va)) {
    if (x.qp->shm->type == IBV_QPT_UC) return IBV_WC_SUCCESS;
    WhyRkey(x.mrs, resp, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_WRITE, x.why, sizeof(x.why));
    ResponderError(x, resp, IBV_EVENT_QP_ACCESS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  if (!len) return IBV_WC_SUCCESS;
  Seg dst{va, static_cast<uint32_t>(len)};
  bool more = false;
  int e = x.place && PlacesInChunks(x, w, len, 0, w.opcode == IBV_WR_RDMA_WRITE)
              ? PlaceStep(x, dst_pid, &dst, 1, x.self, lseg, nl, &more)
              : Move(x.self, dst_pid, &dst, 1, x.self, lseg, nl);
  if (e == ESRCH) return NoResponder(x, "its process died");
  if (e && LocalFault(lseg, nl, false)) {
    Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
    return IBV_WC_LOC_PROT_ERR;
  }
  if (e) {
    Why(x, "REM_ACCESS_ERR: the target memory is no longer mapped in the responder's process");
    ResponderError(x, resp, IBV_EVENT_QP_ACCESS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  if (more) return kPending;
  if (dst_pid != x.self) ++x.h->ops;
  return IBV_WC_SUCCESS;
}

int ExecuteRead(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                uint64_t len) {
  uint64_t va = 0;
  if (!ValidateRkeyIn(x.mrs, resp, x.resp_proc, x.resp_pd, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_READ,
                      &va)) {
    WhyRkey(x.mrs, resp, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_READ, x.why, sizeof(x.why));
    ResponderError(x, resp, IBV_EVENT_QP_ACCESS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  if (!len) return IBV_WC_SUCCESS;
  Seg src{va, static_cast<uint32_t>(len)};
  bool more = false;
  int e = x.place && PlacesInChunks(x, w, len, 0, true)
              ? PlaceStep(x, x.self, lseg, nl, dst_pid, &src, 1, &more)
              : Move(x.self, x.self, lseg, nl, dst_pid, &src, 1);
  if (e == ESRCH) return NoResponder(x, "its process died");
  if (e && LocalFault(lseg, nl, true)) {
    Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
    return IBV_WC_LOC_PROT_ERR;
  }
  if (e) {
    Why(x, "REM_ACCESS_ERR: the source memory is no longer mapped in the responder's process");
    ResponderError(x, resp, IBV_EVENT_QP_ACCESS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  return more ? kPending : IBV_WC_SUCCESS;
}

namespace {

// The value an atomic leaves at its target.
uint64_t AtomicResult(const SendWqe& w, uint64_t old) {
  if (w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) return old + w.compare_add;
  return old == w.compare_add ? w.swap : old;
}

// An atomic at its target (in another process or ours): read, then write
// back if changed, with copies that fail instead of faulting.  All softnic
// atomics run under the fabric lock, so the read-modify-write is atomic
// with respect to each other (IBV_ATOMIC_HCA: not to the CPU's).
int AtomicAtTarget(Exec& x, const SendWqe& w, pid_t dst_pid, uint64_t va, uint64_t* old) {
  Seg rs{va, 8}, ls{reinterpret_cast<uint64_t>(old), 8};
  int e = Move(x.self, x.self, &ls, 1, dst_pid, &rs, 1);
  if (e == ESRCH) return NoResponder(x, "its process died");
  if (e) return IBV_WC_REM_ACCESS_ERR;
  uint64_t nv = AtomicResult(w, *old);
  if (nv != *old) {
    Seg ns{reinterpret_cast<uint64_t>(&nv), 8};
    e = Move(x.self, dst_pid, &rs, 1, x.self, &ns, 1);
    if (e) return IBV_WC_REM_ACCESS_ERR;
  }
  return IBV_WC_SUCCESS;
}

}  // namespace

// CMP_AND_SWP, FETCH_AND_ADD: the original value lands in the local SGE.
int ExecuteAtomic(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                  uint64_t len) {
  if (len != 8 || nl != 1) {
    Why(x, "LOC_LEN_ERR: an atomic's local buffer must be one 8-byte SGE");
    return IBV_WC_LOC_LEN_ERR;
  }
  if (w.remote_addr % 8) {
    Why(x, "REM_INV_REQ_ERR: atomic remote address 0x%" PRIx64 " is not 8-byte aligned", w.remote_addr);
    ResponderError(x, resp, IBV_EVENT_QP_REQ_ERR);
    return IBV_WC_REM_INV_REQ_ERR;
  }
  uint64_t va = 0;
  if (!ValidateRkeyIn(x.mrs, resp, x.resp_proc, x.resp_pd, w.rkey, w.remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC,
                      &va)) {
    WhyRkey(x.mrs, resp, w.rkey, w.remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC, x.why, sizeof(x.why));
    ResponderError(x, resp, IBV_EVENT_QP_ACCESS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  uint64_t old = 0;
  int st = AtomicAtTarget(x, w, dst_pid, va, &old);
  if (st != IBV_WC_SUCCESS) return st;
  Seg from{reinterpret_cast<uint64_t>(&old), 8};
  return Move(x.self, x.self, lseg, 1, x.self, &from, 1) ? IBV_WC_LOC_PROT_ERR : IBV_WC_SUCCESS;
}

// ATOMIC_WRITE: the 8 bytes land at an 8-aligned address the rkey grants
// for REMOTE_WRITE, in one copy under the fabric lock (so no other softnic
// access sees half of it).  A misaligned address is a NAK Invalid Request,
// as for the other atomics.
int ExecuteAtomicWrite(Exec& x, const SendWqe& w, ShmQp& resp, pid_t dst_pid, const Seg* lseg, uint32_t nl,
                       uint64_t len) {
  if (len != kAtomicWriteBytes) {
    Why(x, "LOC_LEN_ERR: an atomic write carries exactly 8 bytes, not %" PRIu64, len);
    return IBV_WC_LOC_LEN_ERR;
  }
  if (w.remote_addr % kAtomicWriteBytes) {
    Why(x, "REM_INV_REQ_ERR: atomic write remote address 0x%" PRIx64 " is not 8-byte aligned", w.remote_addr);
    ResponderError(x, resp, IBV_EVENT_QP_REQ_ERR);
    return IBV_WC_REM_INV_REQ_ERR;
  }
  return ExecuteWrite(x, w, resp, dst_pid, lseg, nl, len);
}

}  // namespace rdmasan::softnic::exec
