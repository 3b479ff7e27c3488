#include "core/stack.h"

#include <cxxabi.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

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

// Frame record layout on x86-64 and AArch64: [fp] = caller's fp, [fp+8] =
// return address.  Reads only words inside [frame, stack top) of this
// thread's stack, which are mapped.
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

// Symbolizes `addr` (a module address already moved back into the call
// instruction) in `mod`; `base` carries pc, module and offset.
std::vector<Frame> SymbolizeInModule(Dwfl_Module* mod, Dwarf_Addr addr, const Frame& base) {
  Frame outer = base;
  outer.function = Demangle(dwfl_module_addrname(mod, addr));
  if (Dwfl_Line* line = dwfl_module_getsrc(mod, addr)) {
    int lineno = 0;
    const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr);
    if (file) outer.file = file;
    outer.line = lineno;
  }
  std::vector<Frame> frames;
  Dwarf_Addr cu_bias = 0;
  Dwarf_Die* cudie = dwfl_module_addrdie(mod, addr, &cu_bias);
  Dwarf_Die* scopes = nullptr;
  int nscopes = cudie ? dwarf_getscopes(cudie, addr - cu_bias, &scopes) : 0;
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  // Each inlined_subroutine scope (innermost first) is a frame whose
  // location is the current one; its call site becomes the location of the
  // next frame out.
  std::string file = outer.file;
  int line = outer.line;
  // After an inlined instance, dwarf_getscopes goes on with its abstract
  // origin's scopes; the callers' instances are the concrete parents of the
  // inlined DIE, which dwarf_getscopes_die gives.
  std::vector<Dwarf_Die*> owned;
  Dwarf_Die* cur = scopes;
  int n = nscopes;
  for (int i = 0; i < n;) {
    int tag = dwarf_tag(&cur[i]);
    if (tag == DW_TAG_subprogram) break;
    if (tag != DW_TAG_inlined_subroutine) {
      ++i;
      continue;
    }
    Frame f = base;
    bool mangled = false;
    const char* name = DieName(&cur[i], &mangled);
    f.function = name ? (mangled ? Demangle(name) : std::string(name)) : "";
    f.file = file;
    f.line = line;
    frames.push_back(std::move(f));
    Dwarf_Attribute attr;
    Dwarf_Word call_file = 0, call_line = 0;
    file.clear();
    line = 0;
    if (dwarf_attr(&cur[i], DW_AT_call_file, &attr) && dwarf_formudata(&attr, &call_file) == 0) {
      if (!files && dwarf_getsrcfiles(cudie, &files, &nfiles) != 0) files = nullptr;
      if (files && call_file < nfiles) {
        if (const char* src = dwarf_filesrc(files, call_file, nullptr, nullptr)) file = src;
      }
    }
    if (dwarf_attr(&cur[i], DW_AT_call_line, &attr) && dwarf_formudata(&attr, &call_line) == 0)
      line = static_cast<int>(call_line);
    Dwarf_Die* parents = nullptr;
    int m = dwarf_getscopes_die(&cur[i], &parents);
    if (m > 1 && frames.size() < 64) {
      owned.push_back(parents);
      cur = parents;
      n = m;
      i = 1;  // parents[0] is the inlined DIE itself
    } else {
      std::free(parents);
      ++i;
    }
  }
  for (Dwarf_Die* d : owned) std::free(d);
  std::free(scopes);
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

// Each thread's last captured stack: a loop posting from one call site
// captures the same stack every time, and comparing it with the last one
// is cheaper than hashing and looking it up.  Ids never change meaning, so
// a stale entry is only a miss.
struct LastStack {
  size_t n = 0;
  StackId id = 0;
  uintptr_t pcs[kMaxStackFrames];
};
thread_local LastStack t_last_stack;

bool SamePcs(const uintptr_t* a, const uintptr_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

}  // namespace

__attribute__((noinline)) StackId CaptureStackFrom(uintptr_t pc, uintptr_t frame) {
  uintptr_t pcs[kMaxStackFrames];
  size_t n = WalkFrames(pc, frame, pcs);
  LastStack& last = t_last_stack;
  if (n == last.n && last.id && SamePcs(pcs, last.pcs, n)) return last.id;
  StackId id = InternStack(pcs, n);
  if (id) {
    last.n = n;
    last.id = id;
    std::memcpy(last.pcs, pcs, n * sizeof(uintptr_t));
  }
  return id;
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
