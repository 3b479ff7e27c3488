// `rdmasan fuzz`: campaigns over unmodified programs, and `rdmasan fuzz
// merge` of their shards.
//
// A campaign runs a program (or a server and a client, the `---` form)
// again and again under `rdmasan run`, each run with its own seed, its own
// softnic fabric and its own TCP port ({port} in the arguments), deciding
// completion orders and faults by the chosen strategy: `random` (the
// per-queue streams merged at random with bounded holds, --faults rules as
// written, BUGGIFY-style when they give no probability; with no --faults,
// every 4th run orders only and the others BUGGIFY faults everywhere, see
// fuzz_args.h), `pct` (PCT
// priorities of depth --depth), or `enumerate` (a baseline run counts how
// often each fault point is reached; then run i injects exactly one fault,
// the n-th hit of one point, as the kernel's fail-nth does).  Findings are
// the runs' ERROR reports (read as JSON lines from the runs' logs), `crash`
// (the shim's report, or a death by signal) and `hang` (the shim's
// watchdog: a wait the books prove endless a quarter second in, else at
// hang_timeout = --timeout/2; or the per-run --timeout).  A program that exits non-zero after
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
// The runs share DIR/work/symbols (symbol_cache=): a frame one run
// symbolized, the next reads there rather than from debug information.
//
// This file: the runs (planned, spawned, stepped, analyzed) and the
// findings (recorded, saved); the campaign's parts are declared in
// fuzz_campaign.h, its command line in fuzz_args.h, the shrinking in
// fuzz_shrink.cc, `merge` in fuzz_merge.cc.
//
// May not: interpret the shim's options beyond what it sets per run, run
// anything but the given programs (under the shim) and their repro.sh, leave
// children behind (each run is its own process group, killed at the end),
// or write outside DIR (files created without following links).
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
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
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "cli/cli.h"
#include "cli/fuzz_args.h"
#include "cli/fuzz_campaign.h"
#include "cli/fuzz_util.h"
#include "cli/usage.h"
#include "core/decision.h"
#include "core/file.h"

namespace rdmasan::cli {
namespace fuzz {
namespace {

// ---------------------------------------------------------------- reports --

// "fn file.c:12" for a JSON frame.
std::string FrameText(const Json& f) {
  std::string fn = f.value("function", "");
  std::string file = f.value("file", "");
  int line = f.value("line", 0);
  if (!file.empty()) return absl::StrCat(fn.empty() ? "?" : fn, " ", Basename(file), ":", line);
  if (!fn.empty()) return fn;
  return absl::StrCat(Basename(f.value("module", "?")), "+", f.value("offset", "?"));
}

std::optional<RunFinding> FindingFromJson(const std::string& line, int role) {
  Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
  if (!j.is_object() || !j.contains("check") || !j["check"].is_string()) return std::nullopt;
  if (j.value("severity", "") != "error") return std::nullopt;
  RunFinding f;
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

// Sleeps until a process of a run ends or `until` comes (at most 50 ms):
// SIGCHLD is blocked in the campaign (Main) and taken here, so a run that
// ends is seen at once rather than at the next look (a run of the small
// program of bench/fuzz_bench.sh takes 10 to 50 ms).  A SIGINT or SIGTERM
// ends the wait too (their handler runs).
void AwaitChild(Clock::time_point until) {
  const auto left = std::chrono::duration_cast<std::chrono::nanoseconds>(until - Clock::now()).count();
  const long ns = std::clamp<long>(left, 0, 50 * 1000000L);
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  const timespec ts{0, ns};
  sigtimedwait(&chld, nullptr, &ts);
}

// When Step must look at `e` again though none of its processes ended:
// for the client of the pair form, which starts once its server listens,
// in 2 ms; else at the next look for the shim's hang report, the run's
// deadline (SIGTERM) or its SIGKILL, whichever comes first.
Clock::time_point NextLook(const Exec& e) {
  Clock::time_point t = Clock::time_point::max();
  if (e.procs.size() > 1 && !e.procs[1].started) return Clock::now() + std::chrono::milliseconds(2);
  if (!e.text) t = std::min(t, e.next_look);
  if (!e.term_sent) t = std::min(t, e.deadline);
  if (e.term_sent && !e.kill_sent) t = std::min(t, e.kill_at);
  return t;
}

}  // namespace

// ------------------------------------------------------------------- runs --

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
    // The user named it (--out=): a usage error, as a bad option is.
    Say("--out: cannot create the campaign directory '%s': %s", dir_,
        errno == EEXIST ? "it exists and is not a directory" : strerror(errno));
    setup_status_ = kExitUsage;
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
  j["faults"] = DescribeFaults(c_);
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
  j["shard"] = absl::StrCat(c_.shard.k, "/", c_.shard.n);
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

namespace {

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

}  // namespace

// The baseline run of `enumerate`: every named point reached, nothing
// injected; then one run per (role, point, n-th hit).
bool Campaign::Enumerate() {
  auto spec = core::ParseFaultSpec(c_.faults.spec);
  std::vector<std::string> names;
  if (!c_.faults.given) {
    names.push_back("*:p=0");  // every point
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
  while (!Step(e)) AwaitChild(NextLook(e));
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
      if (c_.faults.given && !rule) continue;
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
    if (const std::string faults = RunFaults(c_, i); !faults.empty())
      d.push_back(absl::StrCat("faults=", faults));
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
  o.push_back(absl::StrCat("symbol_cache=", work_, "/symbols"));
  if (e.text) {
    if (!e.trace_prefix.empty()) o.push_back(absl::StrCat("trace=", e.trace_prefix, RolePrefix(r), "trace"));
  } else {
    o.push_back("report_format=json");
    o.push_back(absl::StrCat("log_path=", w, "log"));
  }
  for (const std::string& d : e.plan.decide[r]) o.push_back(d);
  return o;
}

// The run's process by posix_spawn (a vfork-like clone: no copy of the
// campaign's page tables and no copy-on-write faults on either side, where
// fork cost the campaign a third of its own CPU): in a process group of its
// own, no signal blocked, SIGINT and SIGTERM at their defaults, stdin
// /dev/null, stdout and stderr the run's out file, RDMASAN_OPTIONS the
// run's.
void Campaign::Spawn(Exec& e, int r) {
  std::vector<std::string> args;
  for (const std::string& a : c_.roles[r]) args.push_back(WithPort(a, e.port));
  std::string opts;
  if (const char* env = getenv("RDMASAN_OPTIONS"); env && *env) opts = absl::StrCat(env, ":");
  absl::StrAppend(&opts, absl::StrJoin(RoleOptions(e, r), ":"));
  const std::string opts_var = absl::StrCat("RDMASAN_OPTIONS=", opts);
  std::vector<char*> envp;
  for (char** v = environ; v && *v; ++v)
    if (!absl::StartsWith(*v, "RDMASAN_OPTIONS=")) envp.push_back(*v);
  envp.push_back(const_cast<char*>(opts_var.c_str()));
  envp.push_back(nullptr);
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const std::string out = absl::StrCat(e.work, "/", RolePrefix(r), "out");
  int fd = core::CreateForWrite(out, core::CreateMode::kTruncate);
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, dfl;
  sigemptyset(&none);
  sigemptyset(&dfl);
  sigaddset(&dfl, SIGINT);
  sigaddset(&dfl, SIGTERM);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &dfl);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  if (fd >= 0) {
    posix_spawn_file_actions_adddup2(&files, fd, 1);
    posix_spawn_file_actions_adddup2(&files, fd, 2);
  }
  std::fflush(nullptr);
  pid_t pid = -1;
  int err = posix_spawnp(&pid, argv[0], &files, &attr, argv.data(), envp.data());
  if (err == ENOEXEC) {  // as execvp: a script without "#!" runs under /bin/sh
    char sh[] = "/bin/sh";
    argv.insert(argv.begin(), sh);
    err = posix_spawn(&pid, sh, &files, &attr, argv.data(), envp.data());
    argv.erase(argv.begin());
  }
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (err != 0) {
    pid = -1;
    if (fd >= 0) {
      const std::string msg =
          absl::StrFormat("rdmasan fuzz: cannot execute %s: %s\n", argv[0], strerror(err));
      ssize_t n = write(fd, msg.data(), msg.size());
      (void)n;  // the run's status (127) says it too
    }
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
  // Once the shim has reported a hang, the run has said what it will say:
  // end it rather than wait for --timeout.  Looked for from the start: a
  // hang the books prove is reported a quarter second into the wait, not
  // at hang_timeout.
  if (!e.text && now >= e.next_look) {
    e.next_look = now + std::chrono::milliseconds(50);
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
                         [&](const RunFinding& f) { return f.check == check; });
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
        RunFinding f;
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
      RunFinding f;
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
      auto it = std::remove_if(fs.begin(), fs.end(), [](const RunFinding& f) { return f.check == "hang"; });
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
  while (!Step(e)) AwaitChild(NextLook(e));
  return Analyze(e);
}

void Campaign::Record(const Exec& e, const Outcome& o) {
  std::vector<std::string> status, ids;
  for (size_t r = 0; r < o.roles.size(); ++r) {
    status.push_back(
        absl::StrCat(RolePrefix(r).empty() ? "" : absl::StrCat(RoleName(r), ":"), o.roles[r].status));
  }
  for (const RunFinding& f : o.findings()) {
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

void Campaign::SaveFinding(const Exec& e, const RunFinding& f, const Outcome& o) {
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
  // Taken by AwaitChild; each run's processes start with no signal blocked
  // (Spawn).
  sigset_t chld;
  sigemptyset(&chld);
  sigaddset(&chld, SIGCHLD);
  sigprocmask(SIG_BLOCK, &chld, nullptr);
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
  uint64_t next = static_cast<uint64_t>(c_.shard.k);
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
        next += static_cast<uint64_t>(c_.shard.n);
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
          while (!Step(*slot)) AwaitChild(Clock::now() + std::chrono::milliseconds(1));
      break;
    }
    if (!running) break;
    Progress(false);
    Clock::time_point until = Clock::time_point::max();
    for (const auto& slot : slots)
      if (slot) until = std::min(until, NextLook(*slot));
    AwaitChild(until);
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

}  // namespace fuzz

int Fuzz(int argc, char** argv) {
  using namespace fuzz;  // NOLINT: the campaign's own pieces
  if (argc >= 1 && absl::string_view(argv[0]) == "merge") return Merge(argc - 1, argv + 1);
  if (argc >= 1 && (absl::string_view(argv[0]) == "--help" || absl::string_view(argv[0]) == "-h")) {
    std::fputs(FuzzUsageText().c_str(), stdout);
    return 0;
  }
  Config c;
  if (absl::Status s = ParseFuzzArgs(argc, argv, &c); !s.ok()) {
    std::fprintf(stderr, "rdmasan: %s\n%s", std::string(s.message()).c_str(), FuzzUsageText().c_str());
    return kExitUsage;
  }
  std::vector<std::string> programs;
  for (const std::vector<std::string>& role : c.roles)
    if (!role.empty()) programs.push_back(role[0]);
  if (!PrepareEnvironmentForFuzz(programs)) return kExitUsage;
  return Campaign(std::move(c)).Main();
}

}  // namespace rdmasan::cli
