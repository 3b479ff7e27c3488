// `rdmasan fuzz`: campaigns over unmodified programs, and `rdmasan fuzz
// merge` of their shards.
//
// A campaign runs a program (or a server and a client, the `---` form)
// again and again under `rdmasan run`, each run with its own seed, its own
// softnic fabric and its own TCP port ({port} in the arguments), deciding
// completion orders and faults by the chosen strategy: `random` (the
// per-queue streams merged at random with bounded holds, --faults rules as
// written, BUGGIFY-style when they give no probability), `pct` (PCT
// priorities of depth --depth), or `enumerate` (a baseline run counts how
// often each fault point is reached; then run i injects exactly one fault,
// the n-th hit of one point, as the kernel's fail-nth does).  Findings are
// the runs' ERROR reports (read as JSON lines from the runs' logs), `crash`
// (the shim's report, or a death by signal) and `hang` (the shim's
// watchdog, or the per-run --timeout).  A program that exits non-zero after
// an injected fault is behaving: its status is recorded, never a finding;
// in the pair form a hang of one side after the other side failed is the
// failure's consequence, not a finding.  Findings are deduplicated by
// (check id, top three frames of the report's stack); each new one is saved
// in DIR/<n>-<check-id>/ at once (report, decision logs, repro.sh), and
// when the search ends its decision log is shrunk (ddmin over the logged
// decisions, replayed with schedule=, within --shrink_time) to the fewest
// decisions that still give the same finding, told as a numbered story,
// and re-run once with text reports and a trace.  DIR keeps campaign.json
// (what the campaign is), runs.txt (one line per finished run), so a
// campaign interrupted or re-run with a larger --runs resumes where it
// stopped, and `--shard=K/N` campaigns over the same settings merge.
//
// May not: interpret the shim's options beyond what it sets per run, run
// anything but the given programs (under the shim) and their repro.sh, leave
// children behind (each run is its own process group, killed at the end),
// or write outside DIR (files created without following links).
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cli/cli.h"
#include "core/decision.h"
#include "core/file.h"
#include "core/options.h"
#include "core/status.h"

namespace rdmasan::cli {
namespace {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

constexpr int kExitUsage = 2;
constexpr int kExitFindings = 66;
constexpr char kCampaignFile[] = "campaign.json";
constexpr char kRunsFile[] = "runs.txt";
constexpr uint64_t kBaseline = ~uint64_t(0);
constexpr char kUsage[] =
    "usage: rdmasan fuzz [--runs=N] [--time=S] [--jobs=J] [--seed=S] [--shard=K/N] [--timeout=S]\n"
    "                    [--strategy=random|pct|enumerate] [--depth=D] [--faults=SPEC] [--out=DIR]\n"
    "                    [--shrink_time=S] [--name=value rdmasan options...]\n"
    "                    -- program [args...] [--- client [args...]]\n"
    "       rdmasan fuzz merge --out=DIR SHARD_DIR...\n"
    "{port} in an argument becomes a TCP port free for the run (both sides of a pair get the same).\n";

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

template <typename... Args>
void Say(const absl::FormatSpec<Args...>& format, const Args&... args) {
  std::fprintf(stderr, "rdmasan fuzz: %s\n", absl::StrFormat(format, args...).c_str());
}

uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// ------------------------------------------------------------ small files --

bool ReadText(const std::string& path, std::string* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  out->clear();
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(fd);
  return n == 0;
}

bool WriteText(const std::string& path, absl::string_view text, int perm = 0644) {
  int fd = core::CreateForWrite(path, core::CreateMode::kTruncate, perm);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (perm != 0644) fchmod(fd, perm);
  close(fd);
  return done == text.size();
}

bool AppendText(const std::string& path, absl::string_view text) {
  int fd = core::CreateForWrite(path, core::CreateMode::kAppend);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// mkdir, refusing a link in its place; true if it is a directory now.
bool MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return true;
  return errno == EEXIST && IsDir(path);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

// Empties a work directory of ours (plain files only).
void ClearDir(const std::string& dir) {
  for (const std::string& n : ListDir(dir)) unlink(absl::StrCat(dir, "/", n).c_str());
}

std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) != nullptr) return buf;
  return path;
}

std::string Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == absl::string_view::npos ? path : path.substr(slash + 1));
}

// Whether something listens on TCP `port` (IPv4 or IPv6), from /proc.
bool Listening(int port) {
  const std::string hex = absl::StrFormat(":%04X", port);
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::string text;
    if (!ReadText(file, &text)) continue;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() > 3 && f[3] == "0A" && absl::EndsWith(f[1], hex)) return true;
    }
  }
  return false;
}

// Shell single-quoting; {port} becomes "$port".
std::string ShellWord(absl::string_view arg) {
  std::string out, quoted;
  auto flush = [&] {
    if (!quoted.empty()) absl::StrAppend(&out, "'", quoted, "'");
    quoted.clear();
  };
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg.substr(i, 6) == "{port}") {
      flush();
      out += "\"$port\"";
      i += 5;
    } else if (arg[i] == '\'') {
      flush();
      out += "\\'";
    } else {
      quoted += arg[i];
    }
  }
  flush();
  return out.empty() ? "''" : out;
}

std::string WithPort(const std::string& arg, int port) {
  return absl::StrReplaceAll(arg, {{"{port}", absl::StrCat(port)}});
}

// ----------------------------------------------------------------- config --

struct Config {
  uint64_t runs = 0;  // 0: unset
  double time = 0;    // seconds, 0: unset
  int jobs = 1;
  uint64_t seed = 1;
  int shard_k = 0, shard_n = 1;
  int timeout = 10;
  std::string strategy = "random";
  int depth = 3;
  std::string faults;
  std::string out = "rdmasan-fuzz";
  int shrink_time = 60;
  std::vector<std::string> options;  // rdmasan options for every run, "name=value"
  bool user_reorder = false;
  std::vector<std::vector<std::string>> roles;  // [0]: program (server); [1]: client
  bool uses_port = false;
};

// Options the campaign sets itself for each run.
bool CampaignOwned(absl::string_view name) {
  return name == "schedule" || name == "decision_log" || name == "log_path" || name == "report_format" ||
         name == "softnic_fabric" || name == "trace" || name == "hang_timeout" || name == "help";
}

bool ParseInt(absl::string_view v, int64_t lo, int64_t hi, int64_t* out) {
  return absl::SimpleAtoi(v, out) && *out >= lo && *out <= hi;
}

absl::Status ParseFuzzArgs(int argc, char** argv, Config* c) {
  int i = 0;
  for (; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (!absl::StartsWith(arg, "--")) break;
    absl::string_view body = arg.substr(2);
    size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    absl::string_view value = eq == absl::string_view::npos ? "" : body.substr(eq + 1);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrFormat("fuzz: option '%s': %s", arg, why));
    };
    int64_t n = 0;
    if (name == "runs") {
      if (!ParseInt(value, 1, int64_t(1) << 40, &n)) return bad("expected a number of runs >= 1");
      c->runs = static_cast<uint64_t>(n);
    } else if (name == "time") {
      if (!absl::SimpleAtod(value, &c->time) || !(c->time > 0)) return bad("expected seconds > 0");
    } else if (name == "jobs") {
      if (!ParseInt(value, 1, 256, &n)) return bad("expected 1..256");
      c->jobs = static_cast<int>(n);
    } else if (name == "seed") {
      if (!ParseInt(value, 0, INT64_MAX, &n)) return bad("expected a number >= 0");
      c->seed = static_cast<uint64_t>(n);
    } else if (name == "shard") {
      std::vector<absl::string_view> kn = absl::StrSplit(value, '/');
      int64_t k = 0, total = 0;
      if (kn.size() != 2 || !ParseInt(kn[1], 1, 1 << 20, &total) || !ParseInt(kn[0], 0, total - 1, &k))
        return bad("expected K/N with 0 <= K < N (shards count from 0, as a Kubernetes indexed Job does)");
      c->shard_k = static_cast<int>(k);
      c->shard_n = static_cast<int>(total);
    } else if (name == "timeout") {
      if (!ParseInt(value, 1, 86400, &n)) return bad("expected seconds, 1..86400");
      c->timeout = static_cast<int>(n);
    } else if (name == "strategy") {
      if (value != "random" && value != "pct" && value != "enumerate")
        return bad("expected random, pct or enumerate");
      c->strategy = std::string(value);
    } else if (name == "depth") {
      if (!ParseInt(value, 1, 16, &n)) return bad("expected 1..16");
      c->depth = static_cast<int>(n);
    } else if (name == "faults") {
      if (auto spec = core::ParseFaultSpec(value); !spec.ok()) return bad(spec.status().message());
      c->faults = std::string(value);
    } else if (name == "out") {
      if (value.empty()) return bad("expected a directory");
      c->out = std::string(value);
    } else if (name == "shrink_time") {
      if (!ParseInt(value, 0, 86400, &n)) return bad("expected seconds, 0..86400");
      c->shrink_time = static_cast<int>(n);
    } else {
      if (CampaignOwned(name))
        return bad("the campaign sets this option for each run itself (see `rdmasan fuzz --help`)");
      CommandLine one;
      char* single[] = {argv[i]};
      RDMASAN_RETURN_IF_ERROR(ParseCommandLine(1, single, &one));
      for (std::string& o : one.options) c->options.push_back(std::move(o));
      if (name == "reorder") c->user_reorder = true;
    }
  }
  if (c->strategy != "pct" && c->depth != 3)
    for (int j = 0; j < i; ++j)
      if (absl::StartsWith(argv[j], "--depth="))
        return absl::InvalidArgumentError("fuzz: --depth applies to --strategy=pct only");
  std::vector<std::string> role;
  for (; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "---") {
      c->roles.push_back(std::move(role));
      role.clear();
      continue;
    }
    role.push_back(argv[i]);
    if (absl::StrContains(argv[i], "{port}")) c->uses_port = true;
  }
  c->roles.push_back(std::move(role));
  if (c->roles.size() > 2) return absl::InvalidArgumentError("fuzz: at most one '---' (server --- client)");
  for (const auto& r : c->roles)
    if (r.empty()) return absl::InvalidArgumentError("fuzz: no program given");
  return absl::OkStatus();
}

// Where `prog` would be executed from (execvp's search), or "".
std::string FindProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return access(prog.c_str(), X_OK) == 0 ? Absolute(prog) : "";
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string full = absl::StrCat(dir.empty() ? "." : dir, "/", prog);
    struct stat st;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) return prog;
  }
  return "";
}

// ---------------------------------------------------------------- reports --

struct Finding {
  std::string check;
  std::string key;      // check id and top frames: the dedup key
  std::string where;    // "file.c:12 in fn"
  std::string message;  // the report's first line
  std::string json;     // the report as the shim wrote it ("" if made up here)
  int role = 0;
};

// "fn file.c:12" for a JSON frame.
std::string FrameText(const Json& f) {
  std::string fn = f.value("function", "");
  std::string file = f.value("file", "");
  int line = f.value("line", 0);
  if (!file.empty()) return absl::StrCat(fn.empty() ? "?" : fn, " ", Basename(file), ":", line);
  if (!fn.empty()) return fn;
  return absl::StrCat(Basename(f.value("module", "?")), "+", f.value("offset", "?"));
}

std::optional<Finding> FindingFromJson(const std::string& line, int role) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("check") || !j["check"].is_string()) return std::nullopt;
  if (j.value("severity", "") != "error") return std::nullopt;
  Finding f;
  f.check = j["check"].get<std::string>();
  f.message = j.value("message", "");
  f.json = line;
  f.role = role;
  std::vector<std::string> top;
  if (j.contains("stack") && j["stack"].is_array()) {
    for (const Json& fr : j["stack"]) {
      if (!fr.is_object()) continue;
      if (top.empty())
        f.where = !fr.value("file", "").empty()
                      ? absl::StrCat(Basename(fr.value("file", "")), ":", fr.value("line", 0), " in ",
                                     fr.value("function", "?"))
                      : FrameText(fr);
      if (top.size() < 3) top.push_back(FrameText(fr));
    }
  }
  f.key = absl::StrCat(f.check, " | ", absl::StrJoin(top, " | "));
  return f;
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGSYS:
      return "SIGSYS";
    case SIGINT:
      return "SIGINT";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "signal";
  }
}

// ------------------------------------------------------------------- runs --

// One planned run: the options that decide its schedule, per role.
struct Plan {
  uint64_t index = 0;
  uint64_t seed = 0;
  std::vector<std::vector<std::string>> decide;
  std::string what;  // enumerate: the one fault
};

struct Proc {
  pid_t pid = -1;
  bool started = false, done = false;
  int status = 0;
  bool hang_killed = false;  // ended by us once the shim had reported a hang
};

// A run in flight.
struct Exec {
  Plan plan;
  int slot = 0;
  std::string work;
  int port = 0;
  bool text = false;         // text reports to the program's stderr (confirm runs)
  std::string trace_prefix;  // confirm runs: record traces here
  std::vector<Proc> procs;
  Clock::time_point start, deadline;
  bool term_sent = false, kill_sent = false;
  Clock::time_point kill_at;
  Clock::time_point next_look;  // for the shim's hang report in the logs
  bool peer_failed = false;
};

struct RoleOutcome {
  std::string status;   // "0", "1", "SIGSEGV", "timeout"
  bool failed = false;  // exited non-zero, or died of a signal not ours
  std::vector<Finding> findings;
  std::string hang_discounted;
};

struct Outcome {
  std::vector<RoleOutcome> roles;
  double seconds = 0;
  std::vector<Finding> findings() const {
    std::vector<Finding> all;
    for (const RoleOutcome& r : roles) all.insert(all.end(), r.findings.begin(), r.findings.end());
    return all;
  }
};

// A finding's directory, as saved.
struct Saved {
  int number = 0;
  std::string dir;  // DIR/<n>-<check>
  std::string key, check;
};

class Campaign {
 public:
  explicit Campaign(Config c) : c_(std::move(c)) {}
  int Main();

 private:
  const char* RoleName(int r) const { return c_.roles.size() == 1 ? "" : (r == 0 ? "server" : "client"); }
  std::string RolePrefix(int r) const { return c_.roles.size() == 1 ? "" : absl::StrCat(RoleName(r), "."); }
  uint64_t RunSeed(uint64_t i) const { return Mix(c_.seed * 0x100000001b3ull + i) & 0x7fffffff; }
  uint64_t RoleSeed(uint64_t seed, int r) const { return r == 0 ? seed : Mix(seed ^ 0xc1e47) & 0x7fffffff; }

  bool Setup();
  bool CheckCampaignFile();
  Plan MakePlan(uint64_t i) const;
  bool Enumerate();
  int FreePort();
  std::vector<std::string> RoleOptions(const Exec& e, int r) const;
  void Spawn(Exec& e, int r);
  void Start(Exec& e);
  bool Step(Exec& e);
  void KillAll(Exec& e);
  Outcome Analyze(const Exec& e);
  Outcome RunSync(Plan plan, bool text = false, const std::string& trace_prefix = "");
  void Record(const Exec& e, const Outcome& o);
  void SaveFinding(const Exec& e, const Finding& f, const Outcome& o);
  void WriteRepro(const Saved& s, const std::string& header) const;
  void Shrink(const Saved& s);
  std::string Story(const std::vector<std::pair<int, std::string>>& lines) const;
  void LoadState();
  void Progress(bool force);
  int Finish();

  Config c_;
  std::string dir_, work_, self_, token_;
  // enumerate: (role, fault) per run index
  std::vector<std::pair<int, std::string>> enumeration_;
  absl::flat_hash_set<uint64_t> done_;
  uint64_t runs_done_ = 0, runs_now_ = 0;
  std::vector<Saved> saved_;
  absl::flat_hash_map<std::string, int> keys_;
  std::set<int> ports_in_use_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_progress_ = started_;
  bool tty_ = false;
  bool progress_shown_ = false;
  int setup_status_ = 1;
};

bool Campaign::Setup() {
  self_ = SelfExeForFuzz();
  if (self_.empty()) {
    Say("cannot read /proc/self/exe");
    return false;
  }
  for (auto& role : c_.roles) {
    std::string where = FindProgram(role[0]);
    if (where.empty()) {
      Say("%s: command not found", role[0]);
      setup_status_ = 127;
      return false;
    }
    role[0] = where;
  }
  dir_ = c_.out;
  if (!MakeDir(dir_)) {
    Say("cannot create the campaign directory '%s': %s", dir_, strerror(errno));
    return false;
  }
  dir_ = Absolute(dir_);
  work_ = absl::StrCat(dir_, "/work");
  if (!MakeDir(work_)) {
    Say("cannot create '%s': %s", work_, strerror(errno));
    return false;
  }
  uint32_t r = 0;
  if (getrandom(&r, sizeof r, 0) != sizeof r) r = static_cast<uint32_t>(getpid() ^ time(nullptr));
  token_ = absl::StrFormat("%08x", r);
  tty_ = isatty(STDERR_FILENO);
  return CheckCampaignFile();
}

// campaign.json says what the campaign is; a directory holding another
// campaign is refused, one holding this one is resumed.
bool Campaign::CheckCampaignFile() {
  Json j;
  j["format"] = "rdmasan fuzz campaign 1";
  j["strategy"] = c_.strategy;
  j["seed"] = c_.seed;
  j["depth"] = c_.strategy == "pct" ? c_.depth : 0;
  j["faults"] = c_.faults;
  j["options"] = c_.options;
  j["programs"] = c_.roles;
  const std::string path = absl::StrCat(dir_, "/", kCampaignFile);
  std::string text;
  if (ReadText(path, &text)) {
    Json old = Json::parse(text, nullptr, false);
    Json mine = j;
    if (!old.is_object()) {
      Say("%s is not a campaign file; use another --out", path);
      return false;
    }
    old.erase("shard");
    if (old != mine) {
      Say("%s holds another campaign (%s); use another --out, or the same settings to resume it", dir_,
          old.dump());
      setup_status_ = kExitUsage;
      return false;
    }
    LoadState();
    if (runs_done_ || !saved_.empty())
      Say("resuming %s: %llu runs done, %zu unique findings", dir_,
          static_cast<unsigned long long>(runs_done_), saved_.size());
  }
  j["shard"] = absl::StrCat(c_.shard_k, "/", c_.shard_n);
  if (!WriteText(path, j.dump(2) + "\n")) {
    Say("cannot write %s: %s", path, strerror(errno));
    return false;
  }
  return true;
}

void Campaign::LoadState() {
  std::string text;
  if (ReadText(absl::StrCat(dir_, "/", kRunsFile), &text)) {
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      uint64_t i;
      if (f.size() > 1 && f[0] == "run" && absl::SimpleAtoi(f[1], &i) && done_.insert(i).second) ++runs_done_;
    }
  }
  for (const std::string& name : ListDir(dir_)) {
    std::string key;
    const std::string d = absl::StrCat(dir_, "/", name);
    int n = 0;
    size_t dash = name.find('-');
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &n) ||
        !ReadText(d + "/key.txt", &key))
      continue;
    key = std::string(absl::StripTrailingAsciiWhitespace(key));
    keys_[key] = n;
    saved_.push_back({n, d, key, name.substr(dash + 1)});
  }
  std::sort(saved_.begin(), saved_.end(), [](const Saved& a, const Saved& b) { return a.number < b.number; });
}

std::string RuleSettings(const core::FaultRule& r) {
  std::string s;
  if (!r.statuses.empty()) {
    std::vector<std::string> v;
    for (uint32_t st : r.statuses) v.push_back(core::WcStatusName(st));
    absl::StrAppend(&s, ":status=", absl::StrJoin(v, "|"));
  }
  if (!r.errnos.empty()) {
    std::vector<std::string> v;
    for (int e : r.errnos) v.push_back(core::ErrnoName(e));
    absl::StrAppend(&s, ":errno=", absl::StrJoin(v, "|"));
  }
  if (r.qp) absl::StrAppend(&s, ":qp=", r.qp);
  if (r.wr >= 0) absl::StrAppend(&s, ":wr=", r.wr);
  return s;
}

// The baseline run of `enumerate`: every named point reached, nothing
// injected; then one run per (role, point, n-th hit).
bool Campaign::Enumerate() {
  auto spec = core::ParseFaultSpec(c_.faults);
  std::vector<std::string> names;
  if (c_.faults.empty()) {
    names.push_back("*:p=0");
  } else {
    for (const core::FaultRule& r : spec->rules) names.push_back(r.name + ":p=0");
  }
  Plan base;
  base.index = kBaseline;
  base.seed = RunSeed(0);
  for (size_t r = 0; r < c_.roles.size(); ++r)
    base.decide.push_back(
        {absl::StrCat("seed=", base.seed), absl::StrCat("faults=", absl::StrJoin(names, ","))});
  Exec e;
  e.plan = base;
  e.slot = 0;
  e.work = absl::StrCat(work_, "/0");
  MakeDir(e.work);
  Start(e);
  while (!Step(e)) usleep(2000);
  Outcome o = Analyze(e);
  std::vector<std::string> counts;
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::string text;
    const Proc& p = e.procs[r];
    ReadText(absl::StrCat(e.work, "/", RolePrefix(r), "decisions.", p.pid), &text);
    for (const auto& [point, n] : core::ParseReached(text)) {
      const core::FaultRule* rule = nullptr;
      if (spec.ok())
        for (const core::FaultRule& fr : spec->rules)
          if (fr.Matches(point)) {
            rule = &fr;
            break;
          }
      if (!c_.faults.empty() && !rule) continue;
      const std::string settings = rule ? RuleSettings(*rule) : "";
      for (uint64_t k = 1; k <= n; ++k)
        enumeration_.emplace_back(static_cast<int>(r),
                                  absl::StrCat(core::PointName(point), ":nth=", k, settings));
      counts.push_back(absl::StrCat(RolePrefix(r), core::PointName(point), " ", n));
    }
  }
  Record(e, o);
  Say("enumerate: the baseline run reached %s: %zu single-fault runs",
      counts.empty() ? "no fault point" : absl::StrJoin(counts, ", "), enumeration_.size());
  return true;
}

Plan Campaign::MakePlan(uint64_t i) const {
  Plan p;
  p.index = i;
  p.seed = RunSeed(i);
  p.decide.resize(c_.roles.size());
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::vector<std::string>& d = p.decide[r];
    d.push_back(absl::StrCat("seed=", RoleSeed(p.seed, static_cast<int>(r))));
    if (c_.strategy == "enumerate") {
      if (i < enumeration_.size() && enumeration_[i].first == static_cast<int>(r)) {
        d.push_back(absl::StrCat("faults=", enumeration_[i].second));
        p.what = absl::StrCat(RolePrefix(r), enumeration_[i].second);
      }
      continue;
    }
    if (!c_.user_reorder) d.push_back(c_.strategy == "pct" ? "reorder=pct" : "reorder=random");
    if (c_.strategy == "pct") d.push_back(absl::StrCat("pct_depth=", c_.depth));
    if (!c_.faults.empty()) d.push_back(absl::StrCat("faults=", c_.faults));
  }
  return p;
}

int Campaign::FreePort() {
  for (int tries = 0; tries < 200; ++tries) {
    uint32_t r = 0;
    if (getrandom(&r, sizeof r, 0) != sizeof r) r = static_cast<uint32_t>(rand());
    int port = 20000 + static_cast<int>(r % 20000);
    if (!ports_in_use_.count(port) && !Listening(port)) return port;
  }
  return 20000 + static_cast<int>(Mix(Clock::now().time_since_epoch().count()) % 20000);
}

std::vector<std::string> Campaign::RoleOptions(const Exec& e, int r) const {
  std::vector<std::string> o = c_.options;
  const std::string w = absl::StrCat(e.work, "/", RolePrefix(r));
  o.push_back(absl::StrCat("softnic_fabric=fz", token_, "-", e.slot, "-",
                           e.plan.index == kBaseline ? std::string("b") : absl::StrCat(e.plan.index)));
  o.push_back(absl::StrCat("hang_timeout=", std::max(1, c_.timeout / 2)));
  o.push_back(absl::StrCat("decision_log=", w, "decisions.%p"));
  if (e.text) {
    if (!e.trace_prefix.empty()) o.push_back(absl::StrCat("trace=", e.trace_prefix, RolePrefix(r), "trace"));
  } else {
    o.push_back("report_format=json");
    o.push_back(absl::StrCat("log_path=", w, "log"));
  }
  for (const std::string& d : e.plan.decide[r]) o.push_back(d);
  return o;
}

void Campaign::Spawn(Exec& e, int r) {
  std::vector<std::string> args;
  for (const std::string& a : c_.roles[r]) args.push_back(WithPort(a, e.port));
  std::string opts;
  if (const char* env = getenv("RDMASAN_OPTIONS"); env && *env) opts = absl::StrCat(env, ":");
  absl::StrAppend(&opts, absl::StrJoin(RoleOptions(e, r), ":"));
  const std::string out = absl::StrCat(e.work, "/", RolePrefix(r), "out");
  int fd = core::CreateForWrite(out, core::CreateMode::kTruncate);
  std::fflush(nullptr);
  pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    int in = open("/dev/null", O_RDONLY);
    if (in >= 0) dup2(in, 0);
    if (fd >= 0) {
      dup2(fd, 1);
      dup2(fd, 2);
    }
    setenv("RDMASAN_OPTIONS", opts.c_str(), 1);
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    execvp(argv[0], argv.data());
    std::fprintf(stderr, "rdmasan fuzz: cannot execute %s: %s\n", argv[0], strerror(errno));
    _exit(127);
  }
  if (fd >= 0) close(fd);
  if (pid > 0) setpgid(pid, pid);
  e.procs[r].pid = pid;
  e.procs[r].started = true;
  if (pid < 0) {
    e.procs[r].done = true;
    e.procs[r].status = 127 << 8;
  }
}

void Campaign::Start(Exec& e) {
  ClearDir(e.work);
  e.procs.assign(c_.roles.size(), Proc());
  if (c_.uses_port) {
    e.port = FreePort();
    ports_in_use_.insert(e.port);
  }
  e.start = Clock::now();
  e.deadline = e.start + std::chrono::seconds(c_.timeout);
  Spawn(e, 0);
}

void Campaign::KillAll(Exec& e) {
  for (Proc& p : e.procs)
    if (p.started && !p.done && p.pid > 0) kill(-p.pid, SIGKILL);
}

// Advances a run; true once every process of it has ended.
bool Campaign::Step(Exec& e) {
  const auto now = Clock::now();
  for (Proc& p : e.procs) {
    if (!p.started || p.done) continue;
    int status = 0;
    pid_t w = waitpid(p.pid, &status, WNOHANG);
    if (w == p.pid || (w < 0 && errno == ECHILD)) {
      p.done = true;
      p.status = status;
      kill(-p.pid, SIGKILL);  // what the program left behind in its group
    }
  }
  // The client starts once the server listens on {port} (or after 300 ms).
  if (e.procs.size() > 1 && !e.procs[1].started) {
    const bool ready = e.procs[0].done ||
                       (c_.uses_port ? Listening(e.port) : now - e.start > std::chrono::milliseconds(300));
    if (ready || now - e.start > std::chrono::seconds(std::min(c_.timeout, 20)) / 2) Spawn(e, 1);
  }
  // Once the shim has reported a hang (hang_timeout), the run has said
  // what it will say: end it rather than wait for --timeout.
  if (!e.text && now >= e.next_look && now - e.start >= std::chrono::seconds(std::max(1, c_.timeout / 2))) {
    e.next_look = now + std::chrono::milliseconds(100);
    for (size_t r = 0; r < e.procs.size(); ++r) {
      Proc& p = e.procs[r];
      if (!p.started || p.done || p.hang_killed) continue;
      const std::string prefix = absl::StrCat(RolePrefix(r), "log.");
      for (const std::string& name : ListDir(e.work)) {
        std::string text;
        if (absl::StartsWith(name, prefix) && ReadText(absl::StrCat(e.work, "/", name), &text) &&
            absl::StrContains(text, "\"check\":\"hang\"")) {
          p.hang_killed = true;
          kill(-p.pid, SIGKILL);
          break;
        }
      }
    }
  }
  // A side whose peer failed is left only a short grace: a hang of it
  // would be the failure's consequence, not a finding.
  if (e.procs.size() > 1 && !e.peer_failed) {
    for (const Proc& p : e.procs)
      if (p.done && ((WIFEXITED(p.status) && WEXITSTATUS(p.status) != 0) || WIFSIGNALED(p.status))) {
        e.peer_failed = true;
        e.deadline = std::min(e.deadline, now + std::chrono::seconds(2));
      }
  }
  bool all = true;
  for (const Proc& p : e.procs) all = all && p.started && p.done;
  if (all) {
    if (e.port) ports_in_use_.erase(e.port);
    return true;
  }
  if (!e.term_sent && now >= e.deadline) {
    // SIGTERM first: a program waiting for a completion then gets the
    // shim's hang report, with its stacks.
    e.term_sent = true;
    e.kill_at = now + std::chrono::seconds(3);
    for (Proc& p : e.procs)
      if (p.started && !p.done) kill(-p.pid, SIGTERM);
  } else if (e.term_sent && !e.kill_sent && now >= e.kill_at) {
    e.kill_sent = true;
    KillAll(e);
  }
  return false;
}

Outcome Campaign::Analyze(const Exec& e) {
  Outcome o;
  o.seconds = std::chrono::duration<double>(Clock::now() - e.start).count();
  o.roles.resize(c_.roles.size());
  const std::string prog = Basename(c_.roles[0][0]);
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    RoleOutcome& ro = o.roles[r];
    const Proc& p = e.procs[r];
    const std::string prefix = absl::StrCat(RolePrefix(r), "log.");
    for (const std::string& name : ListDir(e.work)) {
      if (!absl::StartsWith(name, prefix)) continue;
      std::string text;
      if (!ReadText(absl::StrCat(e.work, "/", name), &text)) continue;
      for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty()))
        if (auto f = FindingFromJson(std::string(line), static_cast<int>(r))) ro.findings.push_back(*f);
    }
    auto has = [&](absl::string_view check) {
      return std::any_of(ro.findings.begin(), ro.findings.end(),
                         [&](const Finding& f) { return f.check == check; });
    };
    const bool ours =
        (e.term_sent || p.hang_killed) &&
        (WIFSIGNALED(p.status) && (WTERMSIG(p.status) == SIGTERM || WTERMSIG(p.status) == SIGKILL));
    if (WIFEXITED(p.status)) {
      ro.status = absl::StrCat(WEXITSTATUS(p.status));
      ro.failed = WEXITSTATUS(p.status) != 0;
    } else if (WIFSIGNALED(p.status)) {
      ro.status = ours ? (p.hang_killed ? "hang" : "timeout") : SignalName(WTERMSIG(p.status));
      ro.failed = !ours;
      if (!ours && !has("crash") && WTERMSIG(p.status) != SIGINT && WTERMSIG(p.status) != SIGPIPE) {
        Finding f;
        f.check = "crash";
        f.role = static_cast<int>(r);
        f.message = absl::StrCat(Basename(c_.roles[r][0]), " died of ", SignalName(WTERMSIG(p.status)),
                                 " (no report from rdmasan: the program handles the signal itself, or it was "
                                 "killed from outside)");
        f.key = absl::StrCat("crash | ", SignalName(WTERMSIG(p.status)), " | ", Basename(c_.roles[r][0]));
        ro.findings.push_back(f);
      }
    }
    if (e.term_sent && (ours || !p.done) && !has("hang")) {
      Finding f;
      f.check = "hang";
      f.role = static_cast<int>(r);
      f.message = absl::StrCat(Basename(c_.roles[r][0]), " did not end within --timeout=", c_.timeout,
                               " s, though it kept making verbs progress or waited outside verbs");
      f.key = absl::StrCat("hang | timeout | ", Basename(c_.roles[r][0]));
      ro.findings.push_back(f);
    }
  }
  // A side left waiting for a peer that failed: the failure's consequence.
  if (o.roles.size() > 1) {
    for (size_t r = 0; r < o.roles.size(); ++r) {
      const RoleOutcome& peer = o.roles[1 - r];
      if (!peer.failed) continue;
      auto& fs = o.roles[r].findings;
      auto it = std::remove_if(fs.begin(), fs.end(), [](const Finding& f) { return f.check == "hang"; });
      if (it != fs.end()) {
        o.roles[r].hang_discounted = absl::StrCat("hang after the ", RoleName(1 - r), " failed");
        fs.erase(it, fs.end());
      }
    }
  }
  (void)prog;
  return o;
}

Outcome Campaign::RunSync(Plan plan, bool text, const std::string& trace_prefix) {
  Exec e;
  e.plan = std::move(plan);
  e.slot = 0;
  e.work = absl::StrCat(work_, "/shrink");
  MakeDir(e.work);
  e.text = text;
  e.trace_prefix = trace_prefix;
  Start(e);
  while (!Step(e)) usleep(2000);
  return Analyze(e);
}

void Campaign::Record(const Exec& e, const Outcome& o) {
  std::vector<std::string> status, ids;
  for (size_t r = 0; r < o.roles.size(); ++r) {
    status.push_back(
        absl::StrCat(RolePrefix(r).empty() ? "" : absl::StrCat(RoleName(r), ":"), o.roles[r].status));
  }
  for (const Finding& f : o.findings()) {
    auto it = keys_.find(f.key);
    if (it == keys_.end()) {
      SaveFinding(e, f, o);
      it = keys_.find(f.key);
    }
    if (it != keys_.end()) {
      std::string id = absl::StrCat(it->second, "-", f.check);
      if (std::find(ids.begin(), ids.end(), id) == ids.end()) ids.push_back(id);
    }
  }
  std::string line = absl::StrFormat(
      "run %s seed %d exit %s time %.2f findings %s%s%s\n",
      e.plan.index == kBaseline ? std::string("baseline") : absl::StrCat(e.plan.index), e.plan.seed,
      absl::StrJoin(status, ","), o.seconds, ids.empty() ? "-" : absl::StrJoin(ids, ","),
      e.plan.what.empty() ? "" : absl::StrCat(" fault ", e.plan.what), [&] {
        std::string d;
        for (const RoleOutcome& r : o.roles)
          if (!r.hang_discounted.empty()) absl::StrAppend(&d, " (", r.hang_discounted, ")");
        return d;
      }());
  AppendText(absl::StrCat(dir_, "/", kRunsFile), line);
  if (e.plan.index != kBaseline && done_.insert(e.plan.index).second) {
    ++runs_done_;
    ++runs_now_;
  }
}

void Campaign::SaveFinding(const Exec& e, const Finding& f, const Outcome& o) {
  Saved s;
  s.number = saved_.empty() ? 1 : saved_.back().number + 1;
  s.check = f.check;
  s.key = f.key;
  s.dir = absl::StrCat(dir_, "/", s.number, "-", f.check);
  if (!MakeDir(s.dir)) {
    Say("cannot create %s: %s", s.dir, strerror(errno));
    return;
  }
  keys_[f.key] = s.number;
  saved_.push_back(s);
  WriteText(s.dir + "/key.txt", f.key + "\n");
  std::string found = absl::StrFormat(
      "run %s, seed %d%s\n%s: %s\n",
      e.plan.index == kBaseline ? std::string("baseline") : absl::StrCat(e.plan.index), e.plan.seed,
      e.plan.what.empty() ? "" : absl::StrCat(", fault ", e.plan.what), f.check, f.message);
  if (!f.where.empty()) absl::StrAppend(&found, "at ", f.where, "\n");
  if (c_.roles.size() > 1) absl::StrAppend(&found, "in the ", RoleName(f.role), "\n");
  for (size_t r = 0; r < o.roles.size(); ++r)
    absl::StrAppend(&found, RolePrefix(r).empty() ? "" : absl::StrCat(RoleName(r), " "), "exit ",
                    o.roles[r].status, "\n");
  WriteText(s.dir + "/found.txt", found);
  if (!f.json.empty()) WriteText(s.dir + "/report.json", f.json + "\n");
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::string text;
    ReadText(absl::StrCat(e.work, "/", RolePrefix(r), "decisions.", e.procs[r].pid), &text);
    if (text.empty()) {
      // No decision was taken (the run ended before its first verbs call):
      // an empty schedule with the run's settings.
      std::string reorder = "off", faults;
      for (const std::string& d : e.plan.decide[r]) {
        if (absl::StartsWith(d, "reorder=")) reorder = d.substr(8);
        if (absl::StartsWith(d, "faults=")) faults = d.substr(7);
      }
      text = core::FormatLogHeader(reorder, faults, "none");
    }
    WriteText(absl::StrCat(s.dir, "/", RolePrefix(r), "decisions.log"), text);
    WriteText(absl::StrCat(s.dir, "/", RolePrefix(r), "schedule.log"), text);
    std::string out;
    if (ReadText(absl::StrCat(e.work, "/", RolePrefix(r), "out"), &out))
      WriteText(absl::StrCat(s.dir, "/", RolePrefix(r), "output.txt"), out);
  }
  WriteRepro(s, "the run's full decision log (not shrunk yet)");
  const std::string msg =
      absl::StrFormat("new finding %d-%s in run %s: %s%s%s", s.number, f.check,
                      e.plan.index == kBaseline ? std::string("baseline") : absl::StrCat(e.plan.index),
                      f.check, f.where.empty() ? "" : absl::StrCat(" at ", f.where),
                      c_.roles.size() > 1 ? absl::StrCat(" (", RoleName(f.role), ")") : "");
  if (progress_shown_ && tty_) std::fputs("\r\033[K", stderr);
  Say("%s", msg);
}

void Campaign::WriteRepro(const Saved& s, const std::string& what) const {
  std::string sh =
      absl::StrCat("#!/bin/sh\n# rdmasan fuzz: reproduces finding ", s.number, "-", s.check,
                   " with one command, on a fresh softnic fabric:\n# it replays ", what,
                   ".\n# Exit status: the program's, or rdmasan's exitcode (66) when it reports.\n",
                   "here=$(cd \"$(dirname \"$0\")\" && pwd)\n", "fabric=repro-$$\n");
  if (c_.uses_port) absl::StrAppend(&sh, "port=${RDMASAN_PORT:-$((20000 + $$ % 20000))}\n");
  auto command = [&](int r) {
    std::string cmd = ShellWord(self_) + " run";
    for (const std::string& o : c_.options) absl::StrAppend(&cmd, " ", ShellWord("--" + o));
    absl::StrAppend(&cmd, " \"--softnic_fabric=$fabric\"", " --hang_timeout=", std::max(1, c_.timeout / 2));
    // A hung program reports and waits on: halting on the report ends it.
    if (s.check == "hang") absl::StrAppend(&cmd, " --halt_on_error=1");
    absl::StrAppend(&cmd, " \"--schedule=$here/", RolePrefix(r), "schedule.log\" --");
    for (const std::string& a : c_.roles[r]) absl::StrAppend(&cmd, " ", ShellWord(a));
    return cmd;
  };
  if (c_.roles.size() == 1) {
    absl::StrAppend(&sh, "exec ", command(0), "\n");
  } else {
    absl::StrAppend(&sh, command(0), " &\nserver=$!\n");
    if (c_.uses_port) {
      absl::StrAppend(
          &sh,
          "hex=$(printf ':%04X' \"$port\")\n"
          "i=0\n"
          "while [ $i -lt 200 ] && kill -0 $server 2>/dev/null && ! awk -v p=\"$hex\" "
          "'FNR > 1 && $4 == \"0A\" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' "
          "/proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 0.05; i=$((i + 1)); done\n");
    } else {
      absl::StrAppend(&sh, "sleep 0.3\n");
    }
    absl::StrAppend(&sh, command(1), "\nclient=$?\nwait $server\nserver=$?\n",
                    "[ $server -ne 0 ] && exit $server\nexit $client\n");
  }
  WriteText(s.dir + "/repro.sh", sh, 0755);
}

// A sentence for one decision-log line, from its note.
std::string StoryLine(absl::string_view line) {
  size_t hash = line.find('#');
  std::string note(absl::StripAsciiWhitespace(hash == absl::string_view::npos ? "" : line.substr(hash + 1)));
  std::smatch m;
  static const std::regex hold(R"(sched\.hold QP (\S+) (\S+) wr_id=(\S+) for (\d+) polls)");
  static const std::regex pick(
      R"(sched\.pick (?:\(pct\) )?QP (\S+) (\S+) wr_id=(\S+) released before (\d+) older)");
  static const std::regex wc(R"(wc\.error (\S+) on QP (\S+) wr_id=(\S+))");
  static const std::regex post(
      R"((post_send|post_recv|post_srq_recv) fails with (\S+) at WR (\d+) of the chain(.*))");
  if (std::regex_search(note, m, hold))
    return absl::StrCat("hold the ", m[2].str(), " completion of wr_id ", m[3].str(), " on QP ", m[1].str(),
                        " back for ", m[4].str(), m[4].str() == "1" ? " poll" : " polls");
  if (std::regex_search(note, m, pick))
    return absl::StrCat("release the ", m[2].str(), " completion of wr_id ", m[3].str(), " on QP ",
                        m[1].str(), " before ", m[4].str(), " older one", m[4].str() == "1" ? "" : "s",
                        " of other queues");
  if (std::regex_search(note, m, wc))
    return absl::StrCat("complete wr_id ", m[3].str(), " on QP ", m[2].str(), " with ", m[1].str(),
                        " (the QP goes to ERR, its later WRs are flushed)");
  if (std::regex_search(note, m, post))
    return absl::StrCat("make ibv_", m[1].str(), " fail with ", m[2].str(), " at WR ", m[3].str(),
                        " of the chain", m[4].str());
  std::string head(absl::StripAsciiWhitespace(line.substr(0, hash)));
  if (note.empty()) return absl::StrCat("decide ", head);
  return absl::StrCat("inject: ", note);
}

std::string Campaign::Story(const std::vector<std::pair<int, std::string>>& lines) const {
  std::string out;
  int n = 0;
  for (const auto& [r, line] : lines)
    absl::StrAppend(&out, ++n, ". ", c_.roles.size() > 1 ? absl::StrCat(RoleName(r), ": ") : "",
                    StoryLine(line), "\n");
  return out;
}

// ddmin over the decisions of a finding's logs: the fewest that, replayed
// with schedule=, still give the same finding (same dedup key).
void Campaign::Shrink(const Saved& s) {
  const auto deadline = Clock::now() + std::chrono::seconds(c_.shrink_time);
  std::vector<std::string> headers(c_.roles.size());
  std::vector<std::pair<int, std::string>> all;
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::string text;
    ReadText(absl::StrCat(s.dir, "/", RolePrefix(r), "decisions.log"), &text);
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (absl::StartsWith(line, "#")) {
        if (!absl::StartsWith(line, "# reached")) absl::StrAppend(&headers[r], line, "\n");
      } else {
        all.emplace_back(static_cast<int>(r), std::string(line));
      }
    }
  }
  const std::string sched_dir = absl::StrCat(work_, "/schedules");
  MakeDir(sched_dir);
  auto write_logs = [&](const std::vector<std::pair<int, std::string>>& subset, const std::string& where) {
    for (size_t r = 0; r < c_.roles.size(); ++r) {
      std::string text = headers[r];
      for (const auto& [rr, line] : subset)
        if (rr == static_cast<int>(r)) absl::StrAppend(&text, line, "\n");
      WriteText(absl::StrCat(where, "/", RolePrefix(r), "schedule.log"), text);
    }
  };
  int tests = 0;
  auto test = [&](const std::vector<std::pair<int, std::string>>& subset) {
    ++tests;
    write_logs(subset, sched_dir);
    Plan p;
    p.index = 0;
    for (size_t r = 0; r < c_.roles.size(); ++r)
      p.decide.push_back({absl::StrCat("schedule=", sched_dir, "/", RolePrefix(r), "schedule.log")});
    Outcome o = RunSync(p);
    for (const Finding& f : o.findings())
      if (f.key == s.key) return true;
    return false;
  };
  std::vector<std::pair<int, std::string>> cur = all;
  bool reproduced = false;
  for (int i = 0; i < 3 && !reproduced && !g_interrupted; ++i) reproduced = test(cur);
  std::string note;
  if (!reproduced) {
    note =
        absl::StrCat("its ", all.size(),
                     " decisions replayed did not give the finding again (3 tries): it depends on timing as "
                     "well; repro.sh replays them all");
  } else if (test({})) {
    cur.clear();
  } else {
    // ddmin (Zeller and Hildebrandt): try halves, then complements, then
    // finer partitions.
    size_t n = 2;
    while (cur.size() >= 2 && Clock::now() < deadline && !g_interrupted) {
      const size_t chunk = (cur.size() + n - 1) / n;
      bool reduced = false;
      for (size_t start = 0; start < cur.size() && !reduced && Clock::now() < deadline; start += chunk) {
        std::vector<std::pair<int, std::string>> part(cur.begin() + start,
                                                      cur.begin() + std::min(cur.size(), start + chunk));
        if (part.size() < cur.size() && test(part)) {
          cur = part;
          n = 2;
          reduced = true;
        }
      }
      for (size_t start = 0; start < cur.size() && !reduced && n > 2 && Clock::now() < deadline;
           start += chunk) {
        std::vector<std::pair<int, std::string>> comp(cur.begin(), cur.begin() + start);
        comp.insert(comp.end(), cur.begin() + std::min(cur.size(), start + chunk), cur.end());
        if (test(comp)) {
          cur = comp;
          n = std::max<size_t>(n - 1, 2);
          reduced = true;
        }
      }
      if (reduced) continue;
      if (n >= cur.size()) break;
      n = std::min(cur.size(), 2 * n);
    }
    if (Clock::now() >= deadline) note = absl::StrCat("--shrink_time=", c_.shrink_time, " s ran out");
  }
  write_logs(cur, s.dir);
  std::string story =
      cur.empty() && reproduced
          ? "No decision is needed: the program fails this way in the natural order, with no fault.\n"
          : Story(cur);
  std::string found;
  ReadText(s.dir + "/found.txt", &found);
  std::vector<std::string> flines = absl::StrSplit(found, '\n');
  absl::StrAppend(&story, "=> ", flines.size() > 1 ? flines[1] : s.check, "\n");
  if (!note.empty()) absl::StrAppend(&story, "(", note, ")\n");
  WriteText(s.dir + "/story.txt", story);
  WriteRepro(s, reproduced ? absl::StrCat(c_.roles.size() > 1 ? "server.schedule.log and client.schedule.log"
                                                              : "schedule.log",
                                          ": ", cur.size(), " of the run's ", all.size(),
                                          " decisions, shrunk by ddmin")
                           : "the run's full decision log");
  // Once more with text reports and a trace, as a user will see it.
  Plan p;
  p.index = 0;
  for (size_t r = 0; r < c_.roles.size(); ++r)
    p.decide.push_back({absl::StrCat("schedule=", s.dir, "/", RolePrefix(r), "schedule.log")});
  RunSync(p, /*text=*/true, s.dir + "/");
  std::string report;
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::string out;
    ReadText(absl::StrCat(work_, "/shrink/", RolePrefix(r), "out"), &out);
    if (c_.roles.size() > 1) absl::StrAppend(&report, "== ", RoleName(r), " ==\n");
    absl::StrAppend(&report, out);
  }
  WriteText(s.dir + "/report.txt", report);
  const bool shown = absl::StrContains(report, absl::StrCat("rdmasan: ", s.check, ":"));
  WriteText(s.dir + "/shrunk.txt",
            absl::StrFormat("decisions %d of %d\nreplays %d\nreproduced %s\nreport %s\n", cur.size(),
                            all.size(), tests, reproduced ? "yes" : "no", shown ? "yes" : "no"));
  if (progress_shown_ && tty_) std::fputs("\r\033[K", stderr);
  Say("%d-%s: %s to %zu decision%s (%d replays): %s/repro.sh\n%s", s.number, s.check,
      reproduced ? "shrunk" : "not reproduced by replay; kept", cur.size(), cur.size() == 1 ? "" : "s", tests,
      s.dir, story);
}

void Campaign::Progress(bool force) {
  const auto now = Clock::now();
  if (!force && now - last_progress_ < std::chrono::milliseconds(tty_ ? 250 : 10000)) return;
  last_progress_ = now;
  const double elapsed = std::chrono::duration<double>(now - started_).count();
  std::string left;
  if (c_.time > 0) absl::StrAppend(&left, absl::StrFormat(", %.0f s left", std::max(0.0, c_.time - elapsed)));
  const std::string line = absl::StrFormat("%d runs (%.1f/s), %d unique finding%s%s", runs_done_,
                                           elapsed > 0 ? runs_now_ / elapsed : 0.0, saved_.size(),
                                           saved_.size() == 1 ? "" : "s", left);
  if (tty_) {
    std::fprintf(stderr, "\r\033[Krdmasan fuzz: %s", line.c_str());
    progress_shown_ = true;
  } else {
    Say("%s", line);
  }
}

int Campaign::Finish() {
  if (progress_shown_ && tty_) std::fputs("\r\033[K", stderr);
  std::vector<std::string> ids;
  for (const Saved& s : saved_) ids.push_back(absl::StrCat(s.number, "-", s.check));
  std::printf("rdmasan fuzz: %llu runs, %zu unique finding%s%s%s\n",
              static_cast<unsigned long long>(runs_done_), saved_.size(), saved_.size() == 1 ? "" : "s",
              ids.empty() ? "" : ": ", absl::StrJoin(ids, ", ").c_str());
  std::fflush(stdout);
  return saved_.empty() ? 0 : kExitFindings;
}

int Campaign::Main() {
  if (!Setup()) return setup_status_;
  struct sigaction sa = {};
  sa.sa_handler = OnInterrupt;
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  if (c_.roles.size() > 1 && !c_.uses_port && c_.jobs > 1) {
    Say("the pair form without {port} in its arguments runs one run at a time (--jobs=1)");
    c_.jobs = 1;
  }
  uint64_t limit = c_.runs ? c_.runs : (c_.time > 0 ? ~uint64_t(0) : 100);
  if (c_.strategy == "enumerate") {
    Enumerate();
    limit = std::min<uint64_t>(limit, enumeration_.size());
  }
  std::vector<std::optional<Exec>> slots(c_.jobs);
  for (int j = 0; j < c_.jobs; ++j) MakeDir(absl::StrCat(work_, "/", j));
  uint64_t next = static_cast<uint64_t>(c_.shard_k);
  const auto end =
      c_.time > 0
          ? started_ + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(c_.time))
          : Clock::time_point::max();
  while (true) {
    bool running = false;
    for (int j = 0; j < c_.jobs; ++j) {
      auto& slot = slots[j];
      if (slot && Step(*slot)) {
        Record(*slot, Analyze(*slot));
        slot.reset();
      }
      while (!slot && !g_interrupted && Clock::now() < end && next < limit) {
        const uint64_t i = next;
        next += static_cast<uint64_t>(c_.shard_n);
        if (done_.count(i)) continue;
        slot.emplace();
        slot->plan = MakePlan(i);
        slot->slot = j;
        slot->work = absl::StrCat(work_, "/", j);
        Start(*slot);
      }
      running = running || slot.has_value();
    }
    if (g_interrupted) {
      for (auto& slot : slots)
        if (slot) KillAll(*slot);
      for (auto& slot : slots)
        if (slot)
          while (!Step(*slot)) usleep(1000);
      break;
    }
    if (!running) break;
    Progress(false);
    usleep(2000);
  }
  if (g_interrupted) Say("interrupted: resume with the same command (and --out=%s)", dir_);
  for (const Saved& s : saved_) {
    if (g_interrupted) break;
    struct stat st;
    if (stat((s.dir + "/shrunk.txt").c_str(), &st) == 0) continue;
    if (progress_shown_ && tty_) std::fputs("\r\033[K", stderr);
    Say("shrinking %d-%s (replays, up to --shrink_time=%d s)...", s.number, s.check, c_.shrink_time);
    Shrink(s);
  }
  return Finish();
}

// ------------------------------------------------------------------ merge --

int Merge(int argc, char** argv) {
  std::string out;
  std::vector<std::string> sources;
  for (int i = 0; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--out=")) {
      out = std::string(a);
    } else if (absl::StartsWith(a, "--")) {
      std::fprintf(stderr, "rdmasan: fuzz merge: unknown option '%s'\n%s", argv[i], kUsage);
      return kExitUsage;
    } else {
      sources.push_back(argv[i]);
    }
  }
  if (out.empty() || sources.empty()) {
    std::fprintf(stderr, "rdmasan: fuzz merge: needs --out=DIR and at least one campaign directory\n%s",
                 kUsage);
    return kExitUsage;
  }
  Json campaign;
  for (const std::string& src : sources) {
    std::string text;
    if (!ReadText(absl::StrCat(src, "/", kCampaignFile), &text)) {
      Say("merge: %s is not a campaign directory (no %s)", src, kCampaignFile);
      return 1;
    }
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_object()) {
      Say("merge: %s/%s is not a campaign file", src, kCampaignFile);
      return 1;
    }
    j.erase("shard");
    if (campaign.is_null()) {
      campaign = j;
    } else if (campaign != j) {
      Say("merge: %s is another campaign than %s (settings differ)", src, sources[0]);
      return 1;
    }
  }
  if (!MakeDir(out)) {
    Say("merge: cannot create %s: %s", out, strerror(errno));
    return 1;
  }
  std::string existing;
  if (ReadText(absl::StrCat(out, "/", kCampaignFile), &existing)) {
    Json j = Json::parse(existing, nullptr, false);
    if (j.is_object()) j.erase("shard");
    if (j != campaign) {
      Say("merge: %s holds another campaign", out);
      return 1;
    }
  }
  Json merged = campaign;
  merged["shard"] = "merged";
  WriteText(absl::StrCat(out, "/", kCampaignFile), merged.dump(2) + "\n");
  // Runs: one line per run index.
  std::map<uint64_t, std::string> runs;
  std::vector<std::string> dirs = sources;
  dirs.insert(dirs.begin(), out);
  for (const std::string& d : dirs) {
    std::string text;
    if (!ReadText(absl::StrCat(d, "/", kRunsFile), &text)) continue;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      uint64_t i;
      if (f.size() > 1 && f[0] == "run" && absl::SimpleAtoi(f[1], &i)) runs.emplace(i, std::string(line));
    }
  }
  // Findings: each key once; numbers in the order met.
  absl::flat_hash_map<std::string, int> keys;
  std::vector<std::string> ids;
  int number = 0;
  auto copy_dir = [](const std::string& from, const std::string& to) {
    if (!MakeDir(to)) return false;
    for (const std::string& n : ListDir(from)) {
      std::string text;
      const std::string src = absl::StrCat(from, "/", n);
      struct stat st;
      if (lstat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !ReadText(src, &text)) continue;
      WriteText(absl::StrCat(to, "/", n), text, (st.st_mode & 0111) ? 0755 : 0644);
    }
    return true;
  };
  const std::string tmp = absl::StrCat(out, "/.merge");
  if (!MakeDir(tmp)) {
    Say("merge: cannot create %s: %s", tmp, strerror(errno));
    return 1;
  }
  for (const std::string& d : dirs) {
    for (const std::string& name : ListDir(d)) {
      const std::string from = absl::StrCat(d, "/", name);
      size_t dash = name.find('-');
      int n = 0;
      std::string key;
      if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &n) ||
          !ReadText(from + "/key.txt", &key))
        continue;
      key = std::string(absl::StripTrailingAsciiWhitespace(key));
      if (keys.contains(key)) continue;
      keys[key] = ++number;
      const std::string id = absl::StrCat(number, "-", name.substr(dash + 1));
      ids.push_back(id);
      // Copy via a scratch name: the destination may be one of the sources.
      copy_dir(from, absl::StrCat(tmp, "/", id));
    }
  }
  // Replace the destination's findings with the merged set.
  for (const std::string& name : ListDir(out)) {
    size_t dash = name.find('-');
    int n = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &n)) continue;
    const std::string d = absl::StrCat(out, "/", name);
    ClearDir(d);
    rmdir(d.c_str());
  }
  for (const std::string& id : ids) {
    const std::string from = absl::StrCat(tmp, "/", id);
    if (::rename(from.c_str(), absl::StrCat(out, "/", id).c_str()) != 0) {
      Say("merge: cannot move %s: %s", from, strerror(errno));
    }
  }
  rmdir(tmp.c_str());
  // (The finding ids in each run's line are its shard's numbering.)
  std::string runs_text;
  for (const auto& [i, line] : runs) absl::StrAppend(&runs_text, line, "\n");
  WriteText(absl::StrCat(out, "/", kRunsFile), runs_text);
  std::printf("rdmasan fuzz: %zu runs, %zu unique finding%s%s%s\n", runs.size(), ids.size(),
              ids.size() == 1 ? "" : "s", ids.empty() ? "" : ": ", absl::StrJoin(ids, ", ").c_str());
  return ids.empty() ? 0 : kExitFindings;
}

}  // namespace

int Fuzz(int argc, char** argv) {
  if (argc >= 1 && absl::string_view(argv[0]) == "merge") return Merge(argc - 1, argv + 1);
  if (argc >= 1 && (absl::string_view(argv[0]) == "--help" || absl::string_view(argv[0]) == "-h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  Config c;
  if (absl::Status s = ParseFuzzArgs(argc, argv, &c); !s.ok()) {
    std::fprintf(stderr, "rdmasan: %s\n%s", std::string(s.message()).c_str(), kUsage);
    return kExitUsage;
  }
  if (!PrepareEnvironmentForFuzz()) return kExitUsage;
  return Campaign(std::move(c)).Main();
}

}  // namespace rdmasan::cli
