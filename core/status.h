// core/status: the few absl::Status helpers rdmasan's parsers share.
//
// Parsers (options, checks=, suppressions, the command line) return
// absl::Status; one that finds several bad items keeps going and returns
// them all in one InvalidArgument status, one message per line, which the
// callers print line by line exactly as they printed the list before.
// Debian's Abseil (20220623) has no status macros: RDMASAN_RETURN_IF_ERROR
// is the one copy.
//
// May not: print, log or abort; a status is only a value.
#ifndef RDMASAN_CORE_STATUS_H_
#define RDMASAN_CORE_STATUS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"

namespace rdmasan::core {

// OK for no errors, else InvalidArgument with the messages joined by '\n'
// (none of them may hold a newline).
inline absl::Status InvalidArgumentErrors(const std::vector<std::string>& errors) {
  if (errors.empty()) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrJoin(errors, "\n"));
}

// The messages of a status, one per line; none for OK.
inline std::vector<std::string> ErrorMessages(const absl::Status& status) {
  if (status.ok()) return {};
  return absl::StrSplit(status.message(), '\n');
}

}  // namespace rdmasan::core

// Returns the status of `expr` from the calling function unless it is OK.
#define RDMASAN_RETURN_IF_ERROR(expr)                                                           \
  do {                                                                                          \
    if (::absl::Status rdmasan_status_ = (expr); !rdmasan_status_.ok()) return rdmasan_status_; \
  } while (0)

#endif  // RDMASAN_CORE_STATUS_H_
