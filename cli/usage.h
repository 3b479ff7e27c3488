// cli/usage: the texts that describe the `rdmasan` command — `rdmasan help`
// and the man page rdmasan(1) — generated from the tables that define the
// command (cli/commands.inc), its options (core/options.inc), the flags of
// `rdmasan fuzz` (cli/fuzz_flags.inc) and its checks (core/checks.inc), so
// no description exists in two places.
//
// May not: print anything itself or read the environment; callers decide
// where the text goes.
#ifndef RDMASAN_CLI_USAGE_H_
#define RDMASAN_CLI_USAGE_H_

#include <string>

namespace rdmasan::cli {

// The `rdmasan help` text (80 columns).
std::string UsageText();

// `rdmasan fuzz`'s flags as its synopsis shows them ("[--runs=N] [--time=S]
// ..."), and its --help text: the synopsis, each flag with its default, and
// what the flags leave unsaid; from cli/fuzz_flags.inc.
std::string FuzzFlagsSynopsis();
std::string FuzzUsageText();

// rdmasan(1) in man(7) troff; `date` goes in the title line (YYYY-MM-DD).
std::string ManPage(const std::string& version, const std::string& date);

}  // namespace rdmasan::cli

#endif  // RDMASAN_CLI_USAGE_H_
