// traces/header: see header.h.  Also the public helpers of trace.h that
// describe the running process (CurrentProcessHeader, CurrentModules,
// ExpandTracePath).
#include "traces/header.h"

#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "traces/format.h"

#ifndef RDMASAN_VERSION
#define RDMASAN_VERSION "unknown"
#endif

namespace rdmasan::traces {
namespace {

// Header chunk tags (tag, length, value).
enum HeaderTag : uint32_t {
  kTagToolVersion = 1,
  kTagPid = 2,
  kTagExecutable = 3,
  kTagArg = 4,
  kTagStartTime = 5,
  kTagDeviceAttr = 6,
  kTagProperty = 7,
  kTagModule = 8,
  kTagArgc = 9,
};

// The same body serves the header's kTagModule value and the meta chunk's
// module record, so the two module maps cannot disagree.
void EncodeModuleBody(std::string* s, const Module& m) {
  AppendBytes(s, m.path);
  AppendVarint(s, m.bias);
  AppendVarint(s, m.start);
  AppendVarint(s, m.end);
  AppendBytes(s, m.build_id);
}

bool DecodeModuleBody(Dec& d, Module* m) {
  d.Bytes(&m->path);
  m->bias = d.Varint();
  m->start = d.Varint();
  m->end = d.Varint();
  d.Bytes(&m->build_id);
  return d.ok;
}

void PutTag(std::string* s, uint32_t tag, std::string_view value) {
  AppendVarint(s, tag);
  AppendBytes(s, value);
}
std::string VarintString(uint64_t v) {
  std::string s;
  AppendVarint(&s, v);
  return s;
}
std::string PairString(const std::string& k, const std::string& v) {
  std::string s;
  AppendBytes(&s, k);
  AppendBytes(&s, v);
  return s;
}

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Lowercase hex of the NT_GNU_BUILD_ID note in a PT_NOTE segment, "" if
// it has none.
std::string BuildId(const dl_phdr_info* info, const ElfW(Phdr) & ph) {
  std::string id;
  const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
  const char* end = p + ph.p_memsz;
  while (p + sizeof(ElfW(Nhdr)) <= end) {
    ElfW(Nhdr) nh;
    std::memcpy(&nh, p, sizeof(nh));
    const char* name = p + sizeof(nh);
    const char* desc = name + ((nh.n_namesz + 3) & ~3u);
    const char* next = desc + ((nh.n_descsz + 3) & ~3u);
    if (next > end) break;
    if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
      for (uint32_t k = 0; k < nh.n_descsz; ++k)
        absl::StrAppendFormat(&id, "%02x", static_cast<uint8_t>(desc[k]));
      break;
    }
    p = next;
  }
  return id;
}

int AddModule(dl_phdr_info* info, size_t, void* arg) {
  auto* out = static_cast<std::vector<Module>*>(arg);
  Module m;
  m.path = info->dlpi_name ? info->dlpi_name : "";
  if (m.path.empty() && out->empty()) {  // the main program is listed first, unnamed
    char buf[4096];
    ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
    if (n > 0) m.path.assign(buf, n);
  }
  // The name the loader was given (/lib/x86_64-linux-gnu/libstdc++.so.6) can
  // be a symlink; the live symbolizer names a module by /proc/self/maps, the
  // canonical path (/usr/lib/.../libstdc++.so.6.0.30).  Record that one, or
  // a replayed frame without source lines names another module than the
  // live report did.
  char real[PATH_MAX];
  if (!m.path.empty() && m.path[0] == '/' && realpath(m.path.c_str(), real)) m.path = real;
  m.bias = info->dlpi_addr;
  uint64_t lo = UINT64_MAX, hi = 0;
  for (int i = 0; i < info->dlpi_phnum; ++i) {
    const ElfW(Phdr)& ph = info->dlpi_phdr[i];
    if (ph.p_type == PT_LOAD) {
      lo = std::min<uint64_t>(lo, info->dlpi_addr + ph.p_vaddr);
      hi = std::max<uint64_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
    } else if (ph.p_type == PT_NOTE && m.build_id.empty()) {
      m.build_id = BuildId(info, ph);
    }
  }
  if (lo == UINT64_MAX) return 0;
  m.start = lo;
  m.end = hi;
  out->push_back(std::move(m));
  return 0;
}

}  // namespace

std::string EncodeHeader(const TraceHeader& h) {
  std::string s;
  PutTag(&s, kTagToolVersion, h.tool_version);
  PutTag(&s, kTagPid, VarintString(static_cast<uint64_t>(h.pid)));
  PutTag(&s, kTagExecutable, h.executable);
  PutTag(&s, kTagArgc, VarintString(std::max<uint64_t>(h.argc, h.argv.size())));
  for (const auto& a : h.argv) PutTag(&s, kTagArg, a);
  PutTag(&s, kTagStartTime, VarintString(static_cast<uint64_t>(h.start_time_ns)));
  for (const auto& [k, v] : h.device_attrs) PutTag(&s, kTagDeviceAttr, PairString(k, v));
  for (const auto& [k, v] : h.properties) PutTag(&s, kTagProperty, PairString(k, v));
  for (const auto& m : h.modules) {
    std::string body;
    EncodeModuleBody(&body, m);
    PutTag(&s, kTagModule, body);
  }
  return s;
}

absl::Status DecodeHeader(const uint8_t* p, size_t n, uint64_t off, TraceHeader* h) {
  Dec d{p, p + n};
  while (d.ok && d.p < d.end) {
    uint64_t tag_off = off + static_cast<uint64_t>(d.p - p);
    uint64_t tag = d.Varint();
    std::string v;
    if (!d.Bytes(&v))
      return absl::DataLossError(absl::StrFormat("header field at offset %d: truncated", tag_off));
    Dec f = DecOf(v);
    switch (tag) {
      case kTagToolVersion:
        h->tool_version = v;
        break;
      case kTagPid:
        h->pid = static_cast<int64_t>(f.Varint());
        break;
      case kTagExecutable:
        h->executable = v;
        break;
      case kTagArgc:
        h->argc = f.Varint();
        break;
      case kTagArg:
        h->argv.push_back(v);
        break;
      case kTagStartTime:
        h->start_time_ns = static_cast<int64_t>(f.Varint());
        break;
      case kTagDeviceAttr:
      case kTagProperty: {
        std::pair<std::string, std::string> kv;
        f.Bytes(&kv.first);
        f.Bytes(&kv.second);
        (tag == kTagDeviceAttr ? h->device_attrs : h->properties).push_back(std::move(kv));
        break;
      }
      case kTagModule: {
        Module m;
        if (DecodeModuleBody(f, &m)) h->modules.push_back(std::move(m));
        break;
      }
      default:
        break;  // a newer minor version's field
    }
    if (!f.ok)
      return absl::DataLossError(absl::StrFormat("header field %d at offset %d: malformed", tag, tag_off));
  }
  return absl::OkStatus();
}

void AppendModuleRecord(std::string* out, const Module& m) {
  std::string body;
  EncodeModuleBody(&body, m);
  AppendVarint(out, kCodeModule);
  AppendBytes(out, body);
}

bool DecodeModuleRecord(Dec& d, Module* m) {
  std::string body;
  if (!d.Bytes(&body)) return false;
  Dec f = DecOf(body);
  return DecodeModuleBody(f, m);
}

std::vector<Module> CurrentModules() {
  std::vector<Module> out;
  dl_iterate_phdr(AddModule, &out);
  return out;
}

TraceHeader CurrentProcessHeader() {
  TraceHeader h;
  h.tool_version = RDMASAN_VERSION;
  h.pid = getpid();
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) h.executable.assign(buf, n);
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::string all;
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0 && all.size() < (1u << 20)) all.append(buf, r);
    close(fd);
    size_t pos = 0;
    while (pos < all.size()) {
      size_t z = all.find('\0', pos);
      if (z == std::string::npos) z = all.size();
      ++h.argc;
      if (h.argv.size() < 32) h.argv.push_back(all.substr(pos, std::min<size_t>(z - pos, 256)));
      pos = z + 1;
    }
  }
  h.start_time_ns = NowNs();
  h.modules = CurrentModules();
  return h;
}

std::string ExpandTracePath(std::string_view pattern, int64_t pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      absl::StrAppend(&out, pid);
      ++i;
    } else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

}  // namespace rdmasan::traces
