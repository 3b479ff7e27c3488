#include "core/options.h"

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

}  // namespace

absl::Status ParseOptions(absl::string_view text, Options* opts) {
  std::vector<std::string> errors;
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(":\n "), absl::SkipEmpty())) {
    size_t eq = item.find('=');
    if (eq == absl::string_view::npos) {
      errors.push_back(absl::StrCat("option '", item, "' has no value (expected name=value)"));
      continue;
    }
    absl::string_view key = item.substr(0, eq), val = item.substr(eq + 1);
    bool known = false;
#define RDMASAN_OPTION(type, name, def, desc)                                                              \
  if (key == #name) {                                                                                      \
    known = true;                                                                                          \
    type parsed{};                                                                                         \
    if (ParseValue(val, &parsed))                                                                          \
      opts->name = parsed;                                                                                 \
    else                                                                                                   \
      errors.push_back(absl::StrCat("option '", key, "': bad ", TypeName(&parsed), " value '", val, "'")); \
  }
#include "core/options.inc"
#undef RDMASAN_OPTION
    if (!known) errors.push_back(absl::StrCat("unknown option '", key, "' (help=1 lists them)"));
  }
  return InvalidArgumentErrors(errors);
}

bool IsKnownOption(absl::string_view name) {
#define RDMASAN_OPTION(type, n, def, desc) \
  if (name == #n) return true;
#include "core/options.inc"
#undef RDMASAN_OPTION
  return false;
}

std::string OptionsHelp() {
  std::string out = "rdmasan options (RDMASAN_OPTIONS=name=value:name=value, or rdmasan run --name=value):\n";
  Options defaults;
#define RDMASAN_OPTION(type, name, def, desc)                                                     \
  absl::StrAppendFormat(&out, "  %-16s %-7s default %-10s %s\n", #name, TypeName(&defaults.name), \
                        Show(defaults.name), desc);
#include "core/options.inc"
#undef RDMASAN_OPTION
  return out;
}

const Options& GlobalOptions() {
  static Options* opts = [] {
    auto* o = new Options();
    std::vector<std::string> errors;
    if (__rdmasan_default_options) errors = ErrorMessages(ParseOptions(__rdmasan_default_options(), o));
    if (const char* env = std::getenv("RDMASAN_OPTIONS")) {
      std::vector<std::string> e = ErrorMessages(ParseOptions(env, o));
      errors.insert(errors.end(), e.begin(), e.end());
    }
    for (const auto& e : errors) std::fprintf(stderr, "==%d==rdmasan: %s\n", getpid(), e.c_str());
    return o;
  }();
  return *opts;
}

}  // namespace rdmasan::core
