// core/options: rdmasan's runtime options, parsed from RDMASAN_OPTIONS.
//
// One X-macro table (options.inc) generates the Options struct, its parser
// and the help text, so an option exists in exactly one place.  Precedence:
// built-in defaults, then the weak __rdmasan_default_options() hook, then
// RDMASAN_OPTIONS.  Parsing never aborts the watched program: a bad option
// yields an error status and the option keeps its previous value.
#ifndef RDMASAN_CORE_OPTIONS_H_
#define RDMASAN_CORE_OPTIONS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmasan::core {

struct Options {
#define RDMASAN_OPTION(type, name, def, desc) type name = def;
#include "core/options.inc"
#undef RDMASAN_OPTION
};

// Parses "k=v:k=v" (':', newline or space separated pairs, empty items
// ignored; values may hold commas, as in checks=all,-wr-id-duplicate) into
// *opts.  Good items apply; each bad item is one line of the returned
// InvalidArgument status (core/status.h: ErrorMessages splits them).
absl::Status ParseOptions(absl::string_view text, Options* opts);

// True if `name` is a known option.
bool IsKnownOption(absl::string_view name);

// The help=1 text: every option, its default and description.
std::string OptionsHelp();

// The process-wide options, parsed once on first use from the hook and the
// environment.  Errors are printed to stderr once.
const Options& GlobalOptions();

}  // namespace rdmasan::core

extern "C" const char* __rdmasan_default_options() __attribute__((weak));

#endif  // RDMASAN_CORE_OPTIONS_H_
