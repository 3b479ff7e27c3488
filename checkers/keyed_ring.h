// checkers/keyed_ring: the posted receives of an SRQ, oldest first, retired
// by wr_id in any order.
//
// An SRQ's receives are taken by whichever of its QPs a message reaches, so
// their completions come back in any order across QPs, and each retires the
// oldest outstanding receive with its wr_id.  A Ring with erase-and-shift
// made that O(depth) per completion (4095 receives under UCX).  Here a
// retired element in the middle becomes a tombstone; tombstones at the
// front are dropped as soon as they get there, and the live elements are
// compacted once the tombstones outnumber them, so each retirement costs
// amortized O(1) and the span stays within twice the live count (plus a
// little).  The common case, the oldest receive completing first, touches
// only the front.  Finding a wr_id elsewhere uses an index (wr_id -> the
// chain of its elements, oldest first), built the first time a completion
// does not match the front and kept up from then on, so programs whose
// receives complete in order never pay for it.
//
// T has a `uint64_t wr_id` that the caller sets to the value given to
// push_back and leaves alone while the element is outstanding.
//
// May not: shrink its storage, keep references valid across a push or a
// retirement (either may move elements), or change the order of the live
// elements.
#ifndef RDMASAN_CHECKERS_KEYED_RING_H_
#define RDMASAN_CHECKERS_KEYED_RING_H_

#include <cstddef>
#include <cstdint>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "checkers/ring.h"

namespace rdmasan::checkers {

template <typename T>
class KeyedRing {
 public:
  // Live elements.
  size_t size() const { return live_; }
  bool empty() const { return live_ == 0; }
  // Slots between the oldest live element and the newest (tombstones
  // included): what iteration walks.
  size_t span() const { return slots_.size(); }
  // Whether the wr_id index exists (for tests).
  bool indexed() const { return indexed_; }

  // The oldest live element (the ring's front is never a tombstone).
  T& front() { return slots_.front().v; }
  const T& front() const { return slots_.front().v; }

  // The slot for a new newest element with this wr_id, filled by the caller.
  T& push_back(uint64_t wr_id) {
    Slot& s = slots_.push_back();
    s.live = true;
    s.next = kNoSeq;
    s.v.wr_id = wr_id;
    ++live_;
    if (indexed_) Link(wr_id, front_seq_ + slots_.size() - 1);
    return s.v;
  }

  // Retires the oldest live element; `gone` sees it first (the books drop
  // what they index by it).
  template <typename F = void (*)(T&)>
  void pop_front(F gone = [](T&) {}) {
    if (live_ == 0) return;
    gone(slots_.front().v);
    if (indexed_) Unlink(slots_.front().v.wr_id, front_seq_);
    DropFront();
    MaybeCompact();
  }

  // Retires the oldest live element with this wr_id, which `gone` sees
  // first; false if none has it.
  template <typename F = void (*)(T&)>
  bool Retire(
      uint64_t wr_id, F gone = [](T&) {}) {
    if (live_ == 0) return false;
    if (slots_.front().v.wr_id == wr_id) {
      pop_front(gone);
      return true;
    }
    if (!indexed_) BuildIndex();
    auto it = index_.find(wr_id);
    if (it == index_.end()) return false;
    const uint64_t seq = it->second.head;
    Slot& s = slots_[seq - front_seq_];
    gone(s.v);
    if (s.next == kNoSeq)
      index_.erase(it);
    else
      it->second.head = s.next;
    s.live = false;
    --live_;
    // The front did not match, so this one is not the front: only
    // compaction reclaims its slot.
    MaybeCompact();
    return true;
  }

  void clear() {
    front_seq_ += slots_.size();
    slots_.clear();
    live_ = 0;
    index_.clear();
    indexed_ = false;
  }

  // The live elements, oldest first.
  class const_iterator {
   public:
    const_iterator(const KeyedRing* r, size_t i) : r_(r), i_(i) { Skip(); }
    const T& operator*() const { return r_->slots_[i_].v; }
    const T* operator->() const { return &r_->slots_[i_].v; }
    const_iterator& operator++() {
      ++i_;
      Skip();
      return *this;
    }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }

   private:
    void Skip() {
      while (i_ < r_->slots_.size() && !r_->slots_[i_].live) ++i_;
    }
    const KeyedRing* r_;
    size_t i_;
  };
  const_iterator begin() const { return {this, 0}; }
  const_iterator end() const { return {this, slots_.size()}; }

 private:
  static constexpr uint64_t kNoSeq = ~uint64_t{0};
  // Tombstones tolerated beyond the live count before a compaction: a
  // small ring compacts rarely.
  static constexpr size_t kSlack = 16;

  struct Slot {
    T v;
    uint64_t next = kNoSeq;  // the next newer live element with v.wr_id (indexed)
    bool live = false;
  };
  // The live elements with one wr_id, by sequence number (the position a
  // push gave them, counted over the ring's life): oldest and newest.
  struct Chain {
    uint64_t head, tail;
  };

  void Link(uint64_t wr_id, uint64_t seq) {
    auto [it, fresh] = index_.try_emplace(wr_id, Chain{seq, seq});
    if (fresh) return;
    slots_[it->second.tail - front_seq_].next = seq;
    it->second.tail = seq;
  }
  // Removes the oldest of wr_id's chain, which is `seq`.
  void Unlink(uint64_t wr_id, uint64_t seq) {
    auto it = index_.find(wr_id);
    if (it == index_.end() || it->second.head != seq) return;  // cannot happen
    const uint64_t next = slots_[seq - front_seq_].next;
    if (next == kNoSeq)
      index_.erase(it);
    else
      it->second.head = next;
  }
  // Drops the front (live) element and the tombstones behind it.
  void DropFront() {
    slots_.front().live = false;
    --live_;
    size_t n = 1;
    while (n < slots_.size() && !slots_[n].live) ++n;
    slots_.pop_front(n);
    front_seq_ += n;
  }
  void BuildIndex() {
    index_.clear();
    index_.reserve(live_);
    for (size_t i = 0; i < slots_.size(); ++i) {
      Slot& s = slots_[i];
      s.next = kNoSeq;
      if (s.live) Link(s.v.wr_id, front_seq_ + i);
    }
    indexed_ = true;
  }
  void MaybeCompact() {
    if (slots_.size() > 2 * live_ + kSlack) Compact();
  }
  // Moves the live elements together, in order (swapping, so the slots
  // keep their heap blocks), and renumbers them.
  void Compact() {
    size_t w = 0;
    for (size_t i = 0; i < slots_.size(); ++i)
      if (slots_[i].live) {
        if (w != i) std::swap(slots_[w], slots_[i]);
        ++w;
      }
    slots_.truncate(w);
    if (indexed_) BuildIndex();
  }

  Ring<Slot> slots_;
  uint64_t front_seq_ = 0;  // the sequence number of slots_[0]
  size_t live_ = 0;
  bool indexed_ = false;
  absl::flat_hash_map<uint64_t, Chain> index_;
};

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_KEYED_RING_H_
