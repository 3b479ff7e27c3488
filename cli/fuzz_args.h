// cli/fuzz_args: what a campaign is, from `rdmasan fuzz`'s command line:
// the campaign's own flags (--runs, --faults, --strategy, ...), the rdmasan
// options passed on to every run, and the program (or server and client)
// to run.
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

inline constexpr char kUsage[] =
    "usage: rdmasan fuzz [--runs=N] [--time=S] [--jobs=J] [--seed=S] [--shard=K/N] [--timeout=S]\n"
    "                    [--strategy=random|pct|enumerate] [--depth=D] [--faults=SPEC] [--out=DIR]\n"
    "                    [--shrink_time=S] [--name=value rdmasan options...]\n"
    "                    -- program [args...] [--- client [args...]]\n"
    "       rdmasan fuzz merge --out=DIR SHARD_DIR...\n"
    "{port} in an argument becomes a TCP port free for the run (both sides of a pair get the same).\n"
    "With no --faults, every 4th run (0, 4, 8, ...) varies completion orders only and each other run\n"
    "also injects faults BUGGIFY-style (--faults='*:enable=0.25': each fault point active for the run\n"
    "with probability 1/4, an active point failing 5% of its hits); --faults=none: orders only.\n";

struct Config {
  uint64_t runs = 0;  // 0: unset
  double time = 0;    // seconds, 0: unset
  int jobs = 1;
  uint64_t seed = 1;
  int shard_k = 0, shard_n = 1;
  int timeout = 10;
  std::string strategy = "random";
  int depth = 3;
  std::string faults;         // the --faults spec ("" with --faults=none or --faults=)
  bool faults_given = false;  // --faults was given: every run gets `faults` as written
  std::string out = "rdmasan-fuzz";
  int shrink_time = 60;
  std::vector<std::string> options;  // rdmasan options for every run, "name=value"
  bool user_reorder = false;
  std::vector<std::vector<std::string>> roles;  // [0]: program (server); [1]: client
  bool uses_port = false;
};

absl::Status ParseFuzzArgs(int argc, char** argv, Config* c);

// The campaign's faults when --faults is not given (measured on the
// planted programs of tests/e2e/fuzz, see README "Fuzzing campaigns"):
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
