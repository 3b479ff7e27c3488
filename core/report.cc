#include "core/report.h"

#include <fcntl.h>
#include <fnmatch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "absl/hash/hash.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/decision.h"
#include "core/file.h"
#include "core/own_fd.h"
#include "core/status.h"
#include "core/terminal.h"

namespace rdmasan::core {
namespace {

int Pid(int pid) { return pid ? pid : static_cast<int>(getpid()); }

absl::string_view Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return slash == absl::string_view::npos ? path : path.substr(slash + 1);
}

// Every report is ordered JSON: keys come out in the order they are set.
using Json = nlohmann::ordered_json;

// Symbol names, paths and messages come from the program being watched and
// may hold any bytes: invalid UTF-8 becomes U+FFFD instead of an exception
// (nlohmann's default), as the renderers run inside that program.
std::string Dump(const Json& j, int indent = -1) {
  return j.dump(indent, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

std::string Hex(uintptr_t v) { return absl::StrFormat("0x%x", v); }

void AppendTextFrames(std::string* out, const std::vector<Frame>& frames) {
  if (frames.empty()) {
    out->append("    <empty stack>\n");
    return;
  }
  for (size_t i = 0; i < frames.size(); ++i)
    absl::StrAppend(out, "    #", i, " ", FormatFrame(frames[i]), "\n");
}

// [{pc, function, file, line, module, offset}], pc and offset as "0x.." strings.
Json JsonFrames(const std::vector<Frame>& frames) {
  Json out = Json::array();
  for (const Frame& f : frames) {
    Json frame;
    frame["pc"] = Hex(f.pc);
    frame["function"] = f.function;
    frame["file"] = f.file;
    frame["line"] = f.line;
    frame["module"] = f.module;
    frame["offset"] = Hex(f.module_offset);
    out.push_back(std::move(frame));
  }
  return out;
}

const char* SarifLevel(CheckId check) {
  return CheckSeverity(check) == Severity::kError ? "error" : "warning";
}

// A SARIF artifact URI: absolute paths become file:// URIs.
std::string SarifUri(absl::string_view path) {
  std::string out = absl::StartsWith(path, "/") ? "file://" : "";
  for (char c : path) {
    unsigned char u = static_cast<unsigned char>(c);
    if (absl::ascii_isalnum(u) || std::strchr("/-._~", c))
      out.push_back(c);
    else
      absl::StrAppendFormat(&out, "%%%02X", u);
  }
  return out;
}

// A SARIF location object for one frame ({} when it has nothing to say).
Json SarifLocation(const Frame& f, absl::string_view message = "", int id = -1) {
  Json loc = Json::object();
  if (id >= 0) loc["id"] = id;
  if (!message.empty()) loc["message"]["text"] = std::string(message);
  if (!f.file.empty()) {
    Json& phys = loc["physicalLocation"];
    phys["artifactLocation"]["uri"] = SarifUri(f.file);
    if (f.line > 0) phys["region"]["startLine"] = f.line;
  } else if (!f.module.empty()) {
    Json& phys = loc["physicalLocation"];
    phys["artifactLocation"]["uri"] = SarifUri(f.module);
    phys["address"]["relativeAddress"] = f.module_offset;
  }
  if (!f.function.empty()) {
    Json logical;
    logical["fullyQualifiedName"] = f.function;
    logical["kind"] = "function";
    loc["logicalLocations"] = Json::array({std::move(logical)});
  }
  return loc;
}

// A SARIF stack: its message, its kind (properties.kind, as suppressions
// name it) and every frame with its location.
Json SarifStack(absl::string_view message, StackKind kind, const std::vector<Frame>& frames) {
  Json stack;
  stack["message"]["text"] = std::string(message);
  stack["properties"]["kind"] = StackKindName(kind);
  Json& out = stack["frames"] = Json::array();
  for (const Frame& f : frames) {
    Json frame;
    frame["location"] = SarifLocation(f);
    frame["module"] = f.module;
    frame["address"]["absoluteAddress"] = f.pc;
    out.push_back(std::move(frame));
  }
  return stack;
}

// The rules table: every check, in CheckId order (results name them by index).
Json SarifRules() {
  Json rules = Json::array();
  for (size_t i = 0; i < kNumChecks; ++i) {
    CheckId c = static_cast<CheckId>(i);
    Json rule;
    rule["id"] = CheckName(c);
    rule["shortDescription"]["text"] = CheckDescription(c);
    rule["defaultConfiguration"]["level"] = SarifLevel(c);
    rule["defaultConfiguration"]["enabled"] = CheckDefaultOn(c);
    rules.push_back(std::move(rule));
  }
  return rules;
}

// One result: the check, its message, where it happened (the top frame),
// where its related objects came from (their top frames), and every stack.
Json SarifResult(const RenderedFinding& rf) {
  const Finding& f = rf.finding;
  Json result;
  result["ruleId"] = CheckName(f.check);
  result["ruleIndex"] = static_cast<size_t>(f.check);
  result["level"] = SarifLevel(f.check);
  result["message"]["text"] = f.message;
  if (!f.context.empty()) result["properties"]["context"] = f.context;
  if (!rf.main.empty()) result["locations"] = Json::array({SarifLocation(rf.main[0])});
  Json stacks = Json::array({SarifStack(f.message, StackKind::kMain, rf.main)});
  Json related_locations = Json::array();
  for (size_t i = 0; i < f.related.size(); ++i) {
    const std::vector<Frame> empty;
    const std::vector<Frame>& frames = i < rf.related.size() ? rf.related[i] : empty;
    stacks.push_back(SarifStack(f.related[i].label, f.related[i].kind, frames));
    if (!frames.empty()) {
      Json loc = SarifLocation(frames[0], f.related[i].label, static_cast<int>(i));
      loc["properties"]["kind"] = StackKindName(f.related[i].kind);
      related_locations.push_back(std::move(loc));
    }
  }
  if (!related_locations.empty()) result["relatedLocations"] = std::move(related_locations);
  result["stacks"] = std::move(stacks);
  return result;
}

void WriteAll(int fd, absl::string_view text) {
  const char* p = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = write(fd, p, left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return;
    p += n;
    left -= static_cast<size_t>(n);
  }
}

// The data-path verbs (ibv_post_send, ibv_reg_mr, ...) are static inline in
// <infiniband/verbs.h>: optimized, the application's call site symbolizes as
// an inlined verbs.h frame on top of the application's own frame; at -O0 the
// inline function is a real one with its own frame.  Either way those frames
// are rdmasan's interception point, not the user's code (as the sanitizers
// hide their interceptors): drop the leading ones while a frame remains.
// Only frames of verbs.h's own ibv_* / __ibv_* functions go: a frame of the
// application's function goes nowhere, whatever file its line is in.
bool IsVerbsInlineFrame(const Frame& f) {
  if (f.file.find("/infiniband/") == std::string::npos) return false;
  return absl::StartsWith(f.function, "ibv_") || absl::StartsWith(f.function, "__ibv_");
}

void DropVerbsInlineFrames(std::vector<Frame>* frames) {
  size_t skip = 0;
  while (skip + 1 < frames->size() && IsVerbsInlineFrame((*frames)[skip])) ++skip;
  frames->erase(frames->begin(), frames->begin() + skip);
}

// Set while this thread is inside Reporter::Report.
thread_local bool tls_in_report = false;

std::atomic<void (*)()> g_before_halt{nullptr};
std::atomic<void (*)()> g_before_exit[4] = {};

struct StackKindInfo {
  const char* name;
  const char* description;
};

constexpr StackKindInfo kStackKinds[] = {
#define RDMASAN_STACK_KIND(name, id, desc) {id, desc},
#include "core/stack_kinds.inc"
#undef RDMASAN_STACK_KIND
};
static_assert(sizeof(kStackKinds) / sizeof(kStackKinds[0]) == kNumStackKinds);

}  // namespace

const char* StackKindName(StackKind kind) {
  size_t i = static_cast<size_t>(kind);
  return i < kNumStackKinds ? kStackKinds[i].name : "<invalid>";
}

const char* StackKindDescription(StackKind kind) {
  size_t i = static_cast<size_t>(kind);
  return i < kNumStackKinds ? kStackKinds[i].description : "";
}

std::optional<StackKind> StackKindByName(absl::string_view name) {
  for (size_t i = 0; i < kNumStackKinds; ++i)
    if (name == kStackKinds[i].name) return static_cast<StackKind>(i);
  return std::nullopt;
}

void SetBeforeHaltHook(void (*hook)()) { g_before_halt.store(hook); }

void AddBeforeExitHook(void (*hook)()) {
  for (auto& slot : g_before_exit) {
    void (*expected)() = nullptr;
    if (slot.compare_exchange_strong(expected, hook) || expected == hook) return;
  }
}

void RunBeforeExitHooks() {
  for (auto& slot : g_before_exit)
    if (void (*hook)() = slot.load()) hook();
}

// ------------------------------------------------------------ renderers --

std::string RenderSummaryLine(const Finding& finding, const std::vector<Frame>& main) {
  std::string out = absl::StrCat("SUMMARY: rdmasan: ", CheckName(finding.check));
  if (!main.empty()) {
    const Frame& f = main[0];
    if (!f.file.empty()) {
      absl::StrAppend(&out, " ", Basename(f.file));
      if (f.line > 0) absl::StrAppend(&out, ":", f.line);
    } else if (!f.module.empty()) {
      absl::StrAppendFormat(&out, " (%s+0x%x)", f.module, f.module_offset);
    }
    if (!f.function.empty()) absl::StrAppend(&out, " in ", f.function);
  }
  return out;
}

std::string RenderText(const Finding& finding, const std::vector<Frame>& main,
                       const std::vector<std::vector<Frame>>& related, int pid) {
  std::string out =
      absl::StrFormat("==%d==%s: rdmasan: %s: %s\n", Pid(pid), SeverityName(CheckSeverity(finding.check)),
                      CheckName(finding.check), finding.message);
  if (!finding.context.empty()) absl::StrAppend(&out, "  ", finding.context, "\n");
  AppendTextFrames(&out, main);
  for (size_t i = 0; i < finding.related.size(); ++i) {
    absl::StrAppend(&out, "  ", finding.related[i].label, ":\n");
    AppendTextFrames(&out, i < related.size() ? related[i] : std::vector<Frame>{});
  }
  absl::StrAppend(&out, RenderSummaryLine(finding, main), "\n");
  return out;
}

std::string RenderJson(const Finding& finding, const std::vector<Frame>& main,
                       const std::vector<std::vector<Frame>>& related, int pid) {
  Json j;
  j["pid"] = Pid(pid);
  j["check"] = CheckName(finding.check);
  j["severity"] = SarifLevel(finding.check);
  j["message"] = finding.message;
  if (!finding.context.empty()) j["context"] = finding.context;
  j["stack"] = JsonFrames(main);
  Json& out = j["related"] = Json::array();
  for (size_t i = 0; i < finding.related.size(); ++i) {
    Json r;
    r["label"] = finding.related[i].label;
    r["kind"] = StackKindName(finding.related[i].kind);
    r["stack"] = JsonFrames(i < related.size() ? related[i] : std::vector<Frame>{});
    out.push_back(std::move(r));
  }
  return Dump(j) + "\n";
}

std::string RenderSarif(const std::vector<RenderedFinding>& findings) {
  Json driver;
  driver["name"] = "rdmasan";
  driver["informationUri"] = "https://github.com/rdmasan/rdmasan";
  driver["rules"] = SarifRules();
  Json run;
  run["tool"]["driver"] = std::move(driver);
  Json& results = run["results"] = Json::array();
  for (const RenderedFinding& rf : findings) results.push_back(SarifResult(rf));
  Json log;
  log["$schema"] = "https://json.schemastore.org/sarif-2.1.0.json";
  log["version"] = "2.1.0";
  log["runs"] = Json::array({std::move(run)});
  return Dump(log, 2) + "\n";
}

// --------------------------------------------------------- suppressions --

namespace {

// The names a suppression's kind= may take, for error messages.
std::string StackKindList() {
  std::vector<std::string> names;
  for (size_t i = 0; i < kNumStackKinds; ++i) names.push_back(StackKindName(static_cast<StackKind>(i)));
  return absl::StrJoin(names, ", ");
}

// Where the '=' of a leading `word=` (letters, digits, '-', '_'; blanks
// allowed before the '=') is, or 0; *word_length: the word's.
size_t KindPrefixLength(absl::string_view pattern, size_t* word_length = nullptr) {
  size_t n = 0;
  while (n < pattern.size() && (absl::ascii_isalnum(static_cast<unsigned char>(pattern[n])) ||
                                pattern[n] == '-' || pattern[n] == '_'))
    ++n;
  size_t eq = n;
  while (eq < pattern.size() && (pattern[eq] == ' ' || pattern[eq] == '\t')) ++eq;
  if (n == 0 || eq >= pattern.size() || pattern[eq] != '=') return 0;
  if (word_length) *word_length = n;
  return eq;
}

bool FramesMatch(const char* pattern, const std::vector<Frame>& frames) {
  auto matches = [&](absl::string_view s) {
    return !s.empty() && fnmatch(pattern, std::string(s).c_str(), 0) == 0;
  };
  for (const Frame& f : frames)
    if (matches(f.function) || matches(f.file) || matches(Basename(f.file)) || matches(f.module) ||
        matches(Basename(f.module)))
      return true;
  return false;
}

}  // namespace

absl::Status Suppressions::Parse(absl::string_view text, absl::string_view source) {
  std::vector<std::string> errors;
  const std::string where = source.empty() ? "suppressions" : absl::StrCat("suppressions: ", source);
  int lineno = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++lineno;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    auto error = [&](absl::string_view why) {
      errors.push_back(absl::StrCat(where, " line ", lineno, ": ", why));
    };
    size_t colon = line.find(':');
    if (colon == absl::string_view::npos) {
      error(absl::StrCat("expected check-id:pattern or check-id:kind=pattern, got '", line, "'"));
      continue;
    }
    absl::string_view id = absl::StripAsciiWhitespace(line.substr(0, colon));
    absl::string_view pattern = absl::StripAsciiWhitespace(line.substr(colon + 1));
    std::optional<CheckId> check = CheckByName(id);
    if (!check) {
      error(absl::StrCat("unknown check id '", id, "' (rdmasan checks lists them)"));
      continue;
    }
    StackKind kind = StackKind::kMain;
    size_t word = 0;
    if (size_t n = KindPrefixLength(pattern, &word)) {
      absl::string_view name = pattern.substr(0, word);
      std::optional<StackKind> k = StackKindByName(name);
      if (!k) {
        error(
            absl::StrCat("unknown stack kind '", name, "' in '", line, "' (one of: ", StackKindList(), ")"));
        continue;
      }
      kind = *k;
      pattern = absl::StripAsciiWhitespace(pattern.substr(n + 1));
    }
    if (pattern.empty()) {
      error("empty pattern");
      continue;
    }
    rules_.push_back({*check, kind, std::string(pattern), std::string(source), lineno});
  }
  return InvalidArgumentErrors(errors);
}

int Suppressions::Match(const Finding& finding, const std::vector<Frame>& main,
                        const std::vector<std::vector<Frame>>& related) const {
  for (size_t i = 0; i < rules_.size(); ++i) {
    const Rule& rule = rules_[i];
    if (rule.check != finding.check) continue;
    const char* pattern = rule.pattern.c_str();
    if (rule.kind == StackKind::kMain) {
      if (FramesMatch(pattern, main)) return static_cast<int>(i);
      continue;
    }
    for (size_t r = 0; r < finding.related.size() && r < related.size(); ++r)
      if (finding.related[r].kind == rule.kind && FramesMatch(pattern, related[r]))
        return static_cast<int>(i);
  }
  return -1;
}

int Suppressions::Match(CheckId check, const std::vector<Frame>& frames) const {
  Finding finding;
  finding.check = check;
  return Match(finding, frames, {});
}

std::string Suppressions::RuleText(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= rules_.size()) return "";
  const Rule& rule = rules_[index];
  // A main-stack pattern that itself starts with `word=` keeps its main=.
  const bool named = rule.kind != StackKind::kMain || KindPrefixLength(rule.pattern) > 0;
  return absl::StrCat(CheckName(rule.check), ":", named ? StackKindName(rule.kind) : "", named ? "=" : "",
                      rule.pattern);
}

std::string Suppressions::RuleSource(int index) const {
  if (index < 0 || static_cast<size_t>(index) >= rules_.size()) return "";
  const Rule& rule = rules_[index];
  return rule.source.empty() ? absl::StrCat("line ", rule.line) : absl::StrCat(rule.source, ":", rule.line);
}

// ------------------------------------------------------------- reporter --

Reporter::Reporter(const Options& options, Sink sink)
    : sink_(std::move(sink)),
      halt_on_error_(options.halt_on_error),
      exitcode_(options.exitcode),
      verbosity_(options.verbosity),
      log_path_(options.log_path),
      strip_path_prefix_(options.strip_path_prefix) {
  if (!options.symbol_cache.empty()) SetSymbolCache(options.symbol_cache);
  std::vector<std::string> errors;
  if (options.report_format == "json") {
    format_ = Format::kJson;
  } else if (options.report_format == "sarif") {
    format_ = Format::kSarif;
  } else if (options.report_format != "text") {
    errors.push_back(absl::StrCat("report_format: unknown format '", options.report_format,
                                  "' (text, json or sarif); using text"));
  }
  if (absl::Status s = CheckSet::Parse(options.checks, &checks_); !s.ok())
    errors.push_back(absl::StrCat(s.message(), "; using the default checks"));
  // The user's rules first: a hit is counted on the first rule that matches.
  if (!options.suppressions.empty()) {
    std::string text;
    if (std::string why = ReadInputFile(options.suppressions, &text); !why.empty()) {
      errors.push_back(absl::StrCat("suppressions: cannot read '", options.suppressions, "': ", why));
    } else {
      size_t before = suppressions_.size();
      for (std::string& e : ErrorMessages(suppressions_.Parse(text, options.suppressions)))
        errors.push_back(std::move(e));
      suppression_files_.push_back(
          {options.suppressions, absl::StrFormat("%d rule%s", suppressions_.size() - before,
                                                 suppressions_.size() - before == 1 ? "" : "s")});
    }
  }
  if (options.default_suppressions) {
    for (const ShippedSuppressions& file : DefaultSuppressions()) {
      size_t before = suppressions_.size();
      for (std::string& e : ErrorMessages(suppressions_.Parse(file.text, file.name)))
        errors.push_back(std::move(e));
      suppression_files_.push_back(
          {file.name, absl::StrFormat("shipped, %d rule%s", suppressions_.size() - before,
                                      suppressions_.size() - before == 1 ? "" : "s")});
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  owner_pid_ = getpid();
  suppression_hits_.assign(suppressions_.size(), 0);
  config_errors_ = std::move(errors);
}

int Reporter::LogFdLocked(std::string* why) {
  int pid = getpid();
  std::string path = absl::StrCat(log_path_, ".", pid);
  if (log_fd_.fd < 0 || log_pid_ != pid) {  // lazily, and again in a forked child
    if (log_fd_.fd >= 0 && log_pid_ != pid) CloseOwnFd(&log_fd_);
    // Out of the program's way (core/own_fd.h): a program's close or dup2
    // sweep neither loses the log nor gets our reports in its file.
    log_fd_ = AdoptFd(CreateForWrite(path, CreateMode::kAppend, 0600, why));
    log_pid_ = pid;
  }
  (void)CheckOwnFd(&log_fd_, path);
  return log_fd_.fd;
}

std::string Reporter::OpenLog() {
  if (sink_) return "";
  if (format_ == Format::kSarif) {
    const std::string path = SarifPath();
    if (std::string why = CheckWritable(path); !why.empty())
      return absl::StrCat("report_format=sarif: will not write the SARIF log '", path, "': ", why);
  }
  if (log_path_.empty() || log_path_ == "stderr" || log_path_ == "stdout") return "";
  std::lock_guard<std::mutex> lock(mu_);
  std::string why;
  if (LogFdLocked(&why) >= 0) return "";
  return absl::StrCat("log_path: cannot create '", log_path_, ".", getpid(), "': ", why);
}

// A report runs inside the program's verbs call, whose errno may be its
// answer (a failed ibv_reg_mr's): whatever the report does (create the
// log, symbolize, write), the program reads the errno the call left.
class KeepErrno {
 public:
  KeepErrno() : saved_(errno) {}
  ~KeepErrno() { errno = saved_; }
  KeepErrno(const KeepErrno&) = delete;
  KeepErrno& operator=(const KeepErrno&) = delete;

 private:
  int saved_;
};

void Reporter::Message(absl::string_view text) {
  KeepErrno keep;
  std::string line = absl::StrFormat("==%d==rdmasan: %s\n", getpid(), text);
  std::lock_guard<std::mutex> lock(mu_);
  Write(line);
}

void Reporter::Write(absl::string_view text) {
  // A replayed trace is a stranger's input: its strings (reasons, paths,
  // symbols) never reach the terminal as control sequences.  JSON lines
  // are escaped by the JSON writer.
  std::string scratch;
  if (format_ != Format::kJson) text = EscapeControls(text, &scratch);
  if (sink_) {
    sink_(text);
    return;
  }
  int fd = 2;
  if (log_path_ == "stdout") {
    fd = 1;
  } else if (!log_path_.empty() && log_path_ != "stderr") {
    if (LogFdLocked() >= 0) {
      fd = log_fd_.fd;
    } else if (!log_failed_said_) {
      log_failed_said_ = true;
      WriteAll(2, absl::StrFormat("==%d==rdmasan: log_path: cannot create '%s.%d' (%s); writing to stderr\n",
                                  getpid(), log_path_, getpid(), std::strerror(errno)));
    }
  }
  WriteAll(fd, text);
}

void Reporter::StripPaths(std::vector<Frame>* frames) const {
  if (strip_path_prefix_.empty()) return;
  for (Frame& f : *frames) {
    size_t at = f.file.find(strip_path_prefix_);
    if (at != std::string::npos) f.file.erase(0, at + strip_path_prefix_.size());
  }
}

uint64_t Reporter::DedupKey(const Finding& finding) const {
  uint64_t check = static_cast<uint64_t>(finding.check);
  if (finding.stack != 0) return (check << 32) | finding.stack;
  uint64_t h = absl::Hash<std::string>()(finding.message) & ((uint64_t{1} << 47) - 1);
  return (uint64_t{1} << 63) | (check << 47) | h;
}

bool Reporter::Report(const Finding& finding) {
  KeepErrno keep;
  if (tls_in_report || !checks_.Enabled(finding.check)) return false;
  tls_in_report = true;
  bool printed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ForgetParentLocked();
    auto seen = seen_.find(DedupKey(finding));
    if (seen != seen_.end()) {
      if (seen->second >= 0) ++suppression_hits_[seen->second], ++suppressed_;
    } else {
      std::vector<std::vector<Frame>> related;
      for (const RelatedStack& r : finding.related) related.push_back(SymbolizeStack(r.stack));
      printed = ReportLocked(finding, SymbolizeStack(finding.stack), std::move(related));
    }
  }
  tls_in_report = false;
  return printed;
}

bool Reporter::ReportSymbolized(const Finding& finding, std::vector<Frame> main,
                                std::vector<std::vector<Frame>> related) {
  KeepErrno keep;
  if (tls_in_report || !checks_.Enabled(finding.check)) return false;
  tls_in_report = true;
  bool printed = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    printed = ReportLocked(finding, std::move(main), std::move(related));
  }
  tls_in_report = false;
  return printed;
}

bool Reporter::ReportLocked(const Finding& finding, std::vector<Frame> main,
                            std::vector<std::vector<Frame>> related) {
  ForgetParentLocked();
  DropVerbsInlineFrames(&main);
  for (auto& r : related) DropVerbsInlineFrames(&r);
  auto [seen, fresh] = seen_.try_emplace(DedupKey(finding), -1);
  if (!fresh) {
    if (seen->second >= 0) ++suppression_hits_[seen->second], ++suppressed_;
    return false;
  }
  int rule = suppressions_.Match(finding, main, related);
  if (rule >= 0) {
    seen->second = rule;
    ++suppression_hits_[rule];
    ++suppressed_;
    return false;
  }
  StripPaths(&main);
  for (auto& r : related) StripPaths(&r);
  Write(format_ == Format::kJson ? RenderJson(finding, main, related, report_pid_)
                                 : RenderText(finding, main, related, report_pid_));
  ++counts_[static_cast<size_t>(finding.check)];
  bool error = CheckSeverity(finding.check) == Severity::kError;
  had_errors_ |= error;
  if (format_ == Format::kSarif) sarif_.push_back({finding, std::move(main), std::move(related)});
  if (error && halt_on_error_) {
    FinishLocked();
    if (void (*hook)() = g_before_halt.load()) hook();  // e.g. close the trace
    RunBeforeExitHooks();
    fflush(nullptr);
    _exit(exitcode_);
  }
  return true;
}

int Reporter::Finish() {
  std::lock_guard<std::mutex> lock(mu_);
  return FinishLocked();
}

void Reporter::ForgetParentLocked() {
  const int pid = getpid();
  if (owner_pid_ == pid) return;
  owner_pid_ = pid;
  seen_.clear();
  counts_ = {};
  std::fill(suppression_hits_.begin(), suppression_hits_.end(), 0);
  suppressed_ = 0;
  had_errors_ = false;
  finished_ = false;
  sarif_.clear();
}

int Reporter::FinishLocked() {
  ForgetParentLocked();
  int status = had_errors_ ? exitcode_ : 0;
  if (finished_) return status;
  finished_ = true;
  size_t total = 0;
  std::vector<std::string> parts;
  for (size_t i = 0; i < kNumChecks; ++i) {
    if (!counts_[i]) continue;
    total += counts_[i];
    parts.push_back(absl::StrCat(CheckName(static_cast<CheckId>(i)), " ", counts_[i]));
  }
  int pid = report_pid_ ? report_pid_ : static_cast<int>(getpid());
  if (format_ == Format::kJson) {
    if (total > 0 || verbosity_ >= 1) {
      Json line;
      line["pid"] = pid;
      line["summary"]["findings"] = total;
      Json& counts = line["summary"]["counts"] = Json::object();
      for (size_t i = 0; i < kNumChecks; ++i)
        if (counts_[i]) counts[CheckName(static_cast<CheckId>(i))] = counts_[i];
      line["summary"]["suppressed"] = suppressed_;
      Write(Dump(line) + "\n");
    }
  } else if (total > 0) {
    Write(absl::StrFormat("==%d==rdmasan: %d finding%s: %s\n", pid, total, total == 1 ? "" : "s",
                          absl::StrJoin(parts, ", ")));
  } else if (verbosity_ >= 1) {
    Write(absl::StrFormat("==%d==rdmasan: no findings\n", pid));
  }
  if (verbosity_ >= 1 && !suppression_files_.empty()) {
    std::vector<std::string> files;
    for (const auto& [name, what] : suppression_files_) files.push_back(absl::StrCat(name, " (", what, ")"));
    std::string text =
        absl::StrFormat("==%d==rdmasan: suppressions loaded: %s\n", pid, absl::StrJoin(files, ", "));
    const bool any =
        std::any_of(suppression_hits_.begin(), suppression_hits_.end(), [](size_t n) { return n; });
    absl::StrAppendFormat(&text, "==%d==rdmasan: suppressions used:%s\n", pid, any ? "" : " none");
    for (size_t i = 0; i < suppression_hits_.size(); ++i)
      if (suppression_hits_[i])
        absl::StrAppendFormat(&text, "  %6d %s  (%s)\n", suppression_hits_[i], suppressions_.RuleText(i),
                              suppressions_.RuleSource(i));
    Write(text);
  }
  if (format_ == Format::kSarif) {
    std::string path = SarifPath();
    std::string sarif = RenderSarif(sarif_);
    std::string why;
    int fd = CreateForWrite(path, CreateMode::kTruncate, 0600, &why);
    if (fd >= 0) {
      WriteAll(fd, sarif);
      close(fd);
      if (verbosity_ >= 1) Write(absl::StrFormat("==%d==rdmasan: SARIF log written to %s\n", pid, path));
    } else {
      Write(absl::StrFormat("==%d==rdmasan: cannot write SARIF log %s: %s\n", pid, path, why));
    }
  }
  return status;
}

bool Reporter::HadErrors() const {
  std::lock_guard<std::mutex> lock(mu_);
  return had_errors_;
}

size_t Reporter::Count(CheckId check) const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t i = static_cast<size_t>(check);
  return i < kNumChecks ? counts_[i] : 0;
}

size_t Reporter::TotalCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t total = 0;
  for (size_t c : counts_) total += c;
  return total;
}

size_t Reporter::SuppressedCount() const {
  std::lock_guard<std::mutex> lock(mu_);
  return suppressed_;
}

std::string Reporter::SarifPath() const {
  int pid = getpid();
  if (!log_path_.empty() && log_path_ != "stderr" && log_path_ != "stdout")
    return absl::StrCat(log_path_, ".", pid, ".sarif");
  return absl::StrCat("rdmasan.", pid, ".sarif");
}

Reporter& GlobalReporter() {
  static Reporter* reporter = new Reporter(GlobalOptions());
  return *reporter;
}

std::vector<std::string> StartupErrors() {
  std::vector<std::string> errors = GlobalOptionErrors();
  Reporter& r = GlobalReporter();
  errors.insert(errors.end(), r.config_errors().begin(), r.config_errors().end());
  if (std::string e = r.OpenLog(); !e.empty()) errors.push_back(std::move(e));
  return errors;
}

void Diag(absl::string_view text) { GlobalReporter().Message(text); }

std::string DescribeDecisionEvent(const Event& e) {
  const auto point = static_cast<Point>(e.count);
  const uint64_t o = e.addr;
  const std::string on_qp = e.qp_num ? absl::StrFormat(" on QP 0x%x", e.qp_num) : "";
  const std::string wr = e.wcs.empty() ? "" : absl::StrFormat(" wr_id=0x%x", e.wcs[0].wr_id);
  if (e.count >= static_cast<uint32_t>(kNumPoints)) return absl::StrFormat("point %d outcome %d", e.count, o);
  switch (point) {
    case Point::kPostSend:
    case Point::kPostRecv:
    case Point::kPostSrqRecv:
      return absl::StrFormat("%s %s at WR %d%s%s", PointName(point), ErrnoName(static_cast<int>(o >> 32)),
                             static_cast<int64_t>(o & 0xffffffff) - 1, on_qp, wr);
    case Point::kWcError:
      return absl::StrCat("wc.error ", WcStatusName(static_cast<uint32_t>(o)), on_qp, wr);
    case Point::kAsyncPortErr:
    case Point::kAsyncCqErr:
    case Point::kAsyncQpFatal:
      return absl::StrCat(PointName(point), on_qp, wr);
    case Point::kSchedHold:
    case Point::kSchedPick:
      return absl::StrCat(PointName(point), " outcome ", o, on_qp, wr);
    case Point::kChaosCqEvent:
      return absl::StrCat(PointName(point), ": a spurious completion event, nothing to poll behind it");
    case Point::kChaosPlace:
    case Point::kChaosGather:
    case Point::kChaosFence:
    case Point::kChaosLag:
    case Point::kChaosRelaxed:
      return absl::StrCat(PointName(point), " outcome ", o, on_qp, wr);
    default:  // reg_mr, create_*, alloc_pd: the errno
      return absl::StrCat(PointName(point), " ", ErrnoName(static_cast<int>(o)), on_qp);
  }
}

}  // namespace rdmasan::core
