// Finding the real libibverbs and the real dlsym (see loader.h).
#include "interpose/loader.h"

#include <dlfcn.h>
#include <elf.h>
#include <link.h>

namespace rdmasan::interpose {
namespace {

// No strcmp or strstr: a sanitizer's interceptors of those may not be
// ready when the bootstrap runs.
bool Same(const char* a, const char* b) {
  while (*a && *a == *b) ++a, ++b;
  return *a == *b;
}

// Whether the base name of `path` starts with `prefix`.
bool BaseStartsWith(const char* path, const char* prefix) {
  const char* base = path;
  for (const char* p = path; *p; ++p)
    if (*p == '/') base = p + 1;
  while (*prefix && *base == *prefix) ++base, ++prefix;
  return *prefix == 0;
}

uint32_t GnuHash(const char* s) {
  uint32_t h = 5381;
  for (; *s; ++s) h = h * 33 + static_cast<unsigned char>(*s);
  return h;
}

uint32_t SysvHash(const char* s) {
  uint32_t h = 0;
  for (; *s; ++s) {
    h = (h << 4) + static_cast<unsigned char>(*s);
    const uint32_t g = h & 0xf0000000u;
    if (g) h ^= g >> 24;
    h &= ~g;
  }
  return h;
}

// The address of the default-version function `name` defined by the loaded
// object `m`, read from its dynamic section (GNU or SysV hash table), or
// null.
void* DefinedIn(const link_map* m, const char* name) {
  const ElfW(Sym)* symtab = nullptr;
  const char* strtab = nullptr;
  const uint32_t* gnu = nullptr;
  const ElfW(Word)* sysv = nullptr;
  const ElfW(Half)* versym = nullptr;
  const ElfW(Addr) base = m->l_addr;
  // glibc relocates these entries in place on most targets, not on all:
  // an address below the load base is still an offset.
  auto at = [base](ElfW(Addr) a) { return a < base ? a + base : a; };
  for (const ElfW(Dyn)* d = m->l_ld; d && d->d_tag != DT_NULL; ++d) {
    switch (d->d_tag) {
      case DT_SYMTAB:
        symtab = reinterpret_cast<const ElfW(Sym)*>(at(d->d_un.d_ptr));
        break;
      case DT_STRTAB:
        strtab = reinterpret_cast<const char*>(at(d->d_un.d_ptr));
        break;
      case DT_GNU_HASH:
        gnu = reinterpret_cast<const uint32_t*>(at(d->d_un.d_ptr));
        break;
      case DT_HASH:
        sysv = reinterpret_cast<const ElfW(Word)*>(at(d->d_un.d_ptr));
        break;
      case DT_VERSYM:
        versym = reinterpret_cast<const ElfW(Half)*>(at(d->d_un.d_ptr));
        break;
      default:
        break;
    }
  }
  if (!symtab || !strtab || (!gnu && !sysv)) return nullptr;
  auto match = [&](uint32_t i) -> void* {
    const ElfW(Sym)& s = symtab[i];
    if (s.st_shndx == SHN_UNDEF || (s.st_info & 0xf) != STT_FUNC) return nullptr;
    if (versym && (versym[i] & 0x8000)) return nullptr;  // a hidden (non-default) version
    if (!Same(strtab + s.st_name, name)) return nullptr;
    return reinterpret_cast<void*>(base + s.st_value);
  };
  if (gnu) {
    const uint32_t nbuckets = gnu[0], symoffset = gnu[1], bloom_words = gnu[2];
    if (nbuckets == 0) return nullptr;
    const auto* buckets =
        reinterpret_cast<const uint32_t*>(reinterpret_cast<const ElfW(Addr)*>(gnu + 4) + bloom_words);
    const uint32_t* chain = buckets + nbuckets;
    const uint32_t h = GnuHash(name);
    uint32_t i = buckets[h % nbuckets];
    if (i < symoffset) return nullptr;
    for (;; ++i) {
      const uint32_t h2 = chain[i - symoffset];
      if ((h | 1) == (h2 | 1))
        if (void* f = match(i)) return f;
      if (h2 & 1) return nullptr;
    }
  }
  const ElfW(Word) nbucket = sysv[0];
  if (nbucket == 0) return nullptr;
  const ElfW(Word)* bucket = sysv + 2;
  const ElfW(Word)* chain = bucket + nbucket;
  for (ElfW(Word) i = bucket[SysvHash(name) % nbucket]; i != STN_UNDEF; i = chain[i])
    if (void* f = match(i)) return f;
  return nullptr;
}

// libc's dlvsym, found without a symbol lookup: the one defined by the
// object named libc.so.* (glibc's soname on every target).
DlvsymFn LibcDlvsym() {
  for (const link_map* m = _r_debug.r_map; m; m = m->l_next)
    if (m->l_name && BaseStartsWith(m->l_name, "libc.so"))
      if (void* f = DefinedIn(m, "dlvsym")) return reinterpret_cast<DlvsymFn>(f);
  return nullptr;
}

struct NextDl {
  std::atomic<DlsymFn> sym{nullptr};
  std::atomic<DlvsymFn> vsym{nullptr};
};
NextDl g_next;

// Fills g_next: the dlsym and dlvsym that come after the shim, asked of
// libc's dlvsym from here, so RTLD_NEXT means "after the shim".  Idempotent;
// racing threads store the same values.
void Bootstrap() {
  const DlvsymFn libc = LibcDlvsym();
  if (!libc) return;
  auto next = [libc](const char* name) {
    void* f = libc(RTLD_NEXT, name, "GLIBC_2.34");
    return f ? f : libc(RTLD_NEXT, name, "GLIBC_2.2.5");
  };
  DlvsymFn v = reinterpret_cast<DlvsymFn>(next("dlvsym"));
  DlsymFn s = reinterpret_cast<DlsymFn>(next("dlsym"));
  if (!v) v = libc;
  if (!s) return;
  g_next.vsym.store(v, std::memory_order_release);
  g_next.sym.store(s, std::memory_order_release);
}

int CountLoaded(dl_phdr_info* info, size_t, void* out) {
  *static_cast<uint64_t*>(out) = info->dlpi_adds;
  return 1;  // the counter is in every entry: the first one will do
}

}  // namespace

DlsymFn NextDlsym() {
  DlsymFn f = g_next.sym.load(std::memory_order_acquire);
  if (!f) {
    Bootstrap();
    f = g_next.sym.load(std::memory_order_acquire);
  }
  return f;
}

DlvsymFn NextDlvsym() {
  DlvsymFn f = g_next.vsym.load(std::memory_order_acquire);
  if (!f) {
    Bootstrap();
    f = g_next.vsym.load(std::memory_order_acquire);
  }
  return f;
}

void* LoadedVerbs() {
  static std::atomic<void*> handle{nullptr};
  void* h = handle.load(std::memory_order_acquire);
  if (h) return h;
  // RTLD_NOLOAD: only a library the program loaded; the reference taken is
  // kept (loader.h), so the program's dlclose never unmaps what the shim
  // points into.
  h = dlopen("libibverbs.so.1", RTLD_NOLOAD | RTLD_LAZY | RTLD_LOCAL);
  if (!h) return nullptr;
  void* expected = nullptr;
  if (!handle.compare_exchange_strong(expected, h, std::memory_order_acq_rel)) {
    dlclose(h);  // another thread's reference is the one kept
    return expected;
  }
  return h;
}

bool IsVerbsLibrary(const char* path) { return path && BaseStartsWith(path, "libibverbs.so"); }

uint64_t LoadCount() {
  uint64_t adds = 0;
  dl_iterate_phdr(CountLoaded, &adds);
  return adds;
}

void* Real(const char* name, const char* version) {
  const DlvsymFn vsym = NextDlvsym();
  const DlsymFn sym = NextDlsym();
  if (!vsym || !sym) return nullptr;
  auto in = [&](void* scope) {
    void* f = version ? vsym(scope, name, version) : nullptr;
    return f ? f : sym(scope, name);
  };
  if (void* f = in(RTLD_NEXT)) return f;
  void* verbs = LoadedVerbs();
  return verbs ? in(verbs) : nullptr;
}

void* NextFunction(const char* name) {
  const DlsymFn sym = NextDlsym();
  return sym ? sym(RTLD_NEXT, name) : nullptr;
}

void* RealSym::Retry() {
  const uint64_t loaded = LoadCount();
  if (tried_at_.exchange(loaded, std::memory_order_acq_rel) == loaded) return nullptr;
  void* f = Real(name_, version_);
  if (f) fn_.store(f, std::memory_order_release);
  return f;
}

}  // namespace rdmasan::interpose
