#include "core/checks.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace rdmasan::core {
namespace {

struct CheckInfo {
  const char* name;
  Severity severity;
  bool default_on;
  const char* description;
};

constexpr Severity Error = Severity::kError;
constexpr Severity Warning = Severity::kWarning;

constexpr CheckInfo kChecks[] = {
#define RDMASAN_CHECK(name, id, sev, on, desc) {id, sev, on, desc},
#include "core/checks.inc"
#undef RDMASAN_CHECK
};
static_assert(sizeof(kChecks) / sizeof(kChecks[0]) == kNumChecks);

const CheckInfo* Info(CheckId id) {
  size_t i = static_cast<size_t>(id);
  return i < kNumChecks ? &kChecks[i] : nullptr;
}

}  // namespace

const char* CheckName(CheckId id) {
  const CheckInfo* info = Info(id);
  return info ? info->name : "<invalid>";
}

Severity CheckSeverity(CheckId id) {
  const CheckInfo* info = Info(id);
  return info ? info->severity : Severity::kError;
}

bool CheckDefaultOn(CheckId id) {
  const CheckInfo* info = Info(id);
  return info && info->default_on;
}

const char* CheckDescription(CheckId id) {
  const CheckInfo* info = Info(id);
  return info ? info->description : "";
}

std::optional<CheckId> CheckByName(absl::string_view name) {
  for (size_t i = 0; i < kNumChecks; ++i)
    if (name == kChecks[i].name) return static_cast<CheckId>(i);
  return std::nullopt;
}

const char* SeverityName(Severity severity) { return severity == Severity::kError ? "ERROR" : "WARNING"; }

CheckSet::CheckSet() {
  for (size_t i = 0; i < kNumChecks; ++i) bits_.set(i, kChecks[i].default_on);
}

CheckSet CheckSet::All() {
  CheckSet s;
  s.bits_.set();
  return s;
}

CheckSet CheckSet::None() {
  CheckSet s;
  s.bits_.reset();
  return s;
}

absl::Status CheckSet::Parse(absl::string_view text, CheckSet* out) {
  CheckSet set;
  bool first = true;
  if (absl::StripAsciiWhitespace(text).empty())
    return absl::InvalidArgumentError("checks: empty (name checks, or 'default', 'all' or 'none')");
  for (absl::string_view item : absl::StrSplit(text, absl::ByAnyChar(",;"))) {
    item = absl::StripAsciiWhitespace(item);
    if (item.empty())
      return absl::InvalidArgumentError(
          absl::StrCat("checks: an empty item in '", text.substr(0, 120), "' (a stray ',' or ';')"));
    if (item == "all") {
      set = All();
    } else if (item == "none") {
      set = None();
    } else if (item == "default") {
      set = Defaults();
    } else {
      bool on = true;
      bool bare = true;
      if (item[0] == '-' || item[0] == '+') {
        on = item[0] == '+';
        bare = false;
        item.remove_prefix(1);
      }
      std::optional<CheckId> id = CheckByName(item);
      if (!id)
        return absl::InvalidArgumentError(
            absl::StrCat("checks: unknown check id '", item, "' (rdmasan checks lists them)"));
      if (first && bare) set = None();
      set.Set(*id, on);
    }
    first = false;
  }
  *out = set;
  return absl::OkStatus();
}

}  // namespace rdmasan::core
