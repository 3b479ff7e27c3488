// Registered ranges and payload hashing (see memory.h); the libc
// interposers that use them are in libc_hooks.cc.

#include <atomic>
#include <cstring>
#include <map>
#include <mutex>

#include "core/options.h"
#include "core/stack.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/loader.h"
#include "interpose/memory.h"

namespace rdmasan::interpose {
namespace {

// Registered ranges (virtual addresses) -> count of MRs over them.
std::mutex g_ranges_mu;
using RangeMap = std::map<uintptr_t, std::pair<uintptr_t, int>>;
RangeMap& Ranges() {  // made on first use, so it works before this library's initialisers
  static auto* const ranges = new RangeMap();
  return *ranges;
}
std::atomic<uintptr_t> g_lo{UINTPTR_MAX};
std::atomic<uintptr_t> g_hi{0};
// Bumped under g_ranges_mu by every change: each thread's cache of ranges
// known to be registered is good while the generation it read holds.
std::atomic<uint64_t> g_ranges_gen{1};

void RecomputeBoundsLocked() {
  g_ranges_gen.fetch_add(1, std::memory_order_release);
  if (Ranges().empty()) {
    g_lo.store(UINTPTR_MAX, std::memory_order_relaxed);
    g_hi.store(0, std::memory_order_relaxed);
    return;
  }
  uintptr_t hi = 0;
  for (const auto& [start, v] : Ranges()) hi = std::max(hi, v.first);
  g_lo.store(Ranges().begin()->first, std::memory_order_relaxed);
  g_hi.store(hi, std::memory_order_relaxed);
}

}  // namespace

bool MayOverlap(uintptr_t a, size_t n) {
  return n && a < g_hi.load(std::memory_order_relaxed) && a + n > g_lo.load(std::memory_order_relaxed);
}

bool OverlapsRegistered(uintptr_t a, size_t n) {
  std::lock_guard<std::mutex> l(g_ranges_mu);
  for (const auto& [start, v] : Ranges())
    if (a < v.first && start < a + n) return true;
  return false;
}

namespace {

// Sampled hashing reads at most this many bytes of a payload.
constexpr size_t kSampleEdge = 64, kSampleWords = 16;

uint64_t Mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  return h * 0xff51afd7ed558ccdull;
}

uint64_t HashBytes(const uint8_t* p, size_t n, uint64_t h) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v;
    memcpy(&v, p + i, 8);
    h = Mix(h, v);
  }
  for (; i < n; ++i) h = Mix(h, p[i]);
  return h;
}

enum class HashMode { kOff, kSampled, kFull };

HashMode Mode() {
  static const HashMode m = [] {
    const std::string& v = core::GlobalOptions().buffer_check;
    return v == "full" ? HashMode::kFull : v == "off" ? HashMode::kOff : HashMode::kSampled;
  }();
  return m;
}

}  // namespace

// dlsym may allocate and free while it resolves; until the real functions
// are known, frees are dropped (a few bytes leak once, at start-up).
FreeFn RealFree() {
  static constinit NextSym<FreeFn> real("free");
  static thread_local bool resolving = false;
  if (FreeFn f = real.Cached()) return f;
  if (resolving) return nullptr;
  resolving = true;
  FreeFn f = real.Get();
  resolving = false;
  return f;
}

void EmitFree(uintptr_t a, size_t n, core::StackId stack) {
  core::Event e;
  e.kind = core::EventKind::kFreeRange;
  e.addr = a;
  e.length = n;
  e.stack = stack;
  Emit(e);
  ForgetFreedRanges(a, n);
}

void NoteRegistered(const void* addr, size_t length) {
  if (!addr || !length) return;
  std::lock_guard<std::mutex> l(g_ranges_mu);
  uintptr_t a = reinterpret_cast<uintptr_t>(addr);
  auto& v = Ranges()[a];
  v.first = std::max(v.first, a + length);
  ++v.second;
  RecomputeBoundsLocked();
}

void ForgetFreedRanges(uintptr_t a, size_t n) {
  // Memory released under a live registration (free-registered was just
  // reported) is no longer the program's to read: stop hashing it, or the
  // retirement hash would read freed (or unmapped) memory.
  std::lock_guard<std::mutex> l(g_ranges_mu);
  for (auto it = Ranges().begin(); it != Ranges().end();) {
    if (a < it->second.first && it->first < a + n)
      it = Ranges().erase(it);
    else
      ++it;
  }
  RecomputeBoundsLocked();
}

void NoteDeregistered(const void* addr, size_t length) {
  if (!addr || !length) return;
  std::lock_guard<std::mutex> l(g_ranges_mu);
  auto it = Ranges().find(reinterpret_cast<uintptr_t>(addr));
  if (it == Ranges().end()) return;
  if (--it->second.second <= 0) Ranges().erase(it);
  RecomputeBoundsLocked();
}

namespace {

// The last registered ranges a thread hashed inside: the data path asks
// about the same few buffers again and again, and must not take a
// process-wide lock to do so.
struct RangeCache {
  static constexpr int kWays = 4;
  uint64_t gen = 0;
  uintptr_t lo[kWays] = {}, hi[kWays] = {};
  unsigned next = 0;
};
thread_local RangeCache t_ranges;

// True if [addr, addr+length) lies inside one registered range.
bool InsideRegistered(uint64_t addr, uint32_t length) {
  RangeCache& c = t_ranges;
  const uint64_t gen = g_ranges_gen.load(std::memory_order_acquire);
  if (c.gen == gen) {
    for (int i = 0; i < RangeCache::kWays; ++i)
      if (addr >= c.lo[i] && addr + length <= c.hi[i]) return true;
  } else {
    c = RangeCache();
    c.gen = gen;  // what is learnt below is at least this new
  }
  std::lock_guard<std::mutex> l(g_ranges_mu);
  auto it = Ranges().upper_bound(addr);
  while (it != Ranges().begin()) {
    --it;
    if (addr + length <= it->second.first) {
      if (addr < it->first) return false;
      c.lo[c.next] = it->first;
      c.hi[c.next] = it->second.first;
      c.next = (c.next + 1) % RangeCache::kWays;
      return true;
    }
    if (it->second.first <= addr) break;
  }
  return false;
}

}  // namespace

bool SamplePost() {
  switch (Mode()) {
    case HashMode::kOff:
      return false;
    case HashMode::kFull:
      return true;
    case HashMode::kSampled:
      break;
  }
  // Every post of a thread's first kAlwaysHashed, then one in kSampleEvery:
  // tests and short runs are covered completely; a long run that keeps
  // rewriting buffers in flight is caught within a few occurrences, at a
  // sixteenth of the cost.
  constexpr uint64_t kAlwaysHashed = 4096, kSampleEvery = 16;
  thread_local uint64_t posts = 0;
  ++posts;
  return posts <= kAlwaysHashed || posts % kSampleEvery == 0;
}

uint64_t HashPayload(uint64_t addr, uint32_t length) {
  if (Mode() == HashMode::kOff || !length) return 0;
  // Only memory inside a registered range is read: that is memory the
  // program told the NIC it may touch.
  if (!InsideRegistered(addr, length)) return 0;
  const uint8_t* p = reinterpret_cast<const uint8_t*>(addr);
  uint64_t h = 0x243f6a8885a308d3ull ^ length;
  if (Mode() == HashMode::kFull || length <= 2 * kSampleEdge + kSampleWords * 8) {
    h = HashBytes(p, length, h);
  } else {
    h = HashBytes(p, kSampleEdge, h);
    h = HashBytes(p + length - kSampleEdge, kSampleEdge, h);
    const size_t step = (length - 2 * kSampleEdge) / kSampleWords;
    for (size_t i = 0; i < kSampleWords; ++i) h = HashBytes(p + kSampleEdge + i * step, 8, h);
  }
  // 32 bits tell a changed payload from an unchanged one well enough (a
  // miss once in 4e9 changes) and cost traces 5 bytes instead of 8.
  return ((h ^ (h >> 32)) & 0xffffffffu) | 1;  // 0 means "not hashed"
}

}  // namespace rdmasan::interpose
