#include "core/terminal.h"

#include "absl/strings/str_format.h"

namespace rdmasan::core {
namespace {

// The length of the control sequence introducer at text[i]: 1 for a C0
// control (not \n, \t) or DEL, 2 for a UTF-8 encoded C1 control, else 0.
size_t ControlAt(absl::string_view text, size_t i) {
  const auto c = static_cast<unsigned char>(text[i]);
  if ((c < 0x20 && c != '\n' && c != '\t') || c == 0x7f) return 1;
  if (c == 0xc2 && i + 1 < text.size()) {
    const auto d = static_cast<unsigned char>(text[i + 1]);
    if (d >= 0x80 && d <= 0x9f) return 2;
  }
  return 0;
}

}  // namespace

absl::string_view EscapeControls(absl::string_view text, std::string* scratch) {
  size_t i = 0;
  while (i < text.size() && ControlAt(text, i) == 0) ++i;
  if (i == text.size()) return text;
  scratch->assign(text.data(), i);
  while (i < text.size()) {
    const size_t n = ControlAt(text, i);
    if (n == 0) {
      scratch->push_back(text[i++]);
      continue;
    }
    for (size_t k = 0; k < n; ++k)
      absl::StrAppendFormat(scratch, "\\x%02x", static_cast<unsigned char>(text[i + k]));
    i += n;
  }
  return *scratch;
}

std::string EscapedControls(absl::string_view text) {
  std::string scratch;
  return std::string(EscapeControls(text, &scratch));
}

}  // namespace rdmasan::core
