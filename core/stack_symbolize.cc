// core/stack_symbolize: PCs to functions, files and lines (core/stack.h),
// in this process through libdwfl (results cached per PC) or offline from
// the module files a trace names.
//
// libdw (with libelf, libz, liblzma and libbz2 behind it) is loaded with
// dlopen when the first PC is symbolized, not linked: five shared libraries
// every program under the shim mapped and relocated at start-up (issue 33),
// for the few runs that print a report.  Without libdw.so.1 a frame keeps
// its module and offset.
//
// With symbol_cache=FILE (set by `rdmasan fuzz` for its runs), a frame
// symbolized once is shared with every process that names the same file:
// keyed by its module's build ID and its offset there, its function, file
// and line are appended to FILE as one line, and a later process reads
// them instead of the module's debug information (libc's separate debug
// information is decompressed whole, ~0.1 s, for one frame below main).
// A line that does not parse is ignored: the frame is symbolized as if it
// were not there.
//
// May not: run on the data path (it takes a lock and allocates: report time
// only), reach for the network (debuginfod is not used: separate debug info
// is looked for on the local disk), or drop a physical frame.
#include <cxxabi.h>
#include <dlfcn.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <fcntl.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <iterator>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/file.h"
#include "core/stack.h"

namespace rdmasan::core {
namespace {

// The libdw functions this file calls.
// clang-format off
#define RDMASAN_DW_FUNCTIONS(X) \
  X(dwarf_attr) X(dwarf_attr_integrate) X(dwarf_child) X(dwarf_filesrc) X(dwarf_formstring)         \
  X(dwarf_formudata) X(dwarf_getsrcfiles) X(dwarf_hasattr) X(dwarf_haspc) X(dwarf_siblingof)        \
  X(dwarf_tag) X(dwfl_addrmodule) X(dwfl_begin) X(dwfl_build_id_find_elf) X(dwfl_end)               \
  X(dwfl_lineinfo) X(dwfl_linux_proc_find_elf) X(dwfl_linux_proc_report) X(dwfl_module_addrdie)     \
  X(dwfl_module_addrname) X(dwfl_module_build_id) X(dwfl_module_getelf) X(dwfl_module_getsrc)       \
  X(dwfl_module_info) X(dwfl_offline_section_address) X(dwfl_report_begin) X(dwfl_report_begin_add) \
  X(dwfl_report_end) X(dwfl_report_offline)
// clang-format on

struct DwApi {
#define RDMASAN_DW_POINTER(name) decltype(&::name) name = nullptr;
  RDMASAN_DW_FUNCTIONS(RDMASAN_DW_POINTER)
#undef RDMASAN_DW_POINTER
};

// libdw's functions, loaded at the first call; null when libdw.so.1 or one
// of them is missing.  Kept loaded until exit.
const DwApi* LoadDw() {
  static const DwApi* const api = []() -> const DwApi* {
    void* lib = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib) return nullptr;
    auto* a = new DwApi;
#define RDMASAN_DW_RESOLVE(name)                                    \
  a->name = reinterpret_cast<decltype(&::name)>(dlsym(lib, #name)); \
  if (!a->name) return nullptr;
    RDMASAN_DW_FUNCTIONS(RDMASAN_DW_RESOLVE)
#undef RDMASAN_DW_RESOLVE
    return a;
  }();
  return api;
}

// libdw, once LoadDw() said it is there (every caller below is reached
// only after that).
const DwApi& D() { return *LoadDw(); }

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
  int len = D().dwfl_module_build_id(mod, &bits, &vaddr);
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
  if (D().dwarf_attr_integrate(die, DW_AT_linkage_name, &attr) ||
      D().dwarf_attr_integrate(die, DW_AT_MIPS_linkage_name, &attr)) {
    if (const char* s = D().dwarf_formstring(&attr)) return s;
  }
  *mangled = false;
  if (D().dwarf_attr_integrate(die, DW_AT_name, &attr)) return D().dwarf_formstring(&attr);
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
  if (subprogram && (D().dwarf_attr_integrate(subprogram, DW_AT_linkage_name, &attr) ||
                     D().dwarf_attr_integrate(subprogram, DW_AT_MIPS_linkage_name, &attr))) {
    if (const char* s = D().dwarf_formstring(&attr)) return Demangle(s);
  }
  const char* sym = D().dwfl_module_addrname(mod, addr);
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
  return D().dwarf_hasattr(die, DW_AT_low_pc) || D().dwarf_hasattr(die, DW_AT_ranges);
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
  if (D().dwarf_child(parent, &die) != 0) return false;
  do {
    int tag = D().dwarf_tag(&die);
    if (HasPcRange(&die)) {
      if (D().dwarf_haspc(&die, a) <= 0) continue;
      if (tag == DW_TAG_subprogram || tag == DW_TAG_inlined_subroutine) chain->push_back(die);
      FindPcScopes(&die, a, depth + 1, chain);
      return true;
    }
    if (IsScopeContainer(tag) && FindPcScopes(&die, a, depth + 1, chain)) return true;
  } while (D().dwarf_siblingof(&die, &die) == 0);
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
  if (Dwfl_Line* l = D().dwfl_module_getsrc(mod, addr)) {
    const char* src = D().dwfl_lineinfo(l, nullptr, &line, nullptr, nullptr, nullptr);
    if (src) file = src;
  }
  std::vector<Dwarf_Die> chain;
  Dwarf_Addr cu_bias = 0;
  Dwarf_Die* cudie = D().dwfl_module_addrdie(mod, addr, &cu_bias);
  if (cudie) FindPcScopes(cudie, addr - cu_bias, 0, &chain);
  Dwarf_Files* files = nullptr;
  size_t nfiles = 0;
  std::vector<Frame> frames;
  size_t first_inlined = !chain.empty() && D().dwarf_tag(&chain[0]) == DW_TAG_subprogram ? 1 : 0;
  for (size_t i = chain.size(); i-- > first_inlined;) {
    Dwarf_Die* die = &chain[i];
    if (D().dwarf_tag(die) != DW_TAG_inlined_subroutine) continue;
    Frame f = base;
    f.function = DieFunctionName(die);
    f.file = file;
    f.line = line;
    frames.push_back(std::move(f));
    Dwarf_Attribute attr;
    Dwarf_Word call_file = 0, call_line = 0;
    file.clear();
    line = 0;
    if (D().dwarf_attr(die, DW_AT_call_file, &attr) && D().dwarf_formudata(&attr, &call_file) == 0) {
      if (!files && D().dwarf_getsrcfiles(cudie, &files, &nfiles) != 0) files = nullptr;
      if (files && call_file < nfiles) {
        if (const char* src = D().dwarf_filesrc(files, call_file, nullptr, nullptr)) file = src;
      }
    }
    if (D().dwarf_attr(die, DW_AT_call_line, &attr) && D().dwarf_formudata(&attr, &call_line) == 0)
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
  const char* name = D().dwfl_module_info(mod, nullptr, &start, nullptr, nullptr, nullptr, nullptr, nullptr);
  if (name) f.module = name;
  *bias = 0;
  if (D().dwfl_module_getelf(mod, bias)) {
    f.module_offset = pc - *bias;
  } else {
    *bias = start;
    f.module_offset = pc - start;
  }
  return f;
}

// symbol_cache=: one line per symbolized PC, fields separated by tabs:
//   <build id>+<module offset, hex> <frames> then <function> <file> <line>
//   for each frame, innermost first (SymbolizeInModule's order).
// Frames whose function or file holds a tab, a newline or a NUL are not
// written; a line is written with one write(2) to a file opened O_APPEND,
// so the lines of concurrent processes do not interleave.
class SymbolCache {
 public:
  static constexpr size_t kMaxFramesPerPc = 64;

  void SetPath(std::string path) {
    path_ = std::move(path);
    loaded_ = false;
    entries_.clear();
  }

  // The frames cached for `key`, their pc, module and offset from `base`.
  bool Find(const std::string& key, const Frame& base, std::vector<Frame>* out) {
    if (path_.empty()) return false;
    if (!loaded_) Load();
    auto it = entries_.find(key);
    if (it == entries_.end()) return false;
    out->clear();
    for (const Entry& e : it->second) {
      Frame f = base;
      f.function = e.function;
      f.file = e.file;
      f.line = e.line;
      out->push_back(std::move(f));
    }
    return true;
  }

  void Add(const std::string& key, const std::vector<Frame>& frames) {
    if (path_.empty() || frames.empty() || frames.size() > kMaxFramesPerPc) return;
    auto clean = [](const std::string& t) {
      return t.find_first_of(std::string_view("\t\n\0", 3)) == t.npos;
    };
    std::string line = absl::StrCat(key, "\t", frames.size());
    std::vector<Entry> entry;
    for (const Frame& f : frames) {
      if (!clean(f.function) || !clean(f.file) || f.line < 0) return;
      absl::StrAppend(&line, "\t", f.function, "\t", f.file, "\t", f.line);
      entry.push_back({f.function, f.file, f.line});
    }
    line += '\n';
    entries_[key] = std::move(entry);
    const int fd = CreateForWrite(path_, CreateMode::kAppend);
    if (fd < 0) return;
    ssize_t n = write(fd, line.data(), line.size());
    (void)n;  // a line not written is symbolized again by the next process
    close(fd);
  }

 private:
  struct Entry {
    std::string function, file;
    int line = 0;
  };

  void Load() {
    loaded_ = true;
    std::string text;
    if (!ReadInputFile(path_, &text).empty()) return;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, '\t');
      size_t n = 0;
      if (f.size() < 2 || !absl::SimpleAtoi(f[1], &n) || n == 0 || n > kMaxFramesPerPc ||
          f.size() != 2 + 3 * n)
        continue;
      std::vector<Entry> entry(n);
      bool ok = true;
      for (size_t i = 0; i < n && ok; ++i) {
        entry[i].function = std::string(f[2 + 3 * i]);
        entry[i].file = std::string(f[3 + 3 * i]);
        ok = absl::SimpleAtoi(f[4 + 3 * i], &entry[i].line) && entry[i].line >= 0;
      }
      if (ok) entries_[std::string(f[0])] = std::move(entry);
    }
  }

  std::string path_;
  bool loaded_ = false;
  absl::flat_hash_map<std::string, std::vector<Entry>> entries_;
};

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

  // Also forgets this process's own results, so that the file answers.
  void SetCachePath(std::string path) {
    std::lock_guard<std::mutex> lock(mu_);
    shared_.SetPath(std::move(path));
    cache_.clear();
  }

 private:
  static const Dwfl_Callbacks* Callbacks() {
    static char* debuginfo_path = nullptr;
    static const Dwfl_Callbacks callbacks = {
        .find_elf = D().dwfl_linux_proc_find_elf,
        .find_debuginfo = LocalFindDebuginfo,
        .section_address = nullptr,
        .debuginfo_path = &debuginfo_path,
    };
    return &callbacks;
  }

  // Reports the process's current mappings (again after a dlopen).
  void ReportProcess() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    if (!dwfl_) {
      dwfl_ = D().dwfl_begin(Callbacks());
      if (!dwfl_) return;
    }
    D().dwfl_report_begin_add(dwfl_);
    D().dwfl_linux_proc_report(dwfl_, getpid());
    D().dwfl_report_end(dwfl_, nullptr, nullptr);
  }

  // "<build id>+<offset>" for symbol_cache=, "" when the module has no
  // build ID.
  static std::string SharedKey(Dwfl_Module* mod, const Frame& base) {
    const unsigned char* bits = nullptr;
    GElf_Addr vaddr = 0;
    int len = D().dwfl_module_build_id(mod, &bits, &vaddr);
    if (len < 8 || !bits) return "";
    std::string key;
    for (int i = 0; i < len; ++i) absl::StrAppendFormat(&key, "%02x", bits[i]);
    absl::StrAppendFormat(&key, "+%x", base.module_offset);
    return key;
  }

  std::vector<Frame> SymbolizeLocked(uintptr_t pc) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    Frame unknown;
    unknown.pc = pc;
    if (pc < 4096 || !LoadDw()) return {unknown};
    if (!dwfl_) ReportProcess();
    if (!dwfl_) return {unknown};
    Dwfl_Module* mod = D().dwfl_addrmodule(dwfl_, pc - 1);
    if (!mod) {
      ReportProcess();
      mod = D().dwfl_addrmodule(dwfl_, pc - 1);
    }
    if (!mod) return {unknown};
    Dwarf_Addr bias = 0;
    Frame base = ModuleFrame(mod, pc, &bias);
    const std::string key = SharedKey(mod, base);
    std::vector<Frame> frames;
    if (!key.empty() && shared_.Find(key, base, &frames)) return frames;
    frames = SymbolizeInModule(mod, pc - 1, base);
    if (!key.empty()) shared_.Add(key, frames);
    return frames;
  }

  std::mutex mu_;  // not absl::Mutex: visible to TSan (Debian's absl is uninstrumented)
  Dwfl* dwfl_ ABSL_GUARDED_BY(mu_) = nullptr;  // never freed: used until exit
  absl::flat_hash_map<uintptr_t, std::vector<Frame>> cache_ ABSL_GUARDED_BY(mu_);
  SymbolCache shared_ ABSL_GUARDED_BY(mu_);
};

Symbolizer& GlobalSymbolizer() {
  static Symbolizer* s = new Symbolizer();
  return *s;
}

}  // namespace

std::vector<Frame> SymbolizePcs(const std::vector<uintptr_t>& pcs) {
  std::vector<Frame> out;
  for (uintptr_t pc : pcs) {
    std::vector<Frame> frames = GlobalSymbolizer().Symbolize(pc);
    out.insert(out.end(), std::make_move_iterator(frames.begin()), std::make_move_iterator(frames.end()));
  }
  return out;
}

std::vector<Frame> SymbolizeStack(StackId id) { return SymbolizePcs(StackPcs(id)); }

void SetSymbolCache(const std::string& path) { GlobalSymbolizer().SetCachePath(path); }

std::vector<Frame> SymbolizeOffline(const std::vector<std::pair<std::string, uintptr_t>>& module_offsets) {
  std::vector<Frame> out;
  if (!LoadDw()) {
    for (const auto& [path, offset] : module_offsets) {
      Frame unknown;
      unknown.pc = offset;
      unknown.module = path;
      unknown.module_offset = offset;
      out.push_back(std::move(unknown));
    }
    return out;
  }
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {
      .find_elf = D().dwfl_build_id_find_elf,
      .find_debuginfo = LocalFindDebuginfo,
      .section_address = D().dwfl_offline_section_address,
      .debuginfo_path = &debuginfo_path,
  };
  Dwfl* dwfl = D().dwfl_begin(&callbacks);
  absl::flat_hash_map<std::string, Dwfl_Module*> modules;
  if (dwfl) {
    D().dwfl_report_begin(dwfl);
    for (const auto& [path, offset] : module_offsets) {
      if (path.empty() || modules.contains(path)) continue;
      modules[path] = D().dwfl_report_offline(dwfl, path.c_str(), path.c_str(), -1);
    }
    D().dwfl_report_end(dwfl, nullptr, nullptr);
  }
  for (const auto& [path, offset] : module_offsets) {
    Frame unknown;
    unknown.pc = offset;
    unknown.module = path;
    unknown.module_offset = offset;
    auto it = modules.find(path);
    Dwfl_Module* mod = it == modules.end() ? nullptr : it->second;
    Dwarf_Addr bias = 0;
    if (!mod || !D().dwfl_module_getelf(mod, &bias) || offset == 0) {
      out.push_back(std::move(unknown));
      continue;
    }
    for (Frame& f : SymbolizeInModule(mod, offset + bias - 1, unknown)) out.push_back(std::move(f));
  }
  if (dwfl) D().dwfl_end(dwfl);
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
