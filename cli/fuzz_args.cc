// cli/fuzz_args: see fuzz_args.h.
#include "cli/fuzz_args.h"

#include <limits.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/cli.h"
#include "cli/fuzz_util.h"
#include "core/decision.h"
#include "core/status.h"

namespace rdmasan::cli::fuzz {
namespace {

// Options the campaign sets itself for each run.
bool CampaignOwned(absl::string_view name) {
  return name == "schedule" || name == "decision_log" || name == "log_path" || name == "report_format" ||
         name == "softnic_fabric" || name == "trace" || name == "hang_timeout" || name == "help";
}

bool ParseInt(absl::string_view v, int64_t lo, int64_t hi, int64_t* out) {
  return absl::SimpleAtoi(v, out) && *out >= lo && *out <= hi;
}

}  // namespace

absl::Status ParseFuzzArgs(int argc, char** argv, Config* c) {
  int i = 0;
  for (; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (!absl::StartsWith(arg, "--")) break;
    absl::string_view body = arg.substr(2);
    size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    absl::string_view value = eq == absl::string_view::npos ? "" : body.substr(eq + 1);
    auto bad = [&](absl::string_view why) {
      return absl::InvalidArgumentError(absl::StrFormat("fuzz: option '%s': %s", arg, why));
    };
    int64_t n = 0;
    if (name == "runs") {
      if (!ParseInt(value, 1, int64_t(1) << 40, &n)) return bad("expected a number of runs >= 1");
      c->runs = static_cast<uint64_t>(n);
    } else if (name == "time") {
      if (!absl::SimpleAtod(value, &c->time) || !(c->time > 0)) return bad("expected seconds > 0");
    } else if (name == "jobs") {
      if (!ParseInt(value, 1, 256, &n)) return bad("expected 1..256");
      c->jobs = static_cast<int>(n);
    } else if (name == "seed") {
      if (!ParseInt(value, 0, INT64_MAX, &n)) return bad("expected a number >= 0");
      c->seed = static_cast<uint64_t>(n);
    } else if (name == "shard") {
      std::vector<absl::string_view> kn = absl::StrSplit(value, '/');
      int64_t k = 0, total = 0;
      if (kn.size() != 2 || !ParseInt(kn[1], 1, 1 << 20, &total) || !ParseInt(kn[0], 0, total - 1, &k))
        return bad("expected K/N with 0 <= K < N (shards count from 0, as a Kubernetes indexed Job does)");
      c->shard_k = static_cast<int>(k);
      c->shard_n = static_cast<int>(total);
    } else if (name == "timeout") {
      if (!ParseInt(value, 1, 86400, &n)) return bad("expected seconds, 1..86400");
      c->timeout = static_cast<int>(n);
    } else if (name == "strategy") {
      if (value != "random" && value != "pct" && value != "enumerate")
        return bad("expected random, pct or enumerate");
      c->strategy = std::string(value);
    } else if (name == "depth") {
      if (!ParseInt(value, 1, 16, &n)) return bad("expected 1..16");
      c->depth = static_cast<int>(n);
    } else if (name == "faults") {
      c->faults_given = true;
      if (value == "none" || value.empty()) {
        c->faults.clear();
        continue;
      }
      if (auto spec = core::ParseFaultSpec(value); !spec.ok()) return bad(spec.status().message());
      c->faults = std::string(value);
    } else if (name == "out") {
      if (value.empty()) return bad("expected a directory");
      c->out = std::string(value);
    } else if (name == "shrink_time") {
      if (!ParseInt(value, 0, 86400, &n)) return bad("expected seconds, 0..86400");
      c->shrink_time = static_cast<int>(n);
    } else {
      if (CampaignOwned(name))
        return bad("the campaign sets this option for each run itself (see `rdmasan fuzz --help`)");
      CommandLine one;
      char* single[] = {argv[i]};
      RDMASAN_RETURN_IF_ERROR(ParseCommandLine(1, single, &one));
      for (std::string& o : one.options) c->options.push_back(std::move(o));
      if (name == "reorder") c->user_reorder = true;
    }
  }
  if (c->strategy != "pct" && c->depth != 3)
    for (int j = 0; j < i; ++j)
      if (absl::StartsWith(argv[j], "--depth="))
        return absl::InvalidArgumentError("fuzz: --depth applies to --strategy=pct only");
  std::vector<std::string> role;
  for (; i < argc; ++i) {
    if (absl::string_view(argv[i]) == "---") {
      c->roles.push_back(std::move(role));
      role.clear();
      continue;
    }
    role.push_back(argv[i]);
    if (absl::StrContains(argv[i], "{port}")) c->uses_port = true;
  }
  c->roles.push_back(std::move(role));
  if (c->roles.size() > 2) return absl::InvalidArgumentError("fuzz: at most one '---' (server --- client)");
  for (const auto& r : c->roles)
    if (r.empty()) return absl::InvalidArgumentError("fuzz: no program given");
  return absl::OkStatus();
}

std::string RunFaults(const Config& c, uint64_t index) {
  if (c.faults_given) return c.faults;
  return index % kOrderOnlyEvery == 0 ? "" : kDefaultFaults;
}

std::string DescribeFaults(const Config& c) {
  if (c.faults_given) return c.faults;
  return absl::StrCat("default: run i % ", kOrderOnlyEvery, " == 0 orders only, the others ", kDefaultFaults);
}

std::string FindProgram(const std::string& prog) {
  if (prog.find('/') != std::string::npos) return access(prog.c_str(), X_OK) == 0 ? Absolute(prog) : "";
  const char* path = getenv("PATH");
  for (absl::string_view dir : absl::StrSplit(path ? path : "/usr/bin:/bin", ':')) {
    std::string full = absl::StrCat(dir.empty() ? "." : dir, "/", prog);
    struct stat st;
    if (stat(full.c_str(), &st) == 0 && S_ISREG(st.st_mode) && access(full.c_str(), X_OK) == 0) return prog;
  }
  return "";
}

}  // namespace rdmasan::cli::fuzz
