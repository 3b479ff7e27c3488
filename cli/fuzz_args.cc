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
         name == "softnic_fabric" || name == "trace" || name == "hang_timeout" || name == "help" ||
         name == "symbol_cache";
}

// The parsers of the table's value types.  Each returns true if `v` is a
// value its row allows (then *out holds it); else false, with *why set
// when the value's own parser says more than the row's `expected` column.
template <typename Int>
bool ParseFlag(absl::string_view v, absl::string_view allowed, Int* out, std::string*) {
  std::vector<absl::string_view> range = absl::StrSplit(allowed, "..");
  int64_t lo = 0, hi = 0, n = 0;
  if (range.size() != 2 || !absl::SimpleAtoi(range[0], &lo) || !absl::SimpleAtoi(range[1], &hi)) return false;
  if (!absl::SimpleAtoi(v, &n) || n < lo || n > hi) return false;
  *out = static_cast<Int>(n);
  return true;
}

bool ParseFlag(absl::string_view v, absl::string_view allowed, double* out, std::string*) {
  double d = 0;
  if (allowed != ">0" || !absl::SimpleAtod(v, &d) || !(d > 0)) return false;
  *out = d;
  return true;
}

bool ParseFlag(absl::string_view v, absl::string_view allowed, std::string* out, std::string*) {
  bool good = false;
  if (allowed == "<dir>") {
    good = !v.empty();
  } else {
    for (absl::string_view choice : absl::StrSplit(allowed, '|')) good |= v == choice;
  }
  if (good) *out = std::string(v);
  return good;
}

bool ParseFlag(absl::string_view v, absl::string_view, Shard* out, std::string* why) {
  std::vector<absl::string_view> kn = absl::StrSplit(v, '/');
  int total = 0, k = 0;
  if (kn.size() != 2 || !ParseFlag(kn[1], "1..1048576", &total, why) ||
      !ParseFlag(kn[0], absl::StrCat("0..", total - 1), &k, why))
    return false;
  *out = {k, total};
  return true;
}

bool ParseFlag(absl::string_view v, absl::string_view, FaultsFlag* out, std::string* why) {
  out->given = true;
  if (v == "none" || v.empty()) {
    out->spec.clear();
    return true;
  }
  if (auto spec = core::ParseFaultSpec(v); !spec.ok()) {
    *why = std::string(spec.status().message());
    return false;
  }
  out->spec = std::string(v);
  return true;
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
    std::string why;
#define RDMASAN_FUZZ_FLAG(type, flag, dflt, allowed, value_name, expected, help) \
  if (name == #flag) {                                                           \
    if (!ParseFlag(value, allowed, &c->flag, &why))                              \
      return bad(why.empty() ? absl::StrCat("expected ", expected) : why);       \
    continue;                                                                    \
  }
#include "cli/fuzz_flags.inc"
#undef RDMASAN_FUZZ_FLAG
    // Not the campaign's: an rdmasan option for every run.
    if (CampaignOwned(name))
      return bad("the campaign sets this option for each run itself (see `rdmasan fuzz --help`)");
    CommandLine one;
    char* single[] = {argv[i]};
    RDMASAN_RETURN_IF_ERROR(ParseCommandLine(1, single, &one));
    for (std::string& o : one.options) c->options.push_back(std::move(o));
    if (name == "reorder") c->user_reorder = true;
  }
  if (c->strategy != "pct" && c->depth != Config().depth)
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
  if (c.faults.given) return c.faults.spec;
  return index % kOrderOnlyEvery == 0 ? "" : kDefaultFaults;
}

std::string DescribeFaults(const Config& c) {
  if (c.faults.given) return c.faults.spec;
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
