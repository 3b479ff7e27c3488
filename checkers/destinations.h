// checkers/destinations: the local memory outstanding WRs let the NIC
// write, as address ranges, for the checks about the order of the data.
//
// A destination is one non-empty SGE of an outstanding RDMA READ or atomic
// (its result lands there) or of a posted receive (QP or SRQ), as a range
// of the program's addresses (the SGE's address through its MR's iova).
// unfenced-read-use asks whether a WR gathers from memory a READ or atomic
// still writes; overlapping-destinations whether two outstanding WRs may
// land in the same bytes; buffer-modified-in-flight leaves alone the bytes
// a READ legally changes.  The index is one per process, under its own
// spin lock (a post to one QP may meet a READ of any other, in another
// lock domain); it is kept only for the checks that are on, receives only
// while overlapping-destinations is: with them off it costs the data path
// one predictable branch.  A lookup is O(log n + m): entries are ordered by
// start, and an entry can overlap [lo, hi) only if it starts after
// lo - (the longest entry's length).
//
// May not: look at anything but the books' copies of WRs and MRs, or
// report.
#ifndef RDMASAN_CHECKERS_DESTINATIONS_H_
#define RDMASAN_CHECKERS_DESTINATIONS_H_

#include <atomic>
#include <cstdint>
#include <mutex>
#include <utility>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/inlined_vector.h"
#include "core/event.h"
#include "core/spin_lock.h"

namespace rdmasan::checkers {

struct MrState;

// The range [*lo, *hi) of the program's memory an SGE names through its MR
// (null: unknown lkey); false if none (empty, device memory, no MR).  An
// inline SGE's address is the memory itself: its lkey is not used.
bool SgeRange(const MrState* mr, const core::Sge& g, bool is_inline, uint64_t* lo, uint64_t* hi);

struct Dest {
  uint64_t lo = 0, hi = 0;   // [lo, hi)
  uint64_t key = 0;          // the WR's OutstandingWr::dest_key
  core::ObjId queue = 0;     // the QP (its SQ or RQ) or the SRQ
  bool srq = false;          // queue is an SRQ
  bool local_write = false;  // an RDMA READ's or atomic's result (else a receive)
  uint32_t opcode = 0;       // ibv_wr_opcode of a local write
  uint32_t fence_epoch = 0;  // its QP's QpState::fence_epoch just after its post
  uint32_t lkey = 0;
  uint64_t wr_id = 0;
  core::StackId stack = 0;  // posted at
};

class DestIndex {
 public:
  // Which destinations to keep (the engine decides from the checks on).
  void Track(bool local_writes, bool receives) {
    local_writes_ = local_writes || receives;
    receives_ = receives;
  }
  bool local_writes() const { return local_writes_; }
  bool receives() const { return receives_; }
  // Without the lock: whether any destination (any, or of a READ or
  // atomic) is outstanding, as this thread last saw it.
  bool Any() const { return n_.load(std::memory_order_relaxed) != 0; }
  bool AnyLocalWrite() const { return n_local_.load(std::memory_order_relaxed) != 0; }

  uint64_t NewKey() { return next_key_.fetch_add(1, std::memory_order_relaxed) + 1; }
  void Add(const Dest& d);
  // Drops every destination of the WR with this key.
  void Remove(uint64_t key);

  // The outstanding destination overlapping [lo, hi) for which pred holds,
  // lowest start first, copied into *out; false if none.
  template <typename Pred>
  bool FindOverlap(uint64_t lo, uint64_t hi, Pred pred, Dest* out) const {
    if (!Any()) return false;
    std::lock_guard<core::SpinLock> l(mu_);
    const uint64_t from = lo > max_len_ ? lo - max_len_ : 0;
    for (auto it = map_.lower_bound({from, 0}); it != map_.end() && it->first.first < hi; ++it)
      if (it->second.hi > lo && pred(it->second)) {
        *out = it->second;
        return true;
      }
    return false;
  }
  // Any outstanding destination for which pred holds (a walk of all).
  template <typename Pred>
  bool FindAny(Pred pred, Dest* out) const {
    if (!Any()) return false;
    std::lock_guard<core::SpinLock> l(mu_);
    for (const auto& [k, d] : map_)
      if (pred(d)) {
        *out = d;
        return true;
      }
    return false;
  }

 private:
  bool local_writes_ = false, receives_ = false;
  mutable core::SpinLock mu_;
  absl::btree_map<std::pair<uint64_t, uint64_t>, Dest> map_;             // (lo, key)
  absl::flat_hash_map<uint64_t, absl::InlinedVector<uint64_t, 2>> los_;  // key -> its entries' lo
  uint64_t max_len_ = 0;  // of any entry since the index was last empty
  std::atomic<uint64_t> n_{0}, n_local_{0};
  std::atomic<uint64_t> next_key_{0};
};

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_DESTINATIONS_H_
