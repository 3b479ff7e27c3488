// interpose/ptr_table: application pointer -> 64-bit value, read on the data
// path without a lock.
//
// Open addressing over a fixed array of atomics: lookups are a few relaxed
// loads; Put and Erase (control path: object creation and destruction) take
// a mutex.  Erased slots become tombstones, reused by later Puts.  May not
// grow: when full, Put fails and the object goes untracked.
#ifndef RDMASAN_INTERPOSE_PTR_TABLE_H_
#define RDMASAN_INTERPOSE_PTR_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

namespace rdmasan::interpose {

class PtrTable {
 public:
  bool Put(const void* p, uint64_t value) {
    std::lock_guard<std::mutex> l(mu_);
    const uintptr_t key = reinterpret_cast<uintptr_t>(p);
    size_t i = Hash(key), free_slot = kCap;
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uintptr_t k = slots_[i].key.load(std::memory_order_relaxed);
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
  uint64_t Get(const void* p) const {
    const uintptr_t key = reinterpret_cast<uintptr_t>(p);
    size_t i = Hash(key);
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uintptr_t k = slots_[i].key.load(std::memory_order_acquire);
      if (k == key) return slots_[i].value.load(std::memory_order_acquire);
      if (k == 0) return 0;
    }
    return 0;
  }

  void Erase(const void* p) {
    std::lock_guard<std::mutex> l(mu_);
    const uintptr_t key = reinterpret_cast<uintptr_t>(p);
    size_t i = Hash(key);
    for (size_t n = 0; n < kCap; ++n, i = (i + 1) & (kCap - 1)) {
      uintptr_t k = slots_[i].key.load(std::memory_order_relaxed);
      if (k == key) {
        slots_[i].key.store(kTombstone, std::memory_order_release);
        return;
      }
      if (k == 0) return;
    }
  }

 private:
  static constexpr size_t kCap = 1 << 16;
  static constexpr uintptr_t kTombstone = 1;
  static size_t Hash(uintptr_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    return x & (kCap - 1);
  }
  struct Slot {
    std::atomic<uintptr_t> key{0};
    std::atomic<uint64_t> value{0};
  };
  std::mutex mu_;
  Slot slots_[kCap];
};

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_PTR_TABLE_H_
