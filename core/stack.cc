#include "core/stack.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <elf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/spin_lock.h"

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

// ---------------------------------------------------------------- capture --

struct StackBounds {
  uintptr_t lo;
  uintptr_t hi;
  bool init;
};
thread_local StackBounds tls_bounds;  // trivial: no TLS init hook

const StackBounds& ThreadStackBounds() {
  StackBounds& b = tls_bounds;
  if (!b.init) {
    b.init = true;
    pthread_attr_t attr;
    if (pthread_getattr_np(pthread_self(), &attr) == 0) {
      void* addr = nullptr;
      size_t size = 0;
      if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
        b.lo = reinterpret_cast<uintptr_t>(addr);
        b.hi = b.lo + size;
      }
      pthread_attr_destroy(&attr);
    }
  }
  return b;
}

// ------------------------------------------------------------ code map --
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

bool IsReturnAddress(uintptr_t ret) {
  const TextSegment* seg = CodeSegmentOf(ret);
  return seg && FollowsCall(ret, *seg);
}

// ------------------------------------------------------ hidden text --
// rdmasan's own frames never appear in a report: a stack captured inside
// the shim (an ibv_wr_* batch that softnic posts, a hook the shim calls
// itself) starts at the application's call into the shim.  The hidden text
// is by default the shared object holding this code (librdmasan.so), found
// from its own ELF header; linked into the main program (the unit tests),
// nothing is hidden unless a test says so.

extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((weak, visibility("hidden")));

constexpr size_t kMaxHidden = 4;
std::atomic<uintptr_t> g_hidden_lo[kMaxHidden];
std::atomic<uintptr_t> g_hidden_hi[kMaxHidden];
std::atomic<size_t> g_nhidden{0};
std::atomic<int> g_hidden_state{0};  // 0 = own object not looked at yet, 1 = being looked at, 2 = done
constinit SpinLock g_hidden_lock;

void AddHidden(uintptr_t lo, uintptr_t hi) {
  std::lock_guard<SpinLock> lock(g_hidden_lock);
  size_t n = g_nhidden.load(std::memory_order_relaxed);
  if (n >= kMaxHidden || lo >= hi) return;
  g_hidden_lo[n].store(lo, std::memory_order_relaxed);
  g_hidden_hi[n].store(hi, std::memory_order_relaxed);
  g_nhidden.store(n + 1, std::memory_order_release);
}

void HideOwnObject() {
  const ElfW(Ehdr)* eh = &__ehdr_start;
  if (!eh) return;
  const auto* phdrs = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<uintptr_t>(eh) + eh->e_phoff);
  if (reinterpret_cast<uintptr_t>(phdrs) == getauxval(AT_PHDR)) return;  // the main program
  uintptr_t bias = 0;
  bool have_bias = false;
  for (int i = 0; i < eh->e_phnum; ++i)
    if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_offset == 0) {
      bias = reinterpret_cast<uintptr_t>(eh) - phdrs[i].p_vaddr;
      have_bias = true;
    }
  if (!have_bias) return;
  for (int i = 0; i < eh->e_phnum; ++i)
    if (phdrs[i].p_type == PT_LOAD && (phdrs[i].p_flags & PF_X))
      AddHidden(bias + phdrs[i].p_vaddr, bias + phdrs[i].p_vaddr + phdrs[i].p_memsz);
}

// The first capture of the process looks; one racing with it waits the
// few loads that takes, so no capture ever sees the text half hidden.
void HideOwnObjectOnce() {
  if (g_hidden_state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (g_hidden_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    HideOwnObject();
    g_hidden_state.store(2, std::memory_order_release);
    return;
  }
  for (int spins = 0; g_hidden_state.load(std::memory_order_acquire) != 2; ++spins) SpinWait(spins);
}

bool IsHidden(uintptr_t pc) {
  size_t n = g_nhidden.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (pc - 1 >= g_hidden_lo[i].load(std::memory_order_relaxed) &&
        pc - 1 < g_hidden_hi[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

// ------------------------------------------------------------- the walk --

// Frame record layout on x86-64 and AArch64: [fp] = caller's fp, [fp+8] =
// return address.  Reads only words inside [frame, stack top) of this
// thread's stack, which are mapped.  The raw walk: rbp may be anything
// where the program has no frame pointers, so the words it gives are only
// candidates (ValidFrames sorts them out).
__attribute__((no_sanitize("address", "thread", "undefined"))) size_t WalkFrames(uintptr_t pc,
                                                                                 uintptr_t frame,
                                                                                 uintptr_t* out) {
  size_t n = 0;
  out[n++] = pc;
  const StackBounds& b = ThreadStackBounds();
  if (frame < b.lo || frame + 2 * sizeof(uintptr_t) > b.hi || frame % sizeof(uintptr_t)) return n;
  uintptr_t prev = frame;
  uintptr_t bp = reinterpret_cast<const uintptr_t*>(frame)[0];
  while (n < kMaxStackFrames) {
    // Written so that a garbage bp near UINTPTR_MAX cannot wrap around.
    if (bp <= prev || bp % sizeof(uintptr_t) || bp > b.hi - 2 * sizeof(uintptr_t)) break;
    const uintptr_t* rec = reinterpret_cast<const uintptr_t*>(bp);
    uintptr_t ret = rec[1];
    if (ret < 4096) break;
    out[n++] = ret;
    prev = bp;
    bp = rec[0];
  }
  return n;
}

// From the raw walk to the stack: the walk ends at the first candidate
// past frame #0 that is not a return address (frame #0 is exact), and the
// frames in hidden text (rdmasan's own) are left out.
size_t ValidFrames(const uintptr_t* raw, size_t n, uintptr_t* out) {
  HideOwnObjectOnce();
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && !IsReturnAddress(raw[i])) break;
    if (!IsHidden(raw[i])) out[m++] = raw[i];
  }
  return m;
}

// ------------------------------------------------------------ symbolizer --

std::string Demangle(const char* name) {
  if (!name) return "";
  if (name[0] == '_' && name[1] == 'Z') {
    int status = 0;
    char* d = abi::__cxa_demangle(name, nullptr, nullptr, &status);
    if (status == 0 && d) {
      std::string out(d);
      std::free(d);
      return out;
    }
    std::free(d);
  }
  return name;
}

// Looks for separate debug info on the local disk only (the standard
// finder may ask debuginfod servers over the network).
int LocalFindDebuginfo(Dwfl_Module* mod, void** userdata, const char* modname, Dwarf_Addr base,
                       const char* file_name, const char* debuglink_file, GElf_Word debuglink_crc,
                       char** debuginfo_file_name) {
  std::vector<std::string> candidates;
  const unsigned char* bits = nullptr;
  GElf_Addr vaddr = 0;
  int len = dwfl_module_build_id(mod, &bits, &vaddr);
  if (len > 1) {
    std::string hex;
    for (int i = 0; i < len; ++i) absl::StrAppendFormat(&hex, "%02x", bits[i]);
    candidates.push_back(
        absl::StrCat("/usr/lib/debug/.build-id/", hex.substr(0, 2), "/", hex.substr(2), ".debug"));
  }
  if (debuglink_file && file_name) {
    std::string dir(file_name);
    size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
    candidates.push_back(absl::StrCat(dir, "/", debuglink_file));
    candidates.push_back(absl::StrCat(dir, "/.debug/", debuglink_file));
    candidates.push_back(absl::StrCat("/usr/lib/debug", dir, "/", debuglink_file));
  }
  for (const std::string& path : candidates) {
    if (file_name && path == file_name) continue;
    int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
      *debuginfo_file_name = strdup(path.c_str());
      return fd;
    }
  }
  return -1;
}

const char* DieName(Dwarf_Die* die, bool* mangled) {
  Dwarf_Attribute attr;
  *mangled = true;
  if (dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) ||
      dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr)) {
    if (const char* s = dwarf_formstring(&attr)) return s;
  }
  *mangled = false;
  if (dwarf_attr_integrate(die, DW_AT_name, &attr)) return dwarf_formstring(&attr);
  return nullptr;
}

std::string DieFunctionName(Dwarf_Die* die) {
  bool mangled = false;
  const char* name = DieName(die, &mangled);
  if (!name) return "";
  return mangled ? Demangle(name) : std::string(name);
}

// The name of a physical frame's function: the DIE's linkage name where it
// has one, else the symbol's (qualified, for C++ in an anonymous namespace
// under LTO, whose DIEs carry only the short name), without the suffixes
// of the optimizer's clones (foo.constprop.0, foo(int) [clone .isra.0],
// foo.cold), else the DIE's name.
std::string PhysicalFunctionName(Dwfl_Module* mod, Dwarf_Addr addr, Dwarf_Die* subprogram) {
  Dwarf_Attribute attr;
  if (subprogram && (dwarf_attr_integrate(subprogram, DW_AT_linkage_name, &attr) ||
                     dwarf_attr_integrate(subprogram, DW_AT_MIPS_linkage_name, &attr))) {
    if (const char* s = dwarf_formstring(&attr)) return Demangle(s);
  }
  const char* sym = dwfl_module_addrname(mod, addr);
  if (!sym) return subprogram ? DieFunctionName(subprogram) : "";
  bool mangled = sym[0] == '_' && sym[1] == 'Z';
  std::string name = Demangle(sym);
  if (!mangled) {
    size_t dot = name.find('.', 1);  // C names have no dots
    return dot == std::string::npos ? name : name.substr(0, dot);
  }
  for (size_t at; (at = name.find(" [clone .")) != std::string::npos;) {
    size_t end = name.find(']', at);
    name.erase(at, end == std::string::npos ? std::string::npos : end + 1 - at);
  }
  return name;
}

bool IsScopeContainer(int tag) {
  switch (tag) {
    case DW_TAG_namespace:
    case DW_TAG_module:
    case DW_TAG_class_type:
    case DW_TAG_structure_type:
    case DW_TAG_union_type:
    case DW_TAG_interface_type:
      return true;
    default:
      return false;
  }
}

bool HasPcRange(Dwarf_Die* die) {
  return dwarf_hasattr(die, DW_AT_low_pc) || dwarf_hasattr(die, DW_AT_ranges);
}

// The subprogram and inlined_subroutine DIEs of `parent`'s subtree whose
// code covers `a`, outermost first.  Unlike dwarf_getscopes, which gives up
// when an inlined instance's abstract origin lies in another CU (every
// inlined call of a link-time optimized program), this only looks at the
// concrete DIEs of the CU, which is all a frame needs: names come through
// DW_AT_abstract_origin wherever it points.  A DIE with a PC range is
// entered only if it covers `a`; one without (a namespace, a class) is
// searched, and left if `a` is not in it.
bool FindPcScopes(Dwarf_Die* parent, Dwarf_Addr a, int depth, std::vector<Dwarf_Die>* chain) {
  if (depth > 64) return false;
  Dwarf_Die die;
  if (dwarf_child(parent, &die) != 0) return false;
  do {
    int tag = dwarf_tag(&die);
    if (HasPcRange(&die)) {
      if (dwarf_haspc(&die, a) <= 0) continue;
      if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) chain->push_back(die);
      FindPcScopes(&die, a, depth + 1, chain);
      return true;
    }
    if (IsScopeContainer(tag) && FindPcScopes(&die, a, depth + 1, chain)) return true;
  } while (dwarf_siblingof(&die, &die) == 0);
  return false;
}

// Symbolizes `addr` (a module address already moved back into the call
// instruction) in `mod`; `base` carries pc, module and offset.  Innermost
// first: each inlined call is a frame at the current location, whose call
// site (DW_AT_call_file/line) is the location of the next frame out; the
// physical frame (the subprogram) comes last.  Without DWARF scopes for
// the address, one frame: the symbol and the line table's location.
std::vector<Frame> SymbolizeInModule(Dwfl_Module* mod, Dwarf_Addr addr, const Frame& base) {
  std::string file;
  int line = 0;
  if (Dwfl_Line* l = dwfl_module_getsrc(mod, addr)) {
    const char* src = dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr);
    if (src) file = src;
  }
  std::vector<Dwarf_Die> chain;
  Dwarf_Addr cu_bias = 0;
  Dwarf_Die* cudie = dwfl_module_addrdie(mod, addr, &cu_bias);
  if (cudie) FindPcScopes(cudie, addr - cu_bias, 0, &chain);
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  std::vector<Frame> frames;
  size_t first_inlined = !chain.empty() && dwarf_tag(&chain[0]) == DW_TAG_subprogram ? 1 : 0;
  for (size_t i = chain.size(); i-- > first_inlined;) {
    Dwarf_Die* die = &chain[i];
    if (dwarf_tag(die) != DW_TAG_inlined_subroutine) continue;
    Frame f = base;
    f.function = DieFunctionName(die);
    f.file = file;
    f.line = line;
    frames.push_back(std::move(f));
    Dwarf_Attribute attr;
    Dwarf_Word call_file = 0, call_line = 0;
    file.clear();
    line = 0;
    if (dwarf_attr(die, DW_AT_call_file, &attr) && dwarf_formudata(&attr, &call_file) == 0) {
      if (!files && dwarf_getsrcfiles(cudie, &files, &nfiles) != 0) files = nullptr;
      if (files && call_file < nfiles) {
        if (const char* src = dwarf_filesrc(files, call_file, nullptr, nullptr)) file = src;
      }
    }
    if (dwarf_attr(die, DW_AT_call_line, &attr) && dwarf_formudata(&attr, &call_line) == 0)
      line = static_cast<int>(call_line);
  }
  Frame outer = base;
  outer.function = PhysicalFunctionName(mod, addr, first_inlined ? &chain[0] : nullptr);
  outer.file = file;
  outer.line = line;
  frames.push_back(std::move(outer));
  return frames;
}

Frame ModuleFrame(Dwfl_Module* mod, uintptr_t pc, Dwarf_Addr* bias) {
  Frame f;
  f.pc = pc;
  Dwarf_Addr start = 0;
  const char* name = dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (name) f.module = name;
  *bias = 0;
  if (dwfl_module_getelf(mod, bias)) {
    f.module_offset = pc - *bias;
  } else {
    *bias = start;
    f.module_offset = pc - start;
  }
  return f;
}

class Symbolizer {
 public:
  std::vector<Frame> Symbolize(uintptr_t pc) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = cache_.find(pc);
    if (it != cache_.end()) return it->second;
    std::vector<Frame> frames = SymbolizeLocked(pc);
    cache_.emplace(pc, frames);
    return frames;
  }

 private:
  static const Dwfl_Callbacks* Callbacks() {
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {
        .find_elf = dwfl_linux_proc_find_elf,
        .find_debuginfo = LocalFindDebuginfo,
        .section_address = nullptr,
        .debuginfo_path = &debuginfo_path,
    };
    return &callbacks;
  }

  // Reports the process's current mappings (again after a dlopen).
  void ReportProcess() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!dwfl_) {
      dwfl_ = dwfl_begin(Callbacks());
      if (!dwfl_) return;
    }
    dwfl_report_begin_add(dwfl_);
    dwfl_linux_proc_report(dwfl_, getpid());
    dwfl_report_end(dwfl_, nullptr, nullptr);
  }

  std::vector<Frame> SymbolizeLocked(uintptr_t pc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Frame unknown;
    unknown.pc = pc;
    if (pc < 4096) return {unknown};
    if (!dwfl_) ReportProcess();
    if (!dwfl_) return {unknown};
    Dwfl_Module* mod = dwfl_addrmodule(dwfl_, pc - 1);
    if (!mod) {
      ReportProcess();
      mod = dwfl_addrmodule(dwfl_, pc - 1);
    }
    if (!mod) return {unknown};
    Dwarf_Addr bias = 0;
    Frame base = ModuleFrame(mod, pc, &bias);
    return SymbolizeInModule(mod, pc - 1, base);
  }

  std::mutex mu_;  // not absl::Mutex: visible to TSan (Debian's absl is uninstrumented)
  Dwfl* dwfl_ ABSL_GUARDED_BY(mu_) = nullptr;  // never freed: used until exit
  absl::flat_hash_map<uintptr_t, std::vector<Frame>> cache_ ABSL_GUARDED_BY(mu_);
};

Symbolizer& GlobalSymbolizer() {
  static Symbolizer* s = new Symbolizer();
  return *s;
}

}  // namespace

void HideTextRange(uintptr_t lo, uintptr_t hi) { AddHidden(lo, hi); }

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

namespace {

// Each thread's last few captured stacks: a loop posting from one call site
// and polling from another captures the same few stacks every time, and
// comparing a raw walk with them is cheaper than checking its frames
// (ValidFrames reads each return address's code), hashing and looking it
// up.  Ids never change meaning, so a stale entry is only a miss.
struct RecentStack {
  size_t n = 0;
  StackId id = 0;
  uintptr_t pcs[kMaxStackFrames];
};
struct RecentStacks {
  static constexpr unsigned kEntries = 4;
  RecentStack e[kEntries];
  unsigned next = 0;  // the entry a miss replaces
};
thread_local RecentStacks t_recent_stacks;

bool SamePcs(const uintptr_t* a, const uintptr_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

__attribute__((noinline)) StackId CaptureStackFrom(uintptr_t pc, uintptr_t frame) {
  uintptr_t raw[kMaxStackFrames];
  size_t n = WalkFrames(pc, frame, raw);
  RecentStacks& recent = t_recent_stacks;
  for (const RecentStack& r : recent.e)
    if (r.n == n && r.id && SamePcs(raw, r.pcs, n)) return r.id;
  uintptr_t pcs[kMaxStackFrames];
  StackId id = InternStack(pcs, ValidFrames(raw, n, pcs));
  if (id) {
    RecentStack& r = recent.e[recent.next];
    recent.next = (recent.next + 1) % RecentStacks::kEntries;
    r.n = n;
    r.id = id;
    std::memcpy(r.pcs, raw, n * sizeof(uintptr_t));
  }
  return id;
}

namespace {

struct UnwindState {
  uintptr_t pcs[2 * kMaxStackFrames];
  size_t n = 0;
};

_Unwind_Reason_Code CollectPc(struct _Unwind_Context* ctx, void* arg) {
  auto* st = static_cast<UnwindState*>(arg);
  if (st->n == sizeof(st->pcs) / sizeof(st->pcs[0])) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  st->pcs[st->n++] = ip;
  return _URC_NO_REASON;
}

}  // namespace

__attribute__((noinline)) StackId CaptureFullStackFrom(uintptr_t pc, uintptr_t frame) {
  UnwindState st;
  _Unwind_Backtrace(CollectPc, &st);
  // The unwinder starts in rdmasan's own frames: the stack begins at the
  // caller's call site, `pc`, as CaptureStackFrom's does.  Not found (an odd
  // caller, a frame without unwind tables): the frame-pointer walk.
  size_t at = 0;
  while (at < st.n && st.pcs[at] != pc) ++at;
  if (at == st.n) return CaptureStackFrom(pc, frame);
  const size_t n = std::min(st.n - at, kMaxStackFrames);
  uintptr_t pcs[kMaxStackFrames];
  return InternStack(pcs, ValidFrames(st.pcs + at, n, pcs));
}

__attribute__((noinline)) StackId CaptureStack() {
  StackId id = RDMASAN_CAPTURE_CALLER_STACK();
  asm volatile("" ::: "memory");  // no tail call: the walk starts from this frame
  return id;
}

std::vector<uintptr_t> StackPcs(StackId id) {
  const Node* node = NodeById(id);
  if (!node) return {};
  return std::vector<uintptr_t>(node->pcs, node->pcs + node->size);
}

size_t StackDepotSize() { return g_count.load(std::memory_order_relaxed); }

std::vector<Frame> SymbolizePcs(const std::vector<uintptr_t>& pcs) {
  std::vector<Frame> out;
  for (uintptr_t pc : pcs) {
    std::vector<Frame> frames = GlobalSymbolizer().Symbolize(pc);
    out.insert(out.end(), std::make_move_iterator(frames.begin()), std::make_move_iterator(frames.end()));
  }
  return out;
}

std::vector<Frame> SymbolizeStack(StackId id) { return SymbolizePcs(StackPcs(id)); }

std::vector<Frame> SymbolizeOffline(const std::vector<std::pair<std::string, uintptr_t>>& module_offsets) {
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {
      .find_elf = dwfl_build_id_find_elf,
      .find_debuginfo = LocalFindDebuginfo,
      .section_address = dwfl_offline_section_address,
      .debuginfo_path = &debuginfo_path,
  };
  std::vector<Frame> out;
  Dwfl* dwfl = dwfl_begin(&callbacks);
  absl::flat_hash_map<std::string, Dwfl_Module*> modules;
  if (dwfl) {
    dwfl_report_begin(dwfl);
    for (const auto& [path, offset] : module_offsets) {
      if (path.empty() || modules.contains(path)) continue;
      modules[path] = dwfl_report_offline(dwfl, path.c_str(), path.c_str(), -1);
    }
    dwfl_report_end(dwfl, nullptr, nullptr);
  }
  for (const auto& [path, offset] : module_offsets) {
    Frame unknown;
    unknown.pc = offset;
    unknown.module = path;
    unknown.module_offset = offset;
    auto it = modules.find(path);
    Dwfl_Module* mod = it == modules.end() ? nullptr : it->second;
    Dwarf_Addr bias = 0;
    if (!mod || !dwfl_module_getelf(mod, &bias) || offset == 0) {
      out.push_back(std::move(unknown));
      continue;
    }
    for (Frame& f : SymbolizeInModule(mod, offset + bias - 1, unknown)) out.push_back(std::move(f));
  }
  if (dwfl) dwfl_end(dwfl);
  return out;
}

std::string FormatFrame(const Frame& f) {
  std::string out = absl::StrFormat("0x%x", f.pc);
  if (!f.function.empty()) absl::StrAppend(&out, " in ", f.function);
  if (!f.file.empty()) {
    absl::StrAppend(&out, " ", f.file);
    if (f.line > 0) absl::StrAppend(&out, ":", f.line);
  } else if (!f.module.empty()) {
    absl::StrAppendFormat(&out, " (%s+0x%x)", f.module, f.module_offset);
  } else if (f.function.empty()) {
    absl::StrAppend(&out, " (<unknown>)");
  }
  return out;
}

}  // namespace rdmasan::core
