// cli/fuzz_campaign: one `rdmasan fuzz` campaign: its runs (planned,
// spawned under the shim, stepped, analyzed), its findings (deduplicated,
// saved, shrunk) and its directory.  fuzz.cc holds the runs and findings,
// fuzz_shrink.cc the shrinking of a finding's decisions and its repro.sh,
// fuzz_merge.cc the merge of shards.
//
// May not: interpret the shim's options beyond what it sets per run, run
// anything but the given programs (under the shim) and their repro.sh, leave
// children behind (each run is its own process group, killed at the end),
// or write outside the campaign directory.
#ifndef RDMASAN_CLI_FUZZ_CAMPAIGN_H_
#define RDMASAN_CLI_FUZZ_CAMPAIGN_H_

#include <sys/types.h>

#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "cli/fuzz_args.h"
#include "cli/fuzz_util.h"

namespace rdmasan::cli::fuzz {

// What one run showed that the campaign keeps: a report of the shim, a
// crash or a hang, keyed for deduplication (core::Finding is the report
// itself, inside the run).
struct RunFinding {
  std::string check;
  std::string key;      // check id and top frames: the dedup key
  std::string where;    // "file.c:12 in fn"
  std::string message;  // the report's first line
  std::string json;     // the report as the shim wrote it ("" if made up here)
  int role = 0;
};

// One planned run: the options that decide its schedule, per role.
struct Plan {
  uint64_t index = 0;
  uint64_t seed = 0;
  std::vector<std::vector<std::string>> decide;
  std::string what;  // enumerate: the one fault
};

struct Proc {
  pid_t pid = -1;
  bool started = false, done = false;
  int status = 0;
  bool hang_killed = false;  // ended by us once the shim had reported a hang
};

// A run in flight.
struct Exec {
  Plan plan;
  int slot = 0;
  std::string work;
  int port = 0;
  bool text = false;         // text reports to the program's stderr (confirm runs)
  std::string trace_prefix;  // confirm runs: record traces here
  std::vector<Proc> procs;
  Clock::time_point start, deadline;
  bool term_sent = false, kill_sent = false;
  Clock::time_point kill_at;
  Clock::time_point next_look;  // for the shim's hang report in the logs
  bool peer_failed = false;
};

struct RoleOutcome {
  std::string status;   // "0", "1", "SIGSEGV", "timeout"
  bool failed = false;  // exited non-zero, or died of a signal not ours
  std::vector<RunFinding> findings;
  std::string hang_discounted;
};

struct Outcome {
  std::vector<RoleOutcome> roles;
  double seconds = 0;
  std::vector<RunFinding> findings() const {
    std::vector<RunFinding> all;
    for (const RoleOutcome& r : roles) all.insert(all.end(), r.findings.begin(), r.findings.end());
    return all;
  }
};

// A finding's directory, as saved.
struct Saved {
  int number = 0;
  std::string dir;  // DIR/<n>-<check>
  std::string key, check;
};

class Campaign {
 public:
  explicit Campaign(Config c) : c_(std::move(c)) {}
  int Main();

 private:
  const char* RoleName(int r) const { return c_.roles.size() == 1 ? "" : (r == 0 ? "server" : "client"); }
  std::string RolePrefix(int r) const { return c_.roles.size() == 1 ? "" : absl::StrCat(RoleName(r), "."); }
  uint64_t RunSeed(uint64_t i) const { return Mix(c_.seed * 0x100000001b3ull + i) & 0x7fffffff; }
  uint64_t RoleSeed(uint64_t seed, int r) const { return r == 0 ? seed : Mix(seed ^ 0xc1e47) & 0x7fffffff; }

  bool Setup();
  bool CheckCampaignFile();
  Plan MakePlan(uint64_t i) const;
  bool Enumerate();
  int FreePort();
  std::vector<std::string> RoleOptions(const Exec& e, int r) const;
  void Spawn(Exec& e, int r);
  void Start(Exec& e);
  bool Step(Exec& e);
  void KillAll(Exec& e);
  Outcome Analyze(const Exec& e);
  Outcome RunSync(Plan plan, bool text = false, const std::string& trace_prefix = "");
  void Record(const Exec& e, const Outcome& o);
  void SaveFinding(const Exec& e, const RunFinding& f, const Outcome& o);
  void WriteRepro(const Saved& s, const std::string& header) const;
  void Shrink(const Saved& s);
  std::string Story(const std::vector<std::pair<int, std::string>>& lines) const;
  void LoadState();
  void Progress(bool force);
  int Finish();

  Config c_;
  std::string dir_, work_, self_, token_;
  // enumerate: (role, fault) per run index
  std::vector<std::pair<int, std::string>> enumeration_;
  absl::flat_hash_set<uint64_t> done_;
  uint64_t runs_done_ = 0, runs_now_ = 0;
  std::vector<Saved> saved_;
  absl::flat_hash_map<std::string, int> keys_;
  std::set<int> ports_in_use_;
  Clock::time_point started_ = Clock::now();
  Clock::time_point last_progress_ = started_;
  bool tty_ = false;
  bool progress_shown_ = false;
  int setup_status_ = 1;
};

// `rdmasan fuzz merge --out=DIR SHARD_DIR...` (fuzz_merge.cc).
int Merge(int argc, char** argv);

}  // namespace rdmasan::cli::fuzz

#endif  // RDMASAN_CLI_FUZZ_CAMPAIGN_H_
