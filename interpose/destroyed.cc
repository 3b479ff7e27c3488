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

// A filter over the recorded handles (one bit per hash of an address, set
// while a record of that hash may exist): a live handle is told apart with
// one load instead of a scan of kSlots.  Rebuilt by the writer after each
// change; a bit of a present record is never cleared, even for a moment
// (each word is stored once, with its final value).
constexpr size_t kFilterWords = 1024;  // 65536 bits for at most 256 handles
constinit std::atomic<uint64_t> g_filter[kFilterWords] = {};

size_t FilterBit(const void* obj) {
  uint64_t x = reinterpret_cast<uintptr_t>(obj) >> 4;
  x *= 0x9e3779b97f4a7c15ull;
  return static_cast<size_t>(x >> 48);  // 16 bits
}

bool MaybeRecorded(const void* obj) {
  const size_t b = FilterBit(obj);
  return (g_filter[b / 64].load(std::memory_order_acquire) >> (b % 64)) & 1;
}

// Under g_mu.
void RebuildFilter() {
  uint64_t words[kFilterWords] = {};
  for (const Record& r : g_records)
    if (const void* o = r.obj.load(std::memory_order_relaxed)) {
      const size_t b = FilterBit(o);
      words[b / 64] |= uint64_t{1} << (b % 64);
    }
  for (size_t i = 0; i < kFilterWords; ++i)
    if (g_filter[i].load(std::memory_order_relaxed) != words[i])
      g_filter[i].store(words[i], std::memory_order_release);
}

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

RDMASAN_TLS_ACCESSOR bool NoteDestroyed(const void* obj, core::ObjId id, bool kept) {
  void* block = t_held;
  t_held = nullptr;
  // An object without an id (checking=false, or made inside libibverbs) is
  // remembered only while its block is held (or kept): no new object can
  // take its address before the record goes.
  if (obj && !id && (block || kept)) id = kUnknownObj;
  if (!obj || !id) {
    FreeBlock(block);
    return false;
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
    // Set the new bit before the record is visible.
    const size_t b = FilterBit(obj);
    g_filter[b / 64].fetch_or(uint64_t{1} << (b % 64), std::memory_order_release);
    r.obj.store(obj, std::memory_order_release);
    if (evicted) RebuildFilter();
    if (g_destroyed_count.load(std::memory_order_relaxed) < kSlots)
      g_destroyed_count.fetch_add(1, std::memory_order_relaxed);
  }
  FreeBlock(evicted);
  return block != nullptr;
}

core::ObjId DestroyedId(const void* obj) {
  if (!obj || g_destroyed_count.load(std::memory_order_relaxed) == 0 || !MaybeRecorded(obj)) return 0;
  for (Record& r : g_records) {
    if (r.obj.load(std::memory_order_acquire) != obj) continue;
    const core::ObjId id = r.id.load(std::memory_order_acquire);
    // Still the same record (a writer clears obj before it changes id).
    if (r.obj.load(std::memory_order_acquire) == obj) return id;
  }
  return 0;
}

void ForgetDestroyed(const void* obj) {
  if (!obj || g_destroyed_count.load(std::memory_order_relaxed) == 0 || !MaybeRecorded(obj)) return;
  std::lock_guard<std::mutex> l(g_mu);
  bool dropped = false;
  for (Record& r : g_records)
    if (r.obj.load(std::memory_order_relaxed) == obj) {
      // Its block, if any, is still held: a new object cannot live in it,
      // so only a block-less record (memory the provider did not free
      // through the heap) is dropped here.
      if (!r.block) r.obj.store(nullptr, std::memory_order_release), dropped = true;
    }
  if (dropped) RebuildFilter();
}

}  // namespace rdmasan::interpose
