// softnic/fingerprint: what a receive buffer or an RDMA READ (or atomic)
// destination held when it was posted, so that softnic, when it places
// data there, can tell whether the program wrote into it meanwhile (the
// check recv-buffer-modified).  A NIC owns a posted receive buffer, and a
// READ's or atomic's local destination, from the post until the completion
// is polled (ibv_post_recv(3), ibv_post_send(3)); a write by the program in
// between races the NIC's own and its bytes are lost or half overwritten.
// Only softnic sees the moment of placement, so only it can tell.
//
// While the shim turns it on (SetDestinationFingerprints: checking on and
// the check enabled), post_recv stores a 32-bit fingerprint of each
// receive's buffers (as the MRs grant them) in its WQE, and post_send one
// of each READ's and atomic's destinations in its SendWqe.  At the first
// placement the destination is fingerprinted again (read across processes
// like a copy: it never faults); a difference marks the completion, and
// the poll that returns it hands the mark to the shim (TakeModified), which
// reports it.  0 means "no fingerprint": one was never taken.
//
// May not: fault on memory the program unmapped (every read goes through
// Move), allocate, or cost more than one relaxed load per post while off.
#ifndef RDMASAN_SOFTNIC_FINGERPRINT_H_
#define RDMASAN_SOFTNIC_FINGERPRINT_H_

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "softnic/access.h"

namespace rdmasan::softnic {

inline constinit std::atomic<bool> g_fingerprints{false};
// Completions marked and not yet taken by the shim, in this process.
inline constinit std::atomic<uint32_t> g_modified_pending{0};

// The shim, at start.
inline void SetDestinationFingerprints(bool on) { g_fingerprints.store(on, std::memory_order_release); }
inline bool FingerprintsOn() { return g_fingerprints.load(std::memory_order_relaxed); }

// The completion flag softnic sets in a CQE whose destination changed
// (stripped at poll, like the solicited marker).
inline constexpr uint32_t kWcDestModified = 0x40000000u;

// The fingerprint of segments `s` in process `pid` (ours: `self`); 0 if
// they cannot be read (unmapped), else never 0.
uint32_t FingerprintSegs(pid_t self, pid_t pid, const Seg* s, uint32_t n);

// A marked completion, as the shim takes it.
struct DestModified {
  const ibv_cq* cq;
  uint32_t qp_num;
  uint64_t wr_id;
  bool recv;  // a receive (else a READ or atomic's destination)
};
// At poll (the CQ's lock held): the completion of `cq` polled was marked.
void NoteModified(const ibv_cq* cq, uint32_t qp_num, uint64_t wr_id, bool recv);
// The marks of `cq`'s polled completions, oldest first, at most `max`;
// taken away.  One relaxed load while none is pending.
size_t TakeModifiedSlow(const ibv_cq* cq, DestModified* out, size_t max);
inline size_t TakeModified(const ibv_cq* cq, DestModified* out, size_t max) {
  if (g_modified_pending.load(std::memory_order_relaxed) == 0) return 0;
  return TakeModifiedSlow(cq, out, max);
}

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_FINGERPRINT_H_
