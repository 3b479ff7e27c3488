// core/stack_code_map: where the loaded objects' text is, and whether a
// word is a return address (the bytes before it are a call instruction),
// so that the frame-pointer walk (core/stack_unwind.cc) ends at the first
// word of a chain that is no chain.
//
// May not: allocate from the heap or take a lock of its own around
// dl_iterate_phdr (the loader's is taken there): it runs inside captures.
#include <dlfcn.h>
#include <elf.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>

#include "core/stack_internal.h"

namespace rdmasan::core::stack_internal {
namespace {

// Where the loaded objects' executable segments are, so that the walk can
// tell a return address from garbage: a program built without frame
// pointers leaves rbp holding anything, and a walk that follows it must stop
// at the first word that is not the address right after a call instruction
// in some object's text.  The map is an immutable sorted array, rebuilt
// (and the old one leaked, a few KiB per dlopen) only when a return address
// lies in an object it does not know yet.

struct TextSegment {
  uintptr_t lo;
  uintptr_t hi;
};

struct CodeMap {
  size_t nsegments;
  size_t nobjects;
  TextSegment* segments;  // sorted by lo
  uintptr_t* objects;     // each object's lowest mapped address, sorted
};

constexpr size_t kMaxCodeSegments = 512;
std::atomic<const CodeMap*> g_code_map{nullptr};

struct CodeMapBuilder {
  TextSegment segments[kMaxCodeSegments];
  uintptr_t objects[kMaxCodeSegments];
  size_t nsegments = 0;
  size_t nobjects = 0;
};

int AddObject(dl_phdr_info* info, size_t, void* arg) {
  auto* b = static_cast<CodeMapBuilder*>(arg);
  uintptr_t lowest = UINTPTR_MAX;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type != PT_LOAD) continue;
    uintptr_t lo = info->dlpi_addr + ph.p_vaddr;
    lowest = std::min(lowest, lo & ~uintptr_t{4095});
    if ((ph.p_flags & PF_X) && b->nsegments < kMaxCodeSegments)
      b->segments[b->nsegments++] = {lo, lo + ph.p_memsz};
  }
  if (lowest != UINTPTR_MAX && b->nobjects < kMaxCodeSegments) b->objects[b->nobjects++] = lowest;
  return 0;
}

// No lock of ours is held around dl_iterate_phdr (which takes the
// loader's): two threads that rebuild at once each publish a whole map.
const CodeMap* RebuildCodeMap() {
  auto* b = static_cast<CodeMapBuilder*>(MapZeroed(sizeof(CodeMapBuilder)));
  if (!b) return g_code_map.load(std::memory_order_acquire);
  dl_iterate_phdr(AddObject, b);
  std::sort(b->segments, b->segments + b->nsegments,
            [](const TextSegment& x, const TextSegment& y) { return x.lo < y.lo; });
  std::sort(b->objects, b->objects + b->nobjects);
  auto* map = static_cast<CodeMap*>(ArenaAlloc(sizeof(CodeMap)));
  if (!map) return g_code_map.load(std::memory_order_acquire);
  *map = {b->nsegments, b->nobjects, b->segments, b->objects};
  g_code_map.store(map, std::memory_order_release);
  return map;
}

const TextSegment* FindSegment(const CodeMap* map, uintptr_t pc) {
  const TextSegment* begin = map->segments;
  const TextSegment* end = begin + map->nsegments;
  const TextSegment* it =
      std::upper_bound(begin, end, pc, [](uintptr_t v, const TextSegment& s) { return v < s.lo; });
  if (it == begin) return nullptr;
  --it;
  return pc < it->hi ? it : nullptr;
}

// The text segment holding pc, after a rebuild if pc lies in an object
// loaded since the map was made; null if pc is no loaded code.
const TextSegment* CodeSegmentOf(uintptr_t pc) {
  const CodeMap* map = g_code_map.load(std::memory_order_acquire);
  if (!map) map = RebuildCodeMap();
  if (!map) return nullptr;
  if (const TextSegment* s = FindSegment(map, pc)) return s;
  dl_find_object found;
  if (_dl_find_object(reinterpret_cast<void*>(pc), &found) != 0) return nullptr;
  uintptr_t start = reinterpret_cast<uintptr_t>(found.dlfo_map_start) & ~uintptr_t{4095};
  if (std::binary_search(map->objects, map->objects + map->nobjects, start)) return nullptr;
  map = RebuildCodeMap();
  return map ? FindSegment(map, pc) : nullptr;
}

// True if the bytes before `ret` (inside `seg`) end with a call
// instruction, as a return address's do.
bool FollowsCall(uintptr_t ret, const TextSegment& seg) {
#if defined(__x86_64__)
  if (ret - seg.lo < 7) return false;
  const auto* p = reinterpret_cast<const uint8_t*>(ret);
  if (p[-5] == 0xe8) return true;  // call rel32
  // call r/m64: FF /2, ModRM (and SIB, displacement) 1 to 6 bytes long.
  for (int len : {2, 3, 4, 6, 7})
    if (p[-len] == 0xff && ((p[-len + 1] >> 3) & 7) == 2) return true;
  return false;
#elif defined(__aarch64__)
  if (ret - seg.lo < 4 || ret % 4) return false;
  uint32_t insn;
  std::memcpy(&insn, reinterpret_cast<const void*>(ret - 4), 4);
  return (insn & 0xfc000000u) == 0x94000000u || (insn & 0xfffffc1fu) == 0xd63f0000u;  // bl, blr
#else
  return true;
#endif
}

}  // namespace

bool IsReturnAddress(uintptr_t ret) {
  const TextSegment* seg = CodeSegmentOf(ret);
  return seg && FollowsCall(ret, *seg);
}

}  // namespace rdmasan::core::stack_internal
