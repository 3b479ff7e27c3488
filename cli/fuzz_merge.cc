// cli/fuzz_merge: `rdmasan fuzz merge --out=DIR SHARD_DIR...`: joins the
// runs and findings of --shard=K/N campaigns of one campaign (the same
// settings) into DIR, each finding once (deduplicated by its key again),
// numbered in the order met.
//
// May not: merge campaigns whose settings differ, or write outside DIR.
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <map>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/fuzz_args.h"
#include "cli/fuzz_campaign.h"
#include "cli/usage.h"

namespace rdmasan::cli::fuzz {

int Merge(int argc, char** argv) {
  std::string out;
  std::vector<std::string> sources;
  for (int i = 0; i < argc; ++i) {
    absl::string_view a = argv[i];
    if (absl::ConsumePrefix(&a, "--out=")) {
      out = std::string(a);
    } else if (absl::StartsWith(a, "--")) {
      std::fprintf(stderr, "rdmasan: fuzz merge: unknown option '%s'\n%s", argv[i], FuzzUsageText().c_str());
      return kExitUsage;
    } else {
      sources.push_back(argv[i]);
    }
  }
  if (out.empty() || sources.empty()) {
    std::fprintf(stderr, "rdmasan: fuzz merge: needs --out=DIR and at least one campaign directory\n%s",
                 FuzzUsageText().c_str());
    return kExitUsage;
  }
  Json campaign;
  for (const std::string& src : sources) {
    std::string text;
    if (!ReadText(absl::StrCat(src, "/", kCampaignFile), &text)) {
      Say("merge: %s is not a campaign directory (no %s)", src, kCampaignFile);
      return 1;
    }
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_object()) {
      Say("merge: %s/%s is not a campaign file", src, kCampaignFile);
      return 1;
    }
    j.erase("shard");
    if (campaign.is_null()) {
      campaign = j;
    } else if (campaign != j) {
      Say("merge: %s is another campaign than %s (settings differ)", src, sources[0]);
      return 1;
    }
  }
  if (!MakeDir(out)) {
    Say("merge: cannot create %s: %s", out, strerror(errno));
    return 1;
  }
  std::string existing;
  if (ReadText(absl::StrCat(out, "/", kCampaignFile), &existing)) {
    Json j = Json::parse(existing, nullptr, false);
    if (j.is_object()) j.erase("shard");
    if (j != campaign) {
      Say("merge: %s holds another campaign", out);
      return 1;
    }
  }
  Json merged = campaign;
  merged["shard"] = "merged";
  WriteText(absl::StrCat(out, "/", kCampaignFile), merged.dump(2) + "\n");
  // Runs: one line per run index.
  std::map<uint64_t, std::string> runs;
  std::vector<std::string> dirs = sources;
  dirs.insert(dirs.begin(), out);
  for (const std::string& d : dirs) {
    std::string text;
    if (!ReadText(absl::StrCat(d, "/", kRunsFile), &text)) continue;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ');
      uint64_t i;
      if (f.size() > 1 && f[0] == "run" && absl::SimpleAtoi(f[1], &i)) runs.emplace(i, std::string(line));
    }
  }
  // Findings: each key once; numbers in the order met.
  absl::flat_hash_map<std::string, int> keys;
  std::vector<std::string> ids;
  int number = 0;
  auto copy_dir = [](const std::string& from, const std::string& to) {
    if (!MakeDir(to)) return false;
    for (const std::string& n : ListDir(from)) {
      std::string text;
      const std::string src = absl::StrCat(from, "/", n);
      struct stat st;
      if (lstat(src.c_str(), &st) != 0 || !S_ISREG(st.st_mode) || !ReadText(src, &text)) continue;
      WriteText(absl::StrCat(to, "/", n), text, (st.st_mode & 0111) ? 0755 : 0644);
    }
    return true;
  };
  const std::string tmp = absl::StrCat(out, "/.merge");
  if (!MakeDir(tmp)) {
    Say("merge: cannot create %s: %s", tmp, strerror(errno));
    return 1;
  }
  for (const std::string& d : dirs) {
    for (const std::string& name : ListDir(d)) {
      const std::string from = absl::StrCat(d, "/", name);
      size_t dash = name.find('-');
      int n = 0;
      std::string key;
      if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &n) ||
          !ReadText(from + "/key.txt", &key))
        continue;
      key = std::string(absl::StripTrailingAsciiWhitespace(key));
      if (keys.contains(key)) continue;
      keys[key] = ++number;
      const std::string id = absl::StrCat(number, "-", name.substr(dash + 1));
      ids.push_back(id);
      // Copy via a scratch name: the destination may be one of the sources.
      copy_dir(from, absl::StrCat(tmp, "/", id));
    }
  }
  // Replace the destination's findings with the merged set.
  for (const std::string& name : ListDir(out)) {
    size_t dash = name.find('-');
    int n = 0;
    if (dash == std::string::npos || !absl::SimpleAtoi(name.substr(0, dash), &n)) continue;
    const std::string d = absl::StrCat(out, "/", name);
    ClearDir(d);
    rmdir(d.c_str());
  }
  for (const std::string& id : ids) {
    const std::string from = absl::StrCat(tmp, "/", id);
    if (::rename(from.c_str(), absl::StrCat(out, "/", id).c_str()) != 0) {
      Say("merge: cannot move %s: %s", from, strerror(errno));
    }
  }
  rmdir(tmp.c_str());
  // (The finding ids in each run's line are its shard's numbering.)
  std::string runs_text;
  for (const auto& [i, line] : runs) absl::StrAppend(&runs_text, line, "\n");
  WriteText(absl::StrCat(out, "/", kRunsFile), runs_text);
  std::printf("rdmasan fuzz: %zu runs, %zu unique finding%s%s%s\n", runs.size(), ids.size(),
              ids.size() == 1 ? "" : "s", ids.empty() ? "" : ": ", absl::StrJoin(ids, ", ").c_str());
  return ids.empty() ? 0 : kExitFindings;
}

}  // namespace rdmasan::cli::fuzz
