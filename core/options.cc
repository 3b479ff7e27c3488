#include "core/options.h"

#include "core/decision.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/checks.h"
#include "core/status.h"

namespace rdmasan::core {
namespace {

bool ParseValue(absl::string_view v, std::string* out) {
  *out = std::string(v);
  return true;
}
bool ParseValue(absl::string_view v, int* out) { return absl::SimpleAtoi(v, out); }
bool ParseValue(absl::string_view v, bool* out) {
  if (v == "1" || v == "true" || v == "yes") return *out = true, true;
  if (v == "0" || v == "false" || v == "no") return *out = false, true;
  return false;
}
std::string Show(const std::string& s) { return absl::StrCat("\"", s, "\""); }
std::string Show(int v) { return absl::StrCat(v); }
std::string Show(bool v) { return v ? "true" : "false"; }
const char* TypeName(const std::string*) { return "string"; }
const char* TypeName(const int*) { return "int"; }
const char* TypeName(const bool*) { return "bool"; }

// A softnic fabric name becomes part of a file name in /dev/shm.
bool IsFabricName(absl::string_view v) {
  if (v.empty() || v.size() > 64 || v == "." || v == "..") return false;
  for (char c : v)
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') return false;
  return true;
}

// Checks a parsed value against its row's `allowed` column (options.inc).
// Returns "" if it passes, else what is wrong, for the error message.
std::string Disallowed(absl::string_view allowed, const std::string& v) {
  if (allowed.empty() || allowed == "<path>") return "";
  if (allowed == "<name>") return IsFabricName(v) ? "" : "want 1-64 characters from A-Z a-z 0-9 - _ .";
  if (allowed == "<faults>") {
    auto spec = ParseFaultSpec(v);
    return spec.ok() ? "" : std::string(spec.status().message());
  }
  if (allowed == "<chaos>") {
    auto spec = ParseChaosSpec(v);
    return spec.ok() ? "" : std::string(spec.status().message());
  }
  if (allowed == "<checks>") {
    CheckSet scratch;
    absl::Status s = CheckSet::Parse(v, &scratch);
    return s.ok() ? "" : std::string(s.message());
  }
  for (absl::string_view choice : absl::StrSplit(allowed, '|'))
    if (v == choice) return "";
  return DescribeAllowed(allowed);
}
std::string Disallowed(absl::string_view allowed, int v) {
  std::vector<absl::string_view> range = absl::StrSplit(allowed, "..");
  int lo = 0, hi = 0;
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &lo) || !absl::SimpleAtoi(range[1], &hi)) return "";
  return v >= lo && v <= hi ? "" : DescribeAllowed(allowed);
}
std::string Disallowed(absl::string_view, bool) { return ""; }

}  // namespace

std::string BadValue(absl::string_view key, absl::string_view val, absl::string_view why) {
  if (why == "int" || why == "bool" || why == "string")
    return absl::StrCat("option '", key, "': bad ", why, " value '", val, "'");
  return absl::StrCat("option '", key, "': bad value '", val, "' (", why, ")");
}

absl::Status ParseOptions(absl::string_view text, Options* opts) {
  std::vector<std::string> errors;
  // A fault spec's settings are ':'-separated too (faults=wc.error:p=0.1,
  // chaos=cq_event:p=0.5): an item that does not start with an option's
  // name continues faults= (or chaos=).
  std::vector<std::string> items;
  bool in_faults = false;
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(":\n "), absl::SkipEmpty())) {
    const absl::string_view name = item.substr(0, item.find('='));
    if (in_faults && !IsKnownOption(name)) {
      absl::StrAppend(&items.back(), ":", item);
      continue;
    }
    in_faults = name == "faults" || name == "chaos";
    items.emplace_back(item);
  }
  for (absl::string_view item : items) {
    size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      errors.push_back(absl::StrCat("option '", item, "' has no value (expected name=value)"));
      continue;
    }
    absl::string_view key = item.substr(0, eq), val = item.substr(eq + 1);
    bool known = false;
#define RDMASAN_OPTION(type, name, def, allowed, desc)                    \
  if (key == #name) {                                                     \
    known = true;                                                         \
    type parsed{};                                                        \
    if (!ParseValue(val, &parsed))                                        \
      errors.push_back(BadValue(key, val, TypeName(&parsed)));            \
    else if (std::string why = Disallowed(allowed, parsed); !why.empty()) \
      errors.push_back(BadValue(key, val, why));                          \
    else                                                                  \
      opts->name = parsed;                                                \
  }
#include "core/options.inc"
#undef RDMASAN_OPTION
    if (!known) errors.push_back(absl::StrCat("unknown option '", key, "' (help=1 lists them)"));
  }
  return InvalidArgumentErrors(errors);
}

bool IsKnownOption(absl::string_view name) {
#define RDMASAN_OPTION(type, n, def, allowed, desc) \
  if (name == #n) return true;
#include "core/options.inc"
#undef RDMASAN_OPTION
  return false;
}

std::string DescribeAllowed(absl::string_view allowed) {
  if (allowed.empty() || allowed[0] == '<') return "";
  std::vector<absl::string_view> range = absl::StrSplit(allowed, "..");
  if (range.size() == 2) return absl::StrCat(range[0], " to ", range[1]);
  return absl::StrCat("one of: ", absl::StrJoin(absl::StrSplit(allowed, '|'), ", "));
}

namespace {
std::string Allowed(absl::string_view allowed) {
  std::string what = DescribeAllowed(allowed);
  return what.empty() ? "" : absl::StrCat(" [", what, "]");
}
}  // namespace

std::string OptionsHelp() {
  std::string out = "rdmasan options (RDMASAN_OPTIONS=name=value:name=value, or rdmasan run --name=value):\n";
  Options defaults;
#define RDMASAN_OPTION(type, name, def, allowed, desc)                                              \
  absl::StrAppendFormat(&out, "  %-17s %-7s default %-10s %s%s\n", #name, TypeName(&defaults.name), \
                        Show(defaults.name), desc, Allowed(allowed));
#include "core/options.inc"
#undef RDMASAN_OPTION
  return out;
}

namespace {

struct Global {
  Options options;
  std::vector<std::string> errors;
};

const Global& GetGlobal() {
  static Global* g = [] {
    auto* g = new Global();
    auto parse = [g](absl::string_view where, const char* text) {
      for (std::string& e : ErrorMessages(ParseOptions(text, &g->options)))
        g->errors.push_back(absl::StrCat(where, ": ", e));
    };
    if (__rdmasan_default_options) {
      const char* text = __rdmasan_default_options();
      if (text) parse("__rdmasan_default_options", text);
    }
    if (const char* env = std::getenv("RDMASAN_OPTIONS")) parse("RDMASAN_OPTIONS", env);
    return g;
  }();
  return *g;
}

}  // namespace

const Options& GlobalOptions() { return GetGlobal().options; }
const std::vector<std::string>& GlobalOptionErrors() { return GetGlobal().errors; }

}  // namespace rdmasan::core
