// core/id_table: nonzero 64-bit key -> 64-bit value, read without a lock.
//
// Open addressing over a fixed array of atomics: lookups are a few relaxed
// loads and never block; Put and Erase (control path: object creation and
// destruction) take a mutex.  Erased slots become tombstones, reused by
// later Puts.  The interposer keys it by application pointers (object ->
// id); the checkers engine keys it by object id (object -> its lock domain).
//
// The 1 MB of slots comes from calloc, untouched at construction: a fresh
// mapping whose pages fault in where keys land, not 256 pages written at
// the first verbs call of every process (issue 33: a campaign's runs are
// short).  The slots are plain words accessed through std::atomic_ref.
//
// May not: grow (when full, or when its slots could not be allocated, Put
// fails and the caller treats the key as untracked), or hand out
// references into the table.
#ifndef RDMASAN_CORE_ID_TABLE_H_
#define RDMASAN_CORE_ID_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <mutex>

namespace rdmasan::core {

class IdTable {
 public:
  IdTable() : slots_(static_cast<Slot*>(std::calloc(kCap, sizeof(Slot)))) {
    if (!slots_) slots_ = NoSlots();
  }
  ~IdTable() {
    if (slots_ != NoSlots()) std::free(slots_);
  }
  IdTable(const IdTable&) = delete;
  IdTable& operator=(const IdTable&) = delete;

  bool Put(uint64_t key, uint64_t value) {
    if (key == 0 || key == kTombstone || slots_ == NoSlots()) return false;
    std::lock_guard<std::mutex> l(mu_);
    size_t i = Hash(key), free_slot = kCap;
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uint64_t k = Key(i).load(std::memory_order_relaxed);
      if (k == key) {
        Value(i).store(value, std::memory_order_release);
        return true;
      }
      if (k == kTombstone && free_slot == kCap) free_slot = i;
      if (k == 0) {
        if (free_slot == kCap) free_slot = i;
        break;
      }
    }
    if (free_slot == kCap) return false;
    Value(free_slot).store(value, std::memory_order_relaxed);
    Key(free_slot).store(key, std::memory_order_release);
    return true;
  }

  // 0 when absent.
  uint64_t Get(uint64_t key) const {
    if (key == 0 || key == kTombstone) return 0;
    size_t i = Hash(key);
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uint64_t k = Key(i).load(std::memory_order_acquire);
      if (k == key) return Value(i).load(std::memory_order_acquire);
      if (k == 0) return 0;
    }
    return 0;
  }

  void Erase(uint64_t key) {
    std::lock_guard<std::mutex> l(mu_);
    size_t i = Hash(key);
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uint64_t k = Key(i).load(std::memory_order_relaxed);
      if (k == key) {
        Key(i).store(kTombstone, std::memory_order_release);
        return;
      }
      if (k == 0) return;
    }
  }

 private:
  static constexpr size_t kCap = 1 << 16;
  static constexpr uint64_t kTombstone = ~uint64_t{0};  // keys 0 and ~0 are never stored
  static size_t Hash(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x & (kCap - 1);
  }
  struct Slot {
    alignas(std::atomic_ref<uint64_t>::required_alignment) uint64_t key;
    uint64_t value;
  };
  // All-zero slots (never written: Put refuses them) for a table whose
  // allocation failed; in .bss, so never faulted in unless read.
  static Slot* NoSlots() {
    static Slot none[kCap];
    return none;
  }
  std::atomic_ref<uint64_t> Key(size_t i) const { return std::atomic_ref<uint64_t>(slots_[i].key); }
  std::atomic_ref<uint64_t> Value(size_t i) const { return std::atomic_ref<uint64_t>(slots_[i].value); }
  std::mutex mu_;
  Slot* slots_;
};

// Object id -> 64-bit value, read without a lock, for ids that mostly come
// numbered 1, 2, 3... (the interposer's): ids below kDirect index arrays of
// slots directly (a chunk is allocated at its first Put and kept), larger
// ones (hand-made in tests, odd traces) go to an IdTable.
//
// May not: shrink, or hand out references into the table.
class DenseIdTable {
 public:
  DenseIdTable() = default;
  DenseIdTable(const DenseIdTable&) = delete;
  DenseIdTable& operator=(const DenseIdTable&) = delete;
  ~DenseIdTable() {
    for (auto& c : chunks_) delete c.load(std::memory_order_relaxed);
  }

  bool Put(uint64_t key, uint64_t value) {
    if (key == 0) return false;
    if (key >= kDirect) return sparse_.Put(key, value);
    std::lock_guard<std::mutex> l(mu_);
    std::atomic<Chunk*>& slot = chunks_[key >> kChunkBits];
    Chunk* c = slot.load(std::memory_order_relaxed);
    if (!c) {
      c = new Chunk();
      slot.store(c, std::memory_order_release);
    }
    c->v[key & (kChunk - 1)].store(value, std::memory_order_release);
    return true;
  }

  // 0 when absent.
  uint64_t Get(uint64_t key) const {
    if (key >= kDirect) return sparse_.Get(key);
    const Chunk* c = chunks_[key >> kChunkBits].load(std::memory_order_acquire);
    return c ? c->v[key & (kChunk - 1)].load(std::memory_order_acquire) : 0;
  }

  void Erase(uint64_t key) {
    if (key == 0) return;
    if (key >= kDirect) return sparse_.Erase(key);
    if (Chunk* c = chunks_[key >> kChunkBits].load(std::memory_order_acquire))
      c->v[key & (kChunk - 1)].store(0, std::memory_order_release);
  }

 private:
  static constexpr size_t kChunkBits = 12, kChunk = size_t{1} << kChunkBits, kChunks = 256;
  static constexpr uint64_t kDirect = kChunk * kChunks;  // about a million objects
  struct Chunk {
    std::atomic<uint64_t> v[kChunk] = {};
  };
  std::mutex mu_;  // Put's allocation of chunks
  std::atomic<Chunk*> chunks_[kChunks] = {};
  IdTable sparse_;
};

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_ID_TABLE_H_
