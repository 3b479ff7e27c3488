// cli/fuzz_args: what a campaign is, from `rdmasan fuzz`'s command line:
// the campaign's own flags (--runs, --faults, --strategy, ...: the table
// cli/fuzz_flags.inc), the rdmasan options passed on to every run, and the
// program (or server and client) to run.
//
// May not: accept an rdmasan option the campaign sets for each run itself
// (schedule, decision_log, log_path, ...), interpret the other options
// beyond checking that they parse (the preloaded runtime owns them), or
// touch the file system but to find the programs.
#ifndef RDMASAN_CLI_FUZZ_ARGS_H_
#define RDMASAN_CLI_FUZZ_ARGS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rdmasan::cli::fuzz {

// --shard=K/N: this campaign makes runs K, K+N, K+2N, ...
struct Shard {
  int k = 0;
  int n = 1;
};

// --faults=SPEC as given ("" with --faults=none or --faults=).
struct FaultsFlag {
  std::string spec;
  bool given = false;  // every run gets `spec` as written
};

struct Config {
  // The campaign's flags, one field per row of cli/fuzz_flags.inc, with its
  // default.  runs 0 and time 0: unset.
#define RDMASAN_FUZZ_FLAG(type, name, dflt, allowed, value, expected, help) type name = dflt;
#include "cli/fuzz_flags.inc"
#undef RDMASAN_FUZZ_FLAG
  // The rest of the command line.
  std::vector<std::string> options;  // rdmasan options for every run, "name=value"
  bool user_reorder = false;
  std::vector<std::vector<std::string>> roles;  // [0]: program (server); [1]: client
  bool uses_port = false;
};

// Parses `rdmasan fuzz`'s arguments (after "fuzz") into *c.  A bad flag, an
// option the campaign sets itself or a missing program is an
// InvalidArgument error saying which ("fuzz: option '--jobs=0': expected
// 1..256"); nothing is printed.
absl::Status ParseFuzzArgs(int argc, char** argv, Config* c);

// The campaign's faults when --faults is not given (measured on the
// planted programs of tests/e2e/fuzz, see docs/fuzzing.md):
// every kOrderOnlyEvery-th run (0, 4, 8, ...) is a run of an order-only
// campaign, so order bugs are found as soon as without faults; the others
// get kDefaultFaults, BUGGIFY-style: each fault point active for the run
// with probability 1/4 (the rule's enable=), an active point failing 5% of
// its hits, so most fault runs fail a few points many times and leave the
// rest of the program alone.
inline constexpr uint64_t kOrderOnlyEvery = 4;
inline constexpr char kDefaultFaults[] = "*:enable=0.25";
// The --faults spec of run `index` ("" for none).
std::string RunFaults(const Config& c, uint64_t index);
// What the campaign injects, as campaign.json says it.
std::string DescribeFaults(const Config& c);

// Where `prog` would be executed from (execvp's search), or "".
std::string FindProgram(const std::string& prog);

}  // namespace rdmasan::cli::fuzz

#endif  // RDMASAN_CLI_FUZZ_ARGS_H_
