// core/report: findings as data, and the one renderer that prints them the
// sanitizer way (text, JSON lines, or SARIF 2.1.0 at exit).
//
// A Finding names a check, a message and stacks (StackIds), each related
// stack with a label for people and a stable kind (stack_kinds.inc) for
// suppressions and JSON/SARIF readers; the Reporter filters it (enabled
// checks, the user's and the shipped suppressions, once per (check, stack)),
// symbolizes it, renders it and counts it.  The Render* functions are pure
// functions of already-symbolized frames, so tests and trace replay get
// byte-identical output.  Nothing here throws; Report may be called from any
// thread, and a report raised on a thread that is already inside Report
// (e.g. by an interposed free() during symbolization) is dropped rather than
// deadlocking.  Reporting allocates and symbolizes: it is off the data path.
#ifndef RDMASAN_CORE_REPORT_H_
#define RDMASAN_CORE_REPORT_H_

#include <array>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/options.h"
#include "core/own_fd.h"
#include "core/stack.h"

namespace rdmasan::core {

// What a labelled stack shows, as core/stack_kinds.inc lists them.
enum class StackKind : uint8_t {
#define RDMASAN_STACK_KIND(name, id, desc) name,
#include "core/stack_kinds.inc"
#undef RDMASAN_STACK_KIND
  kCount
};
inline constexpr size_t kNumStackKinds = static_cast<size_t>(StackKind::kCount);

// "registered" etc.; "<invalid>" for an out-of-range value.
const char* StackKindName(StackKind kind);
const char* StackKindDescription(StackKind kind);
std::optional<StackKind> StackKindByName(absl::string_view name);

struct RelatedStack {
  // First, so that every place that makes one must say which it is.
  StackKind kind = StackKind::kCreated;
  std::string label;  // printed as "  <label>:", e.g. "MR 0x7 registered at"
  StackId stack = 0;
};

struct Finding {
  CheckId check = CheckId::kCount;
  std::string message;  // one line, no trailing newline
  StackId stack = 0;    // where the offending call was made
  std::vector<RelatedStack> related;
  // What the harness injected before it, when anything ("after injected
  // wc.error RETRY_EXC_ERR on QP 0x5 wr_id=0x12 (decision #3)"); "" if
  // nothing.  Text: an indented line after the message; JSON: "context";
  // SARIF: properties.context.  Not part of the finding's identity.
  std::string context;
};

// What a kDecision event did, in words: "wc.error RETRY_EXC_ERR on QP 0x5
// wr_id=0x12", "post_send ENOMEM at WR 1 on QP 0x5", "reg_mr ENOMEM",
// "sched.pick outcome 2".  Outcomes as core/decision.h and
// interpose/faults encode them: posts (errno << 32) | (wr_index + 1),
// reg/create/alloc the errno, wc.error the ibv_wc_status, sched.* the
// scheduler's.
std::string DescribeDecisionEvent(const Event& e);

// ------------------------------------------------------------ renderers --
// `pid` 0 means getpid().  Text and JSON end with '\n'.

// The sanitizer-style report:
//   ==PID==ERROR: rdmasan: <check>: <message>
//       #0 0x... in func file:line
//     <label>:
//       #0 ...
//   SUMMARY: rdmasan: <check> <basename(file)>:<line> in <func>
std::string RenderText(const Finding& finding, const std::vector<Frame>& main,
                       const std::vector<std::vector<Frame>>& related, int pid = 0);

// One JSON object on one line: pid, check, severity, message, stack (frames
// with pc, function, file, line, module, offset; pc/offset as "0x.." strings)
// and related ([{label, kind, stack}]).
std::string RenderJson(const Finding& finding, const std::vector<Frame>& main,
                       const std::vector<std::vector<Frame>>& related, int pid = 0);

// A finding with its frames, as kept for the SARIF log.
struct RenderedFinding {
  Finding finding;
  std::vector<Frame> main;
  std::vector<std::vector<Frame>> related;
};

// A complete SARIF 2.1.0 log: every check as a rule, one result per finding
// (each stack and related location with properties.kind).
std::string RenderSarif(const std::vector<RenderedFinding>& findings);

// "SUMMARY: rdmasan: ..." without the newline.
std::string RenderSummaryLine(const Finding& finding, const std::vector<Frame>& main);

// --------------------------------------------------------- suppressions --

// Lines `check-id:pattern` or `check-id:kind=pattern`; '#' starts a comment
// line.  A rule matches a finding of its check when some frame of the named
// stack has a function, file, file basename, module or module basename
// matching the fnmatch(3) pattern: with no kind (or `main=`) the finding's
// own stack, as every line written before kinds existed; with a kind
// (stack_kinds.inc) any related stack of that kind, e.g.
//   free-registered:registered=ucs_rcache_*
// silences a free of registered memory only where the MR was registered
// through UCX's registration cache.  Text before the first '=' made only of
// letters, digits, '-' and '_' is a kind; an unknown one is an error (so a
// misspelt kind never turns into a pattern that matches nothing).
class Suppressions {
 public:
  // Parses file text and appends its rules; `source` names it in errors and
  // in RuleSource ("ucx.supp", a path; "" says only "suppressions line N").
  // Good lines apply, and each bad line is one line of the returned
  // InvalidArgument status (core/status.h: ErrorMessages).
  absl::Status Parse(absl::string_view text, absl::string_view source = "");
  // Index of the first rule matching the finding, or -1; related[i] are the
  // frames of finding.related[i].
  int Match(const Finding& finding, const std::vector<Frame>& main,
            const std::vector<std::vector<Frame>>& related) const;
  // The same for a finding with only its main stack.
  int Match(CheckId check, const std::vector<Frame>& frames) const;
  size_t size() const { return rules_.size(); }
  // The rule as a line that parses back to it ("free-registered:registered=x").
  std::string RuleText(int index) const;
  // Where it was written: "<source>:<line>", or "line <line>".
  std::string RuleSource(int index) const;

 private:
  struct Rule {
    CheckId check;
    StackKind kind;
    std::string pattern;
    std::string source;
    int line;
  };
  std::vector<Rule> rules_;
};

// The suppression files rdmasan ships for libraries (suppressions/*.supp,
// the ones core/CMakeLists.txt builds in), applied unless
// default_suppressions=false.  Built into the library so that they apply
// wherever it is preloaded from (build tree, install, under mpirun).
struct ShippedSuppressions {
  const char* name;  // "ucx.supp"
  const char* text;
};
const std::vector<ShippedSuppressions>& DefaultSuppressions();

// ------------------------------------------------------------- reporter --

class Reporter {
 public:
  // Receives each rendered chunk (one report, a summary, an option error).
  using Sink = std::function<void(absl::string_view)>;

  // Uses options.checks, suppressions, default_suppressions, report_format, halt_on_error,
  // exitcode, verbosity, strip_path_prefix, log_path.  A null sink writes to
  // log_path.<pid> (opened lazily, reopened after fork) or stderr.  What is
  // wrong with the options (bad checks=, report_format=, an unreadable
  // suppressions file) is kept in config_errors(), not printed: the caller
  // decides (the preloaded library stops the program at start).
  explicit Reporter(const Options& options, Sink sink = nullptr);
  Reporter(const Reporter&) = delete;
  Reporter& operator=(const Reporter&) = delete;

  // Symbolizes the finding's stacks and reports it.  Returns true if it was
  // printed (enabled, not suppressed, first of its (check, stack)).  With
  // halt_on_error, an Error finding is followed by Finish() and
  // _exit(exitcode).
  bool Report(const Finding& finding);

  // Same, with frames already symbolized (trace replay, tests).  Dedup still
  // keys on finding.stack (on the message when stack is 0).  Both drop the
  // inlined <infiniband/verbs.h> frames that sit on top of the
  // application's call site.
  bool ReportSymbolized(const Finding& finding, std::vector<Frame> main,
                        std::vector<std::vector<Frame>> related);

  // End of run: prints "==PID==rdmasan: N findings: id n, ..." (if any),
  // with verbosity >= 1 the suppression files loaded and each rule's hits
  // (with the file and line it came from), writes the SARIF log
  // (report_format=sarif) to <log_path>.<pid>.sarif or rdmasan.<pid>.sarif.
  // Returns the exit status the process should use if it would exit 0:
  // exitcode when an Error finding was printed, else 0.  Idempotent.
  int Finish();

  bool HadErrors() const;
  const std::vector<std::string>& config_errors() const { return config_errors_; }
  // Opens log_path.<pid> now; "" if it is open (or no log_path is set),
  // else what failed.  Write() opens it lazily and again after fork; where
  // that later fails it says so once on stderr and writes there.  With
  // report_format=sarif it also checks that the SARIF log Finish() writes
  // could be written (absent, or a file of ours: core/file.h).
  std::string OpenLog();
  // One line of rdmasan's own ("==PID==rdmasan: <text>\n") where reports go.
  void Message(absl::string_view text);
  // Reports name this pid instead of the reporting process's (replay names
  // the recorded process, as the live run did).
  void SetReportPid(int pid) { report_pid_ = pid; }
  // The checks this reporter reports (the checks= option).
  const CheckSet& checks() const { return checks_; }
  size_t Count(CheckId check) const;  // printed findings of one check
  size_t TotalCount() const;
  size_t SuppressedCount() const;
  // Where Finish() writes the SARIF log.
  std::string SarifPath() const;

 private:
  bool ReportLocked(const Finding& finding, std::vector<Frame> main, std::vector<std::vector<Frame>> related)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int FinishLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Write(absl::string_view text) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The fd of log_path.<pid> (opened now if needed), or -1 with errno.
  int LogFdLocked(std::string* why = nullptr) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void StripPaths(std::vector<Frame>* frames) const;
  uint64_t DedupKey(const Finding& finding) const;

  enum class Format { kText, kJson, kSarif };

  const Sink sink_;
  int report_pid_ = 0;  // 0: getpid()
  const bool halt_on_error_;
  const int exitcode_;
  const int verbosity_;
  const std::string log_path_;
  const std::string strip_path_prefix_;
  Format format_ = Format::kText;
  CheckSet checks_;
  Suppressions suppressions_;  // the user's file first, then the shipped ones
  // Each file loaded, with what verbosity=1 says of it ("shipped, 4 rules").
  std::vector<std::pair<std::string, std::string>> suppression_files_;
  std::vector<std::string> config_errors_;

  // std::mutex, not absl::Mutex: TSan sees pthread locks, while Debian's
  // libabsl is not instrumented (its locks look like no locks to TSan).
  mutable std::mutex mu_;
  OwnFd log_fd_ ABSL_GUARDED_BY(mu_);
  int log_pid_ ABSL_GUARDED_BY(mu_) = 0;
  bool log_failed_said_ ABSL_GUARDED_BY(mu_) = false;
  // Dedup key -> index of the suppression that hid it, or -1 if printed.
  absl::flat_hash_map<uint64_t, int> seen_ ABSL_GUARDED_BY(mu_);
  std::array<size_t, kNumChecks> counts_ ABSL_GUARDED_BY(mu_) = {};
  std::vector<size_t> suppression_hits_ ABSL_GUARDED_BY(mu_);
  size_t suppressed_ ABSL_GUARDED_BY(mu_) = 0;
  bool had_errors_ ABSL_GUARDED_BY(mu_) = false;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  // The process whose findings the counters hold: a forked child inherits
  // its parent's, which are the parent's to report, and starts from none.
  int owner_pid_ ABSL_GUARDED_BY(mu_) = 0;
  void ForgetParentLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::vector<RenderedFinding> sarif_ ABSL_GUARDED_BY(mu_);
};

// Runs right before halt_on_error's _exit (the interposer closes its trace
// there).
void SetBeforeHaltHook(void (*hook)());

// Functions to run right before the process ends with _exit once the run is
// over (halt_on_error here; the interposer's exit status for findings): the
// atexit handlers that _exit skips would have run them.  softnic removes
// its fabric file there.  At most 4; later ones are ignored.
void AddBeforeExitHook(void (*hook)());
void RunBeforeExitHooks();

// The process-wide reporter, built from GlobalOptions() on first use and
// never destroyed.
Reporter& GlobalReporter();

// What is wrong with the process-wide options, as the preloaded library
// checks them at start: bad values (GlobalOptionErrors()), the reporter's
// config_errors(), and a log_path whose file cannot be created.
std::vector<std::string> StartupErrors();

// Every diagnostic of the library that is not a finding goes through here:
// one line "==PID==rdmasan: <text>" to log_path.<pid> or stderr.
void Diag(absl::string_view text);

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_REPORT_H_
