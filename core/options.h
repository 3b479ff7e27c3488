// core/options: rdmasan's runtime options, parsed from RDMASAN_OPTIONS.
//
// One X-macro table (options.inc) generates the Options struct, its parser
// and the help text, so an option exists in exactly one place.  Precedence:
// built-in defaults, then the weak __rdmasan_default_options() hook, then
// RDMASAN_OPTIONS.  Each row names the values it allows (an enumeration
// "a|b|c", an int range "lo..hi", <checks> for a checks= spec, <name> for a
// fabric name); a value outside them is an error like a malformed one.
// Parsing itself never aborts: a bad item yields an error status and the
// option keeps its previous value.
#ifndef RDMASAN_CORE_OPTIONS_H_
#define RDMASAN_CORE_OPTIONS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace rdmasan::core {

struct Options {
#define RDMASAN_OPTION(type, name, def, allowed, desc) type name = def;
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

// What a row's `allowed` column admits, in words ("one of: a, b", "0 to 2");
// "" where the type says it all.
std::string DescribeAllowed(absl::string_view allowed);

// The help=1 text: every option, its default and description.
std::string OptionsHelp();

// The process-wide options, parsed once on first use from the hook and the
// environment.  A bad item keeps the option's previous value; its error is
// kept in GlobalOptionErrors() (the preloaded library stops the program at
// start on any: interpose/init.cc).
const Options& GlobalOptions();
const std::vector<std::string>& GlobalOptionErrors();

}  // namespace rdmasan::core

extern "C" const char* __rdmasan_default_options() __attribute__((weak));

#endif  // RDMASAN_CORE_OPTIONS_H_
