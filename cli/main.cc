// cli/main: the `rdmasan` command.
//
//   rdmasan run [--name=value ...] [--] program [args...]
//       Validates each --name=value against core/options, appends them to
//       RDMASAN_OPTIONS (after any already in the environment, so they win),
//       prepends the absolute path of librdmasan.so to LD_PRELOAD and
//       execvp()s the program: the exit status is the program's own.
//   rdmasan devices [--name=value ...]
//       Lists the RDMA devices exactly as a program under the shim sees them,
//       by re-executing this binary under the shim (hidden subcommand
//       __devices) so the listing goes through the same interposed verbs.
//   rdmasan help | --help | --version
//
// What this module may not do: it never interprets options beyond checking
// that they exist and parse (the preloaded runtime owns their meaning), never
// talks to softnic or the shim directly (only through the verbs API, in the
// re-executed child), and never forks a supervisor around the program: `run`
// replaces itself with the program so signals, exit status and ptrace behave
// as if rdmasan were not there.
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <infiniband/verbs.h>

#include <cstdio>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/cli.h"
#include "cli/elf.h"
#include "cli/usage.h"
#include "core/checks.h"
#include "core/options.h"
#include "core/status.h"

#ifndef RDMASAN_VERSION
#define RDMASAN_VERSION "unknown"
#endif
#ifndef RDMASAN_LIB_FROM_BIN
#define RDMASAN_LIB_FROM_BIN "../lib/rdmasan"
#endif

namespace rdmasan::cli {
namespace {

// Exit codes, following the shell's conventions where there is one.
constexpr int kExitUsage = 2;
constexpr int kExitNotExecutable = 126;
constexpr int kExitNotFound = 127;

template <typename... Args>
void Error(const absl::FormatSpec<Args...>& format, const Args&... args) {
  std::fprintf(stderr, "rdmasan: %s\n", absl::StrFormat(format, args...).c_str());
}

}  // namespace

namespace {

constexpr char kLibName[] = "librdmasan.so";
constexpr char kHiddenDevices[] = "__devices";

void PrintUsage(FILE* out) { std::fputs(UsageText().c_str(), out); }

bool IsFile(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

std::string Dirname(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string SelfExe() {
  char buf[PATH_MAX];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "";
  return std::string(buf, n);
}

std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) != nullptr) return buf;
  return path;
}

// Finds librdmasan.so: $RDMASAN_LIB (the file, or a folder holding it) if
// set, else next to this executable (the build tree), else where the
// install puts it relative to bin/ (RDMASAN_LIB_FROM_BIN, "../lib/rdmasan").
// Returns "" and prints where it looked if none exists.
std::string FindPreloadLibrary() {
  std::vector<std::string> tried;
  if (const char* env = getenv("RDMASAN_LIB"); env != nullptr && *env != '\0') {
    std::string path = env;
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) path = absl::StrCat(path, "/", kLibName);
    if (!IsFile(path)) {
      Error("RDMASAN_LIB=%s: %s not found there", env, kLibName);
      return "";
    }
    // The loader only warns about a preload it cannot load, and the program
    // would run unchecked: refuse here instead.
    if (const ElfInfo elf = ReadElf(path); !elf.elf || !elf.shared_object) {
      Error("RDMASAN_LIB=%s: %s is not an ELF shared object (the program would run unchecked)", env, path);
      return "";
    }
    return Absolute(path);
  }
  std::string exe = SelfExe();
  if (!exe.empty()) {
    std::string dir = Dirname(exe);
    for (const std::string& candidate :
         {absl::StrCat(dir, "/", kLibName), absl::StrCat(dir, "/", RDMASAN_LIB_FROM_BIN, "/", kLibName)}) {
      if (IsFile(candidate)) return Absolute(candidate);
      tried.push_back(candidate);
    }
  }
  Error("cannot find %s (looked in: %s); set RDMASAN_LIB to its path", kLibName,
        tried.empty() ? "nowhere: /proc/self/exe unreadable" : absl::StrJoin(tried, ", "));
  return "";
}

// Options given on the command line, already validated, as "name=value".
// Sets RDMASAN_OPTIONS and LD_PRELOAD for a child run under the shim.
// `first`: sanitizer runtimes the program links, which must be loaded first.
bool PrepareEnvironment(const CommandLine& cl, const std::vector<std::string>& first = {}) {
  std::string lib = FindPreloadLibrary();
  if (lib.empty()) return false;
  // The command line's options are checked already; the environment's
  // would stop the program at start (interpose/init.cc): say so here.
  if (const char* env = getenv("RDMASAN_OPTIONS"); env != nullptr) {
    rdmasan::core::Options scratch;
    if (absl::Status s = rdmasan::core::ParseOptions(env, &scratch); !s.ok()) {
      for (const std::string& e : rdmasan::core::ErrorMessages(s)) Error("RDMASAN_OPTIONS: %s", e);
      return false;
    }
  }

  if (!cl.options.empty()) {
    std::string opts;
    if (const char* env = getenv("RDMASAN_OPTIONS"); env != nullptr && *env != '\0') {
      opts = env;
      if (opts.back() != ':') opts += ':';
    }
    absl::StrAppend(&opts, absl::StrJoin(cl.options, ":"));
    setenv("RDMASAN_OPTIONS", opts.c_str(), 1);
  }

  // Prepend the shim; drop an earlier copy of the same path so repeated
  // `rdmasan run` nesting does not load it twice.  A sanitizer runtime
  // already preloaded stays in front: it must be the first library (for a
  // sanitizer build of the shim itself), and so does one the program links
  // (by soname: the loader finds it as it would the program's DT_NEEDED).
  std::vector<std::string> runtimes, rest;
  auto base_of = [](absl::string_view item) { return item.substr(item.rfind('/') + 1); };
  auto kind_of = [&](absl::string_view item) { return base_of(item).substr(0, base_of(item).find('.')); };
  if (const char* env = getenv("LD_PRELOAD"); env != nullptr) {
    for (absl::string_view item : absl::StrSplit(env, absl::ByAnyChar(": "), absl::SkipEmpty())) {
      if (item == lib) continue;
      const absl::string_view base = base_of(item);
      const bool runtime = absl::StartsWith(base, "libasan.") || absl::StartsWith(base, "libtsan.") ||
                           absl::StartsWith(base, "libhwasan.") || absl::StartsWith(base, "libubsan.") ||
                           absl::StartsWith(base, "libmsan.");
      (runtime ? runtimes : rest).emplace_back(item.data(), item.size());
    }
  }
  for (const std::string& soname : first) {
    bool have = false;
    for (const std::string& r : runtimes) have = have || kind_of(r) == kind_of(soname);
    if (!have) runtimes.push_back(soname);
  }
  std::vector<std::string> preload = runtimes;
  preload.push_back(lib);
  preload.insert(preload.end(), rest.begin(), rest.end());
  setenv("LD_PRELOAD", absl::StrJoin(preload, ":").c_str(), 1);
  // The program begins a trace tree of its own (traces/tree.cc), even when
  // this run is itself inside a traced one.
  unsetenv("RDMASAN_TRACE_TREE");
  return true;
}

int Run(int argc, char** argv) {
  CommandLine cl;
  if (absl::Status s = ParseCommandLine(argc, argv, &cl); !s.ok()) return UsageError(s);
  if (cl.help) {
    std::fputs(rdmasan::core::OptionsHelp().c_str(), stdout);
    return 0;
  }
  if (cl.rest.empty()) {
    Error("run: no program given");
    std::fputs("usage: rdmasan run [--name=value ...] [--] program [args...]\n", stderr);
    return kExitUsage;
  }
  // What the loader must know of the program: LD_PRELOAD cannot reach a
  // statically linked one, and a sanitizer runtime it links must come first.
  std::vector<std::string> first;
  const std::string path = ResolveProgram(cl.rest[0]);
  if (!path.empty()) {
    const ElfInfo elf = ReadElf(path);
    if (elf.elf && elf.executable && !elf.interpreter) {
      Error(
          "run: %s is statically linked: LD_PRELOAD cannot reach it, so its verbs calls cannot be checked "
          "(link it dynamically)",
          path);
      return kExitUsage;
    }
    first = FirstRuntimes(elf.needed);
  }
  if (!PrepareEnvironment(cl, first)) return kExitUsage;
  cl.rest.push_back(nullptr);
  // The file execvp would find first on PATH, without its failed tries of
  // the folders before it; execvp for anything else (a script without
  // "#!" runs under /bin/sh) and for its error message.
  if (!path.empty()) execv(path.c_str(), cl.rest.data());
  execvp(cl.rest[0], cl.rest.data());
  int err = errno;
  Error("%s: %s", cl.rest[0], err == ENOENT ? "command not found" : strerror(err));
  return err == ENOENT ? kExitNotFound : kExitNotExecutable;
}

}  // namespace

bool PrepareEnvironmentForFuzz(const std::vector<std::string>& programs) {
  std::vector<std::string> first;
  for (const std::string& p : programs)
    if (const std::string path = ResolveProgram(p); !path.empty())
      for (std::string& r : FirstRuntimes(ReadElf(path).needed)) first.push_back(std::move(r));
  return PrepareEnvironment(CommandLine(), first);
}
std::string SelfExeForFuzz() { return SelfExe(); }

namespace {

int Devices(int argc, char** argv) {
  CommandLine cl;
  if (absl::Status s = ParseCommandLine(argc, argv, &cl); !s.ok()) return UsageError(s);
  if (cl.help) {
    std::fputs("usage: rdmasan devices [--name=value ...]\n", stdout);
    return 0;
  }
  if (!cl.rest.empty()) {
    Error("devices: unexpected argument '%s'", cl.rest[0]);
    return kExitUsage;
  }
  if (!PrepareEnvironment(cl)) return kExitUsage;
  std::string self = SelfExe();
  if (self.empty()) {
    Error("devices: cannot read /proc/self/exe: %s", strerror(errno));
    return 1;
  }
  char name[] = "rdmasan";
  char hidden[sizeof(kHiddenDevices)];
  memcpy(hidden, kHiddenDevices, sizeof(hidden));
  char* child_argv[] = {name, hidden, nullptr};
  execv(self.c_str(), child_argv);
  Error("devices: cannot re-execute %s: %s", self, strerror(errno));
  return 1;
}

// Port state as ibv_devinfo prints it (ibv_port_state_str says "active").
const char* PortStateName(ibv_port_state state) {
  switch (state) {
    case IBV_PORT_NOP:
      return "PORT_NOP";
    case IBV_PORT_DOWN:
      return "PORT_DOWN";
    case IBV_PORT_INIT:
      return "PORT_INIT";
    case IBV_PORT_ARMED:
      return "PORT_ARMED";
    case IBV_PORT_ACTIVE:
      return "PORT_ACTIVE";
    case IBV_PORT_ACTIVE_DEFER:
      return "PORT_ACTIVE_DEFER";
  }
  return "PORT_UNKNOWN";
}

std::string FormatGuid(__be64 guid_be) {
  uint64_t g = be64toh(guid_be);
  return absl::StrFormat("%04x:%04x:%04x:%04x", (g >> 48) & 0xffff, (g >> 32) & 0xffff, (g >> 16) & 0xffff,
                         g & 0xffff);
}

// The verbs `rdmasan devices` calls, looked up in libibverbs when it runs:
// the command does not link libibverbs, whose loading (with libnl's two
// libraries) was a third of every `rdmasan run`'s own start-up (issue 33).
// Under the shim, dlvsym on the library's handle hands back the shim's
// definitions (interpose/dl_hooks.cc), so the listing still goes through
// the interposed verbs.
struct Verbs {
  decltype(&::ibv_get_device_list) get_device_list = nullptr;
  decltype(&::ibv_free_device_list) free_device_list = nullptr;
  decltype(&::ibv_get_device_name) get_device_name = nullptr;
  decltype(&::ibv_get_device_guid) get_device_guid = nullptr;
  decltype(&::ibv_open_device) open_device = nullptr;
  decltype(&::ibv_close_device) close_device = nullptr;
  decltype(&::ibv_query_device) query_device = nullptr;
  // The exported ibv_query_port, which verbs.h's inline of the same name
  // calls for a context without the extended op.
  int (*query_port_compat)(ibv_context*, uint8_t, ibv_port_attr*) = nullptr;
};

// Loads libibverbs; false (with the reason on stderr) when it cannot.
bool LoadVerbs(Verbs* v) {
  void* lib = dlopen("libibverbs.so.1", RTLD_NOW | RTLD_GLOBAL);
  if (!lib) {
    Error("devices: cannot load libibverbs.so.1: %s", dlerror());
    return false;
  }
  bool ok = true;
  auto find = [&](auto& fn, const char* name) {
    fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlvsym(lib, name, "IBVERBS_1.1"));
    if (!fn) {
      Error("devices: libibverbs.so.1 has no %s@IBVERBS_1.1", name);
      ok = false;
    }
  };
  find(v->get_device_list, "ibv_get_device_list");
  find(v->free_device_list, "ibv_free_device_list");
  find(v->get_device_name, "ibv_get_device_name");
  find(v->get_device_guid, "ibv_get_device_guid");
  find(v->open_device, "ibv_open_device");
  find(v->close_device, "ibv_close_device");
  find(v->query_device, "ibv_query_device");
  find(v->query_port_compat, "ibv_query_port");
  return ok;
}

// What verbs.h's ibv_query_port does, through the loaded library.
int QueryPort(const Verbs& v, ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  if (verbs_context* vctx = verbs_get_ctx_op(ctx, query_port))
    return vctx->query_port(ctx, port, attr, sizeof(*attr));
  memset(attr, 0, sizeof(*attr));
  return v.query_port_compat(ctx, port, attr);
}

// Runs under the shim (LD_PRELOAD set by Devices): one line per device.
int ListDevicesUnderShim() {
  Verbs v;
  if (!LoadVerbs(&v)) return 1;
  int num = 0;
  ibv_device** list = v.get_device_list(&num);
  if (list == nullptr) {
    Error("devices: ibv_get_device_list failed: %s", strerror(errno));
    return 1;
  }
  if (num == 0) {
    v.free_device_list(list);
    Error("devices: no RDMA devices found");
    return 1;
  }
  int status = 0;
  for (int i = 0; i < num; ++i) {
    const char* dev_name = v.get_device_name(list[i]);
    std::string line =
        absl::StrFormat("%-10s guid %s", dev_name ? dev_name : "?", FormatGuid(v.get_device_guid(list[i])));
    ibv_context* ctx = v.open_device(list[i]);
    if (ctx == nullptr) {
      absl::StrAppend(&line, "  (ibv_open_device failed: ", strerror(errno), ")");
      std::printf("%s\n", line.c_str());
      status = 1;
      continue;
    }
    ibv_device_attr attr;
    int rc = v.query_device(ctx, &attr);
    if (rc != 0) {
      absl::StrAppend(&line, "  (ibv_query_device failed: ", strerror(rc), ")");
      status = 1;
    } else {
      absl::StrAppendFormat(&line, "  ports %d", attr.phys_port_cnt);
      for (int port = 1; port <= attr.phys_port_cnt; ++port) {
        ibv_port_attr pattr;
        rc = QueryPort(v, ctx, static_cast<uint8_t>(port), &pattr);
        if (rc != 0) {
          absl::StrAppendFormat(&line, "  port %d (ibv_query_port failed: %s)", port, strerror(rc));
          status = 1;
          continue;
        }
        absl::StrAppendFormat(&line, "  port %d %s lid %d", port, PortStateName(pattr.state), pattr.lid);
      }
    }
    std::printf("%s\n", line.c_str());
    v.close_device(ctx);
  }
  v.free_device_list(list);
  std::fflush(stdout);
  return status;
}

// The table of checks (core/checks.inc), as users name them in checks=
// and in suppressions.
int Checks() {
  for (size_t i = 0; i < rdmasan::core::kNumChecks; ++i) {
    auto id = static_cast<rdmasan::core::CheckId>(i);
    std::printf("%-27s %-7s %-3s %s\n", rdmasan::core::CheckName(id),
                rdmasan::core::SeverityName(rdmasan::core::CheckSeverity(id)),
                rdmasan::core::CheckDefaultOn(id) ? "on" : "off", rdmasan::core::CheckDescription(id));
  }
  return 0;
}

int Main(int argc, char** argv) {
  if (argc < 2) {
    PrintUsage(stderr);
    return kExitUsage;
  }
  absl::string_view command = argv[1];
  if (command == "run") return Run(argc - 2, argv + 2);
  if (command == "devices") return Devices(argc - 2, argv + 2);
  if (command == "replay") return Replay(argc - 2, argv + 2);
  if (command == "fuzz") return Fuzz(argc - 2, argv + 2);
  if (command == "checks") return Checks();
  if (command == "trace") return Trace(argc - 2, argv + 2);
  if (command == kHiddenDevices) return ListDevicesUnderShim();
  if (command == "help" || command == "--help" || command == "-h") {
    PrintUsage(stdout);
    return 0;
  }
  if (command == "version" || command == "--version") {
    std::printf("rdmasan %s\n", RDMASAN_VERSION);
    return 0;
  }
  Error("unknown command '%s'", command);
  PrintUsage(stderr);
  return kExitUsage;
}

}  // namespace
}  // namespace rdmasan::cli

int main(int argc, char** argv) { return rdmasan::cli::Main(argc, argv); }
