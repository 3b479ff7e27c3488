#include "cli/usage.h"

#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "core/options.h"

namespace rdmasan::cli {
namespace {

struct Row {
  const char* name;
  const char* synopsis;
  const char* description;
};

constexpr Row kCommands[] = {
#define RDMASAN_COMMAND(name, synopsis, description) {name, synopsis, description},
#include "cli/commands.inc"
#undef RDMASAN_COMMAND
};

struct OptionRow {
  const char* name;
  const char* type;
  const char* default_value;  // as written in the table: "auto", 0, false
  const char* allowed;        // "a|b", "lo..hi", "<checks>", "<name>", "<path>" or ""
  const char* description;
};

constexpr OptionRow kOptions[] = {
#define RDMASAN_OPTION(type, name, dflt, allowed, description) {#name, #type, #dflt, allowed, description},
#include "core/options.inc"
#undef RDMASAN_OPTION
};

struct FuzzFlagRow {
  const char* name;
  const char* default_value;  // as written in the table: "random", 3, {} (none to show)
  const char* allowed;
  const char* value;  // the synopsis's name for the value; "" shows `allowed`
  const char* help;
};

constexpr FuzzFlagRow kFuzzFlags[] = {
#define RDMASAN_FUZZ_FLAG(type, name, dflt, allowed, value, expected, help) \
  {#name, #dflt, allowed, value, help},
#include "cli/fuzz_flags.inc"
#undef RDMASAN_FUZZ_FLAG
};

// What `rdmasan fuzz` says after the flags: the rest of its command line.
constexpr char kFuzzRest[] =
    "[--name=value ...] -- program [args...] [--- client [args...]] | fuzz merge --out=DIR SHARD_DIR...";

constexpr char kFuzzNotes[] =
    "{port} in an argument becomes a TCP port free for the run (both sides of a pair get the same).\n"
    "With no --faults, every 4th run (0, 4, 8, ...) varies completion orders only and each other run\n"
    "also injects faults BUGGIFY-style (--faults='*:enable=0.25': each fault point active for the run\n"
    "with probability 1/4, an active point failing 5% of its hits); --faults=none: orders only.\n"
    "--name=value: an rdmasan option (`rdmasan run --help=1` lists them) for every run, but those the\n"
    "campaign sets itself.\n";

std::string FuzzFlag(const FuzzFlagRow& f) {
  return absl::StrCat("--", f.name, "=", *f.value ? f.value : f.allowed);
}

// The table's default as a reader wants it: "" for none worth showing.
std::string FuzzDefault(const FuzzFlagRow& f) {
  absl::string_view v = f.default_value;
  if (v == "{}" || v == "0") return "";
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return absl::StrCat(" (default ", v, ")");
}

std::string Synopsis(absl::string_view synopsis) {
  return absl::StrReplaceAll(synopsis, {{"{fuzz flags}", FuzzFlagsSynopsis()}});
}

struct CheckRow {
  const char* id;
  const char* severity;
  bool on;
  const char* invariant;
};

constexpr CheckRow kChecks[] = {
#define RDMASAN_CHECK(name, id, sev, on, invariant) {id, #sev, on, invariant},
#include "core/checks.inc"
#undef RDMASAN_CHECK
};

constexpr char kEnvironment[] =
    "RDMASAN_OPTIONS=name=value:name=value sets options (the command line wins); RDMASAN_LIB names "
    "librdmasan.so (or its folder) to override where it is found.";
constexpr char kExitStatus[] =
    "the program's own; exitcode (66) after Error findings; 2 for a bad command line or option; 3 for a "
    "file that is not a readable trace; 126 when the program cannot be executed, 127 when it cannot be "
    "found; 128+n when it dies of signal n.";
constexpr char kDocumentation[] =
    "rdmasan(1); README.md and docs/ in share/doc/rdmasan (docs/checks.md: every check, with a report, "
    "why it is a bug and how to fix it).";

// Greedy word wrap of `text` at `width` columns, each line after `indent`.
std::string Wrap(absl::string_view text, size_t indent, size_t width) {
  std::string out, line;
  for (absl::string_view word : absl::StrSplit(text, ' ', absl::SkipEmpty())) {
    if (!line.empty() && indent + line.size() + 1 + word.size() > width) {
      absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
      line.clear();
    }
    absl::StrAppend(&line, line.empty() ? "" : " ", word);
  }
  if (!line.empty()) absl::StrAppend(&out, std::string(indent, ' '), line, "\n");
  return out;
}

// troff escapes: a backslash, and a line that would start with '.' or '\''.
std::string Roff(absl::string_view text) {
  std::string s = absl::StrReplaceAll(text, {{"\\", "\\e"}, {"-", "\\-"}});
  if (!s.empty() && (s[0] == '.' || s[0] == '\'')) s.insert(0, "\\&");
  return s;
}

std::string DefaultValue(absl::string_view v) {
  if (v.size() >= 2 && v.front() == '"' && v.back() == '"') v = v.substr(1, v.size() - 2);
  return v.empty() ? "(empty)" : std::string(v);
}

std::string AllowedValues(absl::string_view allowed) {
  std::string what = rdmasan::core::DescribeAllowed(allowed);
  return what.empty() ? "" : absl::StrCat("; ", what);
}

std::string ManOptions() {
  std::string out =
      ".SH OPTIONS\nRuntime options, given as \\fB\\-\\-name=value\\fR to \\fBrun\\fR, "
      "\\fBdevices\\fR and \\fBreplay\\fR, or in \\fBRDMASAN_OPTIONS\\fR.\n";
  for (const OptionRow& o : kOptions) {
    absl::StrAppend(&out, ".TP\n\\fB", Roff(o.name), "\\fR=\\fI",
                    o.type == absl::string_view("std::string") ? "string" : o.type,
                    "\\fR (default: ", Roff(DefaultValue(o.default_value)), AllowedValues(o.allowed), ")\n",
                    Roff(o.description), "\n");
  }
  return out;
}

std::string ManFuzzFlags() {
  std::string out = ".SH FUZZ FLAGS\nThe flags of \\fBfuzz\\fR, before its program.\n";
  for (const FuzzFlagRow& f : kFuzzFlags)
    absl::StrAppend(&out, ".TP\n\\fB", Roff(FuzzFlag(f)), "\\fR", Roff(FuzzDefault(f)), "\n", Roff(f.help),
                    "\n");
  return out;
}

std::string ManChecks() {
  std::string out =
      ".SH CHECKS\nEach check has a stable id, used in \\fBchecks=\\fR and in suppression files.\n";
  for (const CheckRow& c : kChecks) {
    absl::string_view sev = absl::string_view(c.severity).substr(1);  // kError -> Error
    absl::StrAppend(&out, ".TP\n\\fB", Roff(c.id), "\\fR (", sev, c.on ? "" : ", off by default", ")\n",
                    Roff(c.invariant), "\n");
  }
  return out;
}

}  // namespace

std::string UsageText() {
  std::string out = "usage: rdmasan <command> [args]\n\ncommands:\n";
  for (const Row& c : kCommands)
    absl::StrAppend(&out, "  ", Synopsis(c.synopsis), "\n", Wrap(c.description, 8, 78));
  absl::StrAppend(&out, "\noptions: `rdmasan run --help=1` lists every option and its default.\n",
                  Wrap(absl::StrCat("environment: ", kEnvironment), 0, 78),
                  Wrap(absl::StrCat("exit status: ", kExitStatus), 0, 78),
                  Wrap(absl::StrCat("documentation: ", kDocumentation), 0, 78));
  return out;
}

std::string FuzzFlagsSynopsis() {
  std::vector<std::string> flags;
  for (const FuzzFlagRow& f : kFuzzFlags) flags.push_back(absl::StrCat("[", FuzzFlag(f), "]"));
  return absl::StrJoin(flags, " ");
}

std::string FuzzUsageText() {
  constexpr absl::string_view kLead = "usage: rdmasan fuzz ";
  std::string out = Wrap(absl::StrCat(FuzzFlagsSynopsis(), " ", kFuzzRest), kLead.size(), 100);
  out.replace(0, kLead.size(), kLead.data(), kLead.size());  // continuation lines stay indented under it
  absl::StrAppend(&out, "flags:\n");
  for (const FuzzFlagRow& f : kFuzzFlags)
    absl::StrAppend(&out, "  ", FuzzFlag(f), "\n", Wrap(absl::StrCat(f.help, FuzzDefault(f)), 8, 100));
  absl::StrAppend(&out, kFuzzNotes);
  return out;
}

std::string ManPage(const std::string& version, const std::string& date) {
  std::string out =
      absl::StrCat(".TH RDMASAN 1 \"", date, "\" \"rdmasan ", version, "\" \"User Commands\"\n");
  absl::StrAppend(&out,
                  ".SH NAME\nrdmasan \\- sanitizer and fault-injection harness for RDMA verbs programs\n",
                  ".SH SYNOPSIS\n");
  for (const Row& c : kCommands) absl::StrAppend(&out, ".B rdmasan\n", Roff(Synopsis(c.synopsis)), "\n.br\n");
  absl::StrAppend(&out, ".SH DESCRIPTION\n",
                  "rdmasan preloads librdmasan.so under an unmodified verbs program, checks the verbs rules "
                  "at every call and reports every breach with the stack of the offending call and of the "
                  "objects involved. When no RDMA device exists it presents softnic0, a user\\-space RDMA "
                  "device.\n.SH COMMANDS\n");
  for (const Row& c : kCommands)
    absl::StrAppend(&out, ".TP\n\\fB", Roff(c.name), "\\fR\n", Roff(c.description), "\n");
  absl::StrAppend(&out, ManOptions(), ManFuzzFlags(), ManChecks(), ".SH ENVIRONMENT\n", Roff(kEnvironment),
                  "\n", ".SH EXIT STATUS\n", Roff(kExitStatus),
                  "\n.SH FILES\n\\fIlib/rdmasan/librdmasan.so\\fR relative to the "
                  "installed command; "
                  "\\fIshare/rdmasan/suppressions/\\fR, shipped suppression files; "
                  "\\fIshare/doc/rdmasan/\\fR, README.md and "
                  "the pages of docs/.\n");
  return out;
}

}  // namespace rdmasan::cli
