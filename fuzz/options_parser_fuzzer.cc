// libFuzzer target: arbitrary bytes as RDMASAN_OPTIONS text (core/options:
// ParseOptions), as a suppressions file (core/report: Suppressions) and as a
// checks= value (core/checks: CheckSet::Parse).  The parsers must never
// crash, hang or leak, whatever the input.  Beyond that it holds them to
// what their headers promise, aborting (so libFuzzer keeps the input) when:
//   - parsing the same text again over the result changes an option or the
//     errors (the last good value of each option wins; bad items keep the
//     previous value);
//   - options that parsed, written back as name=value items (those that
//     differ from the defaults), do not parse cleanly to the same options;
//   - a suppression rule, written back with RuleText, does not parse to
//     the same single rule, or a `check:*` rule fails to match a frame with
//     a name, or Match names a rule out of range.
// It only calls the parsers; it reads no files and changes no global state.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "core/checks.h"
#include "core/options.h"
#include "core/report.h"
#include "core/stack.h"

namespace {

using rdmasan::core::CheckId;
using rdmasan::core::Options;

bool Same(const Options& a, const Options& b) {
#define RDMASAN_OPTION(type, name, def, allowed, desc) \
  if (!(a.name == b.name)) return false;
#include "core/options.inc"
#undef RDMASAN_OPTION
  return true;
}

std::string Show(const std::string& v) { return v; }
std::string Show(int v) { return absl::StrCat(v); }
std::string Show(bool v) { return v ? "1" : "0"; }

// The options that differ from the defaults, as name=value items.
std::string WriteBack(const Options& o) {
  const Options defaults;
  std::string text;
#define RDMASAN_OPTION(type, name, def, allowed, desc) \
  if (!(o.name == defaults.name)) absl::StrAppend(&text, #name, "=", Show(o.name), ":");
#include "core/options.inc"
#undef RDMASAN_OPTION
  return text;
}

void OptionsText(absl::string_view text) {
  Options once;
  const absl::Status s1 = rdmasan::core::ParseOptions(text, &once);
  Options twice = once;
  const absl::Status s2 = rdmasan::core::ParseOptions(text, &twice);
  if (!Same(once, twice) || s1 != s2) std::abort();
  if (!s1.ok()) return;
  Options back;
  const absl::Status s3 = rdmasan::core::ParseOptions(WriteBack(once), &back);
  if (!s3.ok() || !Same(once, back)) std::abort();
}

void SuppressionsText(absl::string_view text) {
  rdmasan::core::Suppressions sup;
  (void)sup.Parse(text);
  // Frames named by pieces of the input.
  std::vector<rdmasan::core::Frame> frames(1);
  const size_t q = text.size() / 4;
  frames[0].function = std::string(text.substr(0, q));
  frames[0].file = std::string(text.substr(q, q));
  frames[0].module = std::string(text.substr(2 * q));
  frames.push_back(rdmasan::core::Frame{});
  frames.back().function = "main";
  frames.back().file = "/src/app/main.c";
  frames.back().module = "/usr/bin/app";
  for (size_t i = 0; i < sup.size(); ++i) {
    const std::string rule = sup.RuleText(static_cast<int>(i));
    rdmasan::core::Suppressions again;
    if (!again.Parse(rule).ok() || again.size() != 1 || again.RuleText(0) != rule) std::abort();
    const size_t colon = rule.find(':');
    if (colon == std::string::npos) std::abort();
    if (rule.substr(colon + 1) == "*") {
      auto check = rdmasan::core::CheckByName(rule.substr(0, colon));
      if (!check || again.Match(*check, frames) != 0) std::abort();
    }
  }
  for (int c = 0; c < static_cast<int>(CheckId::kCount); ++c) {
    const int m = sup.Match(static_cast<CheckId>(c), frames);
    if (m < -1 || m >= static_cast<int>(sup.size())) std::abort();
  }
}

void ChecksText(absl::string_view text) {
  rdmasan::core::CheckSet set;
  (void)rdmasan::core::CheckSet::Parse(text, &set);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  OptionsText(text);
  SuppressionsText(text);
  ChecksText(text);
  return 0;
}
