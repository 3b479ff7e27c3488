// core/id_table: nonzero 64-bit key -> 64-bit value, read without a lock.
//
// Open addressing over a fixed array of atomics: lookups are a few relaxed
// loads and never block; Put and Erase (control path: object creation and
// destruction) take a mutex.  Erased slots become tombstones, reused by
// later Puts.  The interposer keys it by application pointers (object ->
// id); the checkers engine keys it by object id (object -> its lock domain).
//
// May not: grow (when full, Put fails and the caller treats the key as
// untracked), or hand out references into the table.
#ifndef RDMASAN_CORE_ID_TABLE_H_
#define RDMASAN_CORE_ID_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace rdmasan::core {

class IdTable {
 public:
  bool Put(uint64_t key, uint64_t value) {
    if (key == 0 || key == kTombstone) return false;
    std::lock_guard<std::mutex> l(mu_);
    size_t i = Hash(key), free_slot = kCap;
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == key) {
        slots_[i].value.store(value, std::memory_order_release);
        return true;
      }
      if (k == kTombstone && free_slot == kCap) free_slot = i;
      if (k == 0) {
        if (free_slot == kCap) free_slot = i;
        break;
      }
    }
    if (free_slot == kCap) return false;
    slots_[free_slot].value.store(value, std::memory_order_relaxed);
    slots_[free_slot].key.store(key, std::memory_order_release);
    return true;
  }

  // 0 when absent.
  uint64_t Get(uint64_t key) const {
    if (key == 0 || key == kTombstone) return 0;
    size_t i = Hash(key);
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uint64_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k == key) return slots_[i].value.load(std::memory_order_acquire);
      if (k == 0) return 0;
    }
    return 0;
  }

  void Erase(uint64_t key) {
    std::lock_guard<std::mutex> l(mu_);
    size_t i = Hash(key);
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uint64_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == key) {
        slots_[i].key.store(kTombstone, std::memory_order_release);
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
    std::atomic<uint64_t> key{0};
    std::atomic<uint64_t> value{0};
  };
  std::mutex mu_;
  Slot slots_[kCap];
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
