// core/checks: rdmasan's check ids as a C++ enum, their properties, and the
// set of checks a run has enabled.
//
// Everything here is generated from the one table in checks.inc; the id
// strings are stable because users write them in suppressions and in
// checks=... options.  This module is pure data: it does no I/O and never
// aborts; a bad checks= value yields an error status.
#ifndef RDMASAN_CORE_CHECKS_H_
#define RDMASAN_CORE_CHECKS_H_

#include <bitset>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmasan::core {

enum class CheckId : uint16_t {
#define RDMASAN_CHECK(name, id, sev, on, desc) name,
#include "core/checks.inc"
#undef RDMASAN_CHECK
  kCount
};

inline constexpr size_t kNumChecks = static_cast<size_t>(CheckId::kCount);

enum class Severity { kError, kWarning };

// "sq-overflow" etc.; "<invalid>" for an out-of-range value.
const char* CheckName(CheckId id);
Severity CheckSeverity(CheckId id);
bool CheckDefaultOn(CheckId id);
// The invariant the check enforces, one line.
const char* CheckDescription(CheckId id);
// The id whose string is `name`, if any.
std::optional<CheckId> CheckByName(absl::string_view name);
// "ERROR" / "WARNING", as in report headers.
const char* SeverityName(Severity severity);

// A set of enabled checks.
class CheckSet {
 public:
  // The default_on checks.
  CheckSet();

  static CheckSet All();
  static CheckSet None();
  static CheckSet Defaults() { return CheckSet(); }

  // Parses a checks= value: items separated by ',' or ';', applied in order.
  //   all | none | default    replace the set
  //   id   or  +id            enable one check
  //   -id                     disable one check
  // If the first item is a bare id the set starts empty ("sq-overflow,
  // cq-overrun" enables exactly those); otherwise it starts from the
  // defaults ("-unsignaled-run", "+wr-id-duplicate").  Empty text gives
  // the defaults.  On an unknown id returns an InvalidArgument status and
  // leaves *out untouched.
  static absl::Status Parse(absl::string_view text, CheckSet* out);

  bool Enabled(CheckId id) const { return bits_.test(static_cast<size_t>(id)); }
  void Set(CheckId id, bool on) { bits_.set(static_cast<size_t>(id), on); }
  size_t Count() const { return bits_.count(); }
  bool operator==(const CheckSet& other) const { return bits_ == other.bits_; }

 private:
  std::bitset<kNumChecks> bits_;
};

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_CHECKS_H_
