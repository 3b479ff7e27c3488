// core/stack_store: the process-wide stack depot (core/stack.h): each
// distinct list of PCs interned once and named by a 32-bit StackId, and the
// arenas the depot and the code map allocate from.
//
// May not: allocate from the heap, take a lock on the hit path of
// InternStack, or free a node (ids never change meaning); it needs no
// constructor, so it works before (and after) static constructors.
#include <sys/mman.h>

#include <atomic>
#include <cstddef>
#include <cstring>
#include <mutex>

#include "core/spin_lock.h"
#include "core/stack.h"
#include "core/stack_internal.h"

namespace rdmasan::core {
namespace {

// ---------------------------------------------------------------- depot --
// Nodes live in mmap'd arenas that are never freed; a node is immutable once
// published, so readers walk bucket chains without a lock.  Writers lock one
// bucket with the low bit of its head pointer.  All state is constant-
// initialized, so capture works before (and after) static constructors.

struct Node {
  const Node* next;
  uint64_t hash;
  uint32_t id;
  uint32_t size;
  uintptr_t pcs[kMaxStackFrames];  // only `size` are allocated
};

constexpr size_t kBucketBits = 16;
constexpr size_t kNumBuckets = size_t{1} << kBucketBits;
constexpr size_t kSegmentBits = 14;
constexpr size_t kSegmentSize = size_t{1} << kSegmentBits;
constexpr size_t kNumSegments = 1024;  // up to 16M stacks
constexpr size_t kArenaChunk = size_t{1} << 20;

std::atomic<uintptr_t> g_buckets[kNumBuckets];
std::atomic<std::atomic<const Node*>*> g_segments[kNumSegments];
std::atomic<uint32_t> g_next_id{1};
std::atomic<uint32_t> g_count{0};

constinit SpinLock g_arena_lock;
char* g_arena_pos = nullptr;
char* g_arena_end = nullptr;

}  // namespace

namespace stack_internal {

void* MapZeroed(size_t size) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  return p == MAP_FAILED ? nullptr : p;
}

void* ArenaAlloc(size_t size) {
  size = (size + 15) & ~size_t{15};
  std::lock_guard<SpinLock> lock(g_arena_lock);
  if (g_arena_end - g_arena_pos < static_cast<ptrdiff_t>(size)) {
    char* chunk = static_cast<char*>(MapZeroed(kArenaChunk));
    if (!chunk) return nullptr;
    g_arena_pos = chunk;
    g_arena_end = chunk + kArenaChunk;
  }
  void* p = g_arena_pos;
  g_arena_pos += size;
  return p;
}

}  // namespace stack_internal

namespace {

using stack_internal::ArenaAlloc;
using stack_internal::MapZeroed;

uint64_t HashPcs(const uintptr_t* pcs, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ n;
  for (size_t i = 0; i < n; ++i) {
    h ^= pcs[i];
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

const Node* FindInChain(const Node* node, uint64_t hash, const uintptr_t* pcs, size_t n) {
  for (; node; node = node->next)
    if (node->hash == hash && node->size == n && std::memcmp(node->pcs, pcs, n * sizeof(uintptr_t)) == 0)
      return node;
  return nullptr;
}

bool PublishId(uint32_t id, const Node* node) {
  size_t seg = id >> kSegmentBits;
  if (seg >= kNumSegments) return false;
  std::atomic<const Node*>* table = g_segments[seg].load(std::memory_order_acquire);
  if (!table) {
    auto* fresh = static_cast<std::atomic<const Node*>*>(MapZeroed(kSegmentSize * sizeof(*table)));
    if (!fresh) return false;
    if (g_segments[seg].compare_exchange_strong(table, fresh, std::memory_order_acq_rel)) {
      table = fresh;
    } else {
      munmap(fresh, kSegmentSize * sizeof(*table));
    }
  }
  table[id & (kSegmentSize - 1)].store(node, std::memory_order_release);
  return true;
}

const Node* NodeById(StackId id) {
  size_t seg = id >> kSegmentBits;
  if (id == 0 || seg >= kNumSegments) return nullptr;
  std::atomic<const Node*>* table = g_segments[seg].load(std::memory_order_acquire);
  return table ? table[id & (kSegmentSize - 1)].load(std::memory_order_acquire) : nullptr;
}

}  // namespace

StackId InternStack(const uintptr_t* pcs, size_t n) {
  if (n == 0) return 0;
  if (n > kMaxStackFrames) n = kMaxStackFrames;
  uint64_t hash = HashPcs(pcs, n);
  std::atomic<uintptr_t>& bucket = g_buckets[hash & (kNumBuckets - 1)];
  uintptr_t head = bucket.load(std::memory_order_acquire);
  if (const Node* hit = FindInChain(reinterpret_cast<const Node*>(head & ~uintptr_t{1}), hash, pcs, n))
    return hit->id;
  // Miss: lock the bucket, look again, insert.
  for (int spins = 0;; ++spins) {
    head = bucket.load(std::memory_order_acquire);
    if (!(head & 1) && bucket.compare_exchange_weak(head, head | 1, std::memory_order_acquire)) break;
    SpinWait(spins);
  }
  const Node* first = reinterpret_cast<const Node*>(head);
  if (const Node* hit = FindInChain(first, hash, pcs, n)) {
    bucket.store(head, std::memory_order_release);
    return hit->id;
  }
  StackId id = 0;
  auto* node = static_cast<Node*>(ArenaAlloc(offsetof(Node, pcs) + n * sizeof(uintptr_t)));
  if (node) {
    node->next = first;
    node->hash = hash;
    node->size = static_cast<uint32_t>(n);
    std::memcpy(node->pcs, pcs, n * sizeof(uintptr_t));
    id = g_next_id.fetch_add(1, std::memory_order_relaxed);
    node->id = id;
    if (PublishId(id, node)) {
      g_count.fetch_add(1, std::memory_order_relaxed);
      bucket.store(reinterpret_cast<uintptr_t>(node), std::memory_order_release);
      return id;
    }
    id = 0;  // depot full: the node is leaked, the stack stays unnamed
  }
  bucket.store(head, std::memory_order_release);
  return id;
}

std::vector<uintptr_t> StackPcs(StackId id) {
  const Node* node = NodeById(id);
  if (!node) return {};
  return std::vector<uintptr_t>(node->pcs, node->pcs + node->size);
}

size_t StackDepotSize() { return g_count.load(std::memory_order_relaxed); }

}  // namespace rdmasan::core
