// core/terminal: text from a trace or a program (a reason string, a path,
// a symbol) on its way to a terminal.  A trace attached to a bug report is
// input from a stranger: its bytes must never become terminal control
// sequences (clear screen, set title, hyperlinks, keys fed back).
//
// EscapeControls writes C0 controls other than newline and tab, DEL, and
// the UTF-8 encodings of C1 controls (U+0080..U+009F) as \xNN; every other
// byte passes unchanged, so ordinary text, paths and UTF-8 read as before.
// May not: allocate when there is nothing to escape (the caller's view is
// returned through `scratch` only when a byte changed), or reorder text.
#ifndef RDMASAN_CORE_TERMINAL_H_
#define RDMASAN_CORE_TERMINAL_H_

#include <string>

#include "absl/strings/string_view.h"

namespace rdmasan::core {

// `text` when it holds nothing to escape; else the escaped copy, built in
// `*scratch`.
absl::string_view EscapeControls(absl::string_view text, std::string* scratch);

// The escaped copy, always (for one-off printing).
std::string EscapedControls(absl::string_view text);

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_TERMINAL_H_
