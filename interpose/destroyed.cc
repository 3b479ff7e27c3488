#include "interpose/destroyed.h"

#include <atomic>
#include <mutex>

#include "core/compiler.h"
#include "interpose/memory.h"

namespace rdmasan::interpose {
namespace {

constexpr size_t kSlots = 256;

struct Record {
  std::atomic<const void*> obj{nullptr};
  std::atomic<core::ObjId> id{0};
  void* block = nullptr;  // the held-back heap block, freed at eviction
};

Record g_records[kSlots];
size_t g_next = 0;  // the slot the next record takes (oldest first)
std::mutex g_mu;    // writers

thread_local const void* t_hold = nullptr;
thread_local void* t_held = nullptr;

void FreeBlock(void* b) {
  if (!b) return;
  if (FreeFn real = RealFree()) real(b);
}

}  // namespace

std::atomic<size_t> g_destroyed_count{0};

RDMASAN_TLS_ACCESSOR bool Holding() { return t_hold != nullptr; }

RDMASAN_TLS_ACCESSOR bool HoldBack(void* p, size_t usable_size) {
  const auto a = reinterpret_cast<uintptr_t>(p), o = reinterpret_cast<uintptr_t>(t_hold);
  if (!t_hold || t_held || o < a || o >= a + usable_size) return false;
  t_held = p;
  return true;
}

RDMASAN_TLS_ACCESSOR HoldFrees::HoldFrees(const void* obj) {
  t_hold = obj;
  t_held = nullptr;
}

RDMASAN_TLS_ACCESSOR HoldFrees::~HoldFrees() {
  t_hold = nullptr;
  void* b = t_held;
  t_held = nullptr;
  FreeBlock(b);  // not claimed: the destroy failed, or nothing was recorded
}

RDMASAN_TLS_ACCESSOR void NoteDestroyed(const void* obj, core::ObjId id) {
  void* block = t_held;
  t_held = nullptr;
  if (!obj || !id) {
    FreeBlock(block);
    return;
  }
  void* evicted;
  {
    std::lock_guard<std::mutex> l(g_mu);
    Record& r = g_records[g_next];
    g_next = (g_next + 1) % kSlots;
    evicted = r.block;
    r.obj.store(nullptr, std::memory_order_release);
    r.id.store(id, std::memory_order_release);
    r.block = block;
    r.obj.store(obj, std::memory_order_release);
    if (g_destroyed_count.load(std::memory_order_relaxed) < kSlots)
      g_destroyed_count.fetch_add(1, std::memory_order_relaxed);
  }
  FreeBlock(evicted);
}

core::ObjId DestroyedId(const void* obj) {
  if (!obj || g_destroyed_count.load(std::memory_order_relaxed) == 0) return 0;
  for (Record& r : g_records) {
    if (r.obj.load(std::memory_order_acquire) != obj) continue;
    const core::ObjId id = r.id.load(std::memory_order_acquire);
    // Still the same record (a writer clears obj before it changes id).
    if (r.obj.load(std::memory_order_acquire) == obj) return id;
  }
  return 0;
}

void ForgetDestroyed(const void* obj) {
  if (!obj || g_destroyed_count.load(std::memory_order_relaxed) == 0) return;
  std::lock_guard<std::mutex> l(g_mu);
  for (Record& r : g_records)
    if (r.obj.load(std::memory_order_relaxed) == obj) {
      // Its block, if any, is still held: a new object cannot live in it,
      // so only a block-less record (memory the provider did not free
      // through the heap) is dropped here.
      if (!r.block) r.obj.store(nullptr, std::memory_order_release);
    }
}

}  // namespace rdmasan::interpose
