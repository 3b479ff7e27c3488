// cli/fuzz_shrink: what a campaign does with a finding once the search
// ends: ddmin over the decisions of its logs (replayed with schedule=) to
// the fewest that still give the same finding, the numbered story of those
// decisions, one more run with text reports and a trace, and repro.sh, the
// one command that reproduces it.
//
// May not: run anything but the campaign's programs under the shim, take
// longer than --shrink_time over the replays, or write outside the
// finding's folder and the campaign's work folder.
#include <sys/stat.h>

#include <algorithm>
#include <regex>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "cli/fuzz_campaign.h"

namespace rdmasan::cli::fuzz {
namespace {

// A sentence for one decision-log line, from its note.
std::string StoryLine(absl::string_view line) {
  size_t hash = line.find('#');
  std::string note(absl::StripAsciiWhitespace(hash == absl::string_view::npos ? "" : line.substr(hash + 1)));
  std::smatch m;
  static const std::regex hold(R"(sched\.hold QP (\S+) (\S+) wr_id=(\S+) for (\d+) polls)");
  static const std::regex pick(
      R"(sched\.pick (?:\(pct\) )?QP (\S+) (\S+) wr_id=(\S+) released before (\d+) older)");
  static const std::regex wc(R"(wc\.error (\S+) on QP (\S+) wr_id=(\S+))");
  static const std::regex post(
      R"((post_send|post_recv|post_srq_recv) fails with (\S+) at WR (\d+) of the chain(.*))");
  if (std::regex_search(note, m, hold))
    return absl::StrCat("hold the ", m[2].str(), " completion of wr_id ", m[3].str(), " on QP ", m[1].str(),
                        " back for ", m[4].str(), m[4].str() == "1" ? " poll" : " polls");
  if (std::regex_search(note, m, pick))
    return absl::StrCat("release the ", m[2].str(), " completion of wr_id ", m[3].str(), " on QP ",
                        m[1].str(), " before ", m[4].str(), " older one", m[4].str() == "1" ? "" : "s",
                        " of other queues");
  if (std::regex_search(note, m, wc))
    return absl::StrCat("complete wr_id ", m[3].str(), " on QP ", m[2].str(), " with ", m[1].str(),
                        " (the QP goes to ERR, its later WRs are flushed)");
  if (std::regex_search(note, m, post))
    return absl::StrCat("make ibv_", m[1].str(), " fail with ", m[2].str(), " at WR ", m[3].str(),
                        " of the chain", m[4].str());
  std::string head(absl::StripAsciiWhitespace(line.substr(0, hash)));
  if (note.empty()) return absl::StrCat("decide ", head);
  return absl::StrCat("inject: ", note);
}

}  // namespace

void Campaign::WriteRepro(const Saved& s, const std::string& what) const {
  std::string sh =
      absl::StrCat("#!/bin/sh\n# rdmasan fuzz: reproduces finding ", s.number, "-", s.check,
                   " with one command, on a fresh softnic fabric:\n# it replays ", what,
                   ".\n# Exit status: the program's, or rdmasan's exitcode (66) when it reports.\n",
                   "here=$(cd \"$(dirname \"$0\")\" && pwd)\n", "fabric=repro-$$\n");
  if (c_.uses_port) absl::StrAppend(&sh, "port=${RDMASAN_PORT:-$((20000 + $$ % 20000))}\n");
  auto command = [&](int r) {
    std::string cmd = ShellWord(self_) + " run";
    for (const std::string& o : c_.options) absl::StrAppend(&cmd, " ", ShellWord("--" + o));
    absl::StrAppend(&cmd, " \"--softnic_fabric=$fabric\"", " --hang_timeout=", std::max(1, c_.timeout / 2));
    // A hung program reports and waits on: halting on the report ends it.
    if (s.check == "hang") absl::StrAppend(&cmd, " --halt_on_error=1");
    absl::StrAppend(&cmd, " \"--schedule=$here/", RolePrefix(r), "schedule.log\" --");
    for (const std::string& a : c_.roles[r]) absl::StrAppend(&cmd, " ", ShellWord(a));
    return cmd;
  };
  if (c_.roles.size() == 1) {
    absl::StrAppend(&sh, "exec ", command(0), "\n");
  } else {
    absl::StrAppend(&sh, command(0), " &\nserver=$!\n");
    if (c_.uses_port) {
      absl::StrAppend(
          &sh,
          "hex=$(printf ':%04X' \"$port\")\n"
          "i=0\n"
          "while [ $i -lt 200 ] && kill -0 $server 2>/dev/null && ! awk -v p=\"$hex\" "
          "'FNR > 1 && $4 == \"0A\" && substr($2, length($2) - 4) == p { f = 1 } END { exit !f }' "
          "/proc/net/tcp /proc/net/tcp6 2>/dev/null; do sleep 0.05; i=$((i + 1)); done\n");
    } else {
      absl::StrAppend(&sh, "sleep 0.3\n");
    }
    absl::StrAppend(&sh, command(1), "\nclient=$?\nwait $server\nserver=$?\n",
                    "[ $server -ne 0 ] && exit $server\nexit $client\n");
  }
  WriteText(s.dir + "/repro.sh", sh, 0755);
}

std::string Campaign::Story(const std::vector<std::pair<int, std::string>>& lines) const {
  std::string out;
  int n = 0;
  for (const auto& [r, line] : lines)
    absl::StrAppend(&out, ++n, ". ", c_.roles.size() > 1 ? absl::StrCat(RoleName(r), ": ") : "",
                    StoryLine(line), "\n");
  return out;
}

// ddmin over the decisions of a finding's logs: the fewest that, replayed
// with schedule=, still give the same finding (same dedup key).
void Campaign::Shrink(const Saved& s) {
  const auto deadline = Clock::now() + std::chrono::seconds(c_.shrink_time);
  std::vector<std::string> headers(c_.roles.size());
  std::vector<std::pair<int, std::string>> all;
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::string text;
    ReadText(absl::StrCat(s.dir, "/", RolePrefix(r), "decisions.log"), &text);
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      if (absl::StartsWith(line, "#")) {
        if (!absl::StartsWith(line, "# reached")) absl::StrAppend(&headers[r], line, "\n");
      } else {
        all.emplace_back(static_cast<int>(r), std::string(line));
      }
    }
  }
  const std::string sched_dir = absl::StrCat(work_, "/schedules");
  MakeDir(sched_dir);
  auto write_logs = [&](const std::vector<std::pair<int, std::string>>& subset, const std::string& where) {
    for (size_t r = 0; r < c_.roles.size(); ++r) {
      std::string text = headers[r];
      for (const auto& [rr, line] : subset)
        if (rr == static_cast<int>(r)) absl::StrAppend(&text, line, "\n");
      WriteText(absl::StrCat(where, "/", RolePrefix(r), "schedule.log"), text);
    }
  };
  int tests = 0;
  auto test = [&](const std::vector<std::pair<int, std::string>>& subset) {
    ++tests;
    write_logs(subset, sched_dir);
    Plan p;
    p.index = 0;
    for (size_t r = 0; r < c_.roles.size(); ++r)
      p.decide.push_back({absl::StrCat("schedule=", sched_dir, "/", RolePrefix(r), "schedule.log")});
    Outcome o = RunSync(p);
    for (const RunFinding& f : o.findings())
      if (f.key == s.key) return true;
    return false;
  };
  std::vector<std::pair<int, std::string>> cur = all;
  bool reproduced = false;
  for (int i = 0; i < 3 && !reproduced && !g_interrupted; ++i) reproduced = test(cur);
  std::string note;
  if (!reproduced) {
    note =
        absl::StrCat("its ", all.size(),
                     " decisions replayed did not give the finding again (3 tries): it depends on timing as "
                     "well; repro.sh replays them all");
  } else if (test({})) {
    cur.clear();
  } else {
    // ddmin (Zeller and Hildebrandt): try halves, then complements, then
    // finer partitions.
    size_t n = 2;
    while (cur.size() >= 2 && Clock::now() < deadline && !g_interrupted) {
      const size_t chunk = (cur.size() + n - 1) / n;
      bool reduced = false;
      for (size_t start = 0; start < cur.size() && !reduced && Clock::now() < deadline; start += chunk) {
        std::vector<std::pair<int, std::string>> part(cur.begin() + start,
                                                      cur.begin() + std::min(cur.size(), start + chunk));
        if (part.size() < cur.size() && test(part)) {
          cur = part;
          n = 2;
          reduced = true;
        }
      }
      for (size_t start = 0; start < cur.size() && !reduced && n > 2 && Clock::now() < deadline;
           start += chunk) {
        std::vector<std::pair<int, std::string>> comp(cur.begin(), cur.begin() + start);
        comp.insert(comp.end(), cur.begin() + std::min(cur.size(), start + chunk), cur.end());
        if (test(comp)) {
          cur = comp;
          n = std::max<size_t>(n - 1, 2);
          reduced = true;
        }
      }
      if (reduced) continue;
      if (n >= cur.size()) break;
      n = std::min(cur.size(), 2 * n);
    }
    if (Clock::now() >= deadline) note = absl::StrCat("--shrink_time=", c_.shrink_time, " s ran out");
  }
  write_logs(cur, s.dir);
  std::string story =
      cur.empty() && reproduced
          ? "No decision is needed: the program fails this way in the natural order, with no fault.\n"
          : Story(cur);
  std::string found;
  ReadText(s.dir + "/found.txt", &found);
  std::vector<std::string> flines = absl::StrSplit(found, '\n');
  absl::StrAppend(&story, "=> ", flines.size() > 1 ? flines[1] : s.check, "\n");
  if (!note.empty()) absl::StrAppend(&story, "(", note, ")\n");
  WriteText(s.dir + "/story.txt", story);
  WriteRepro(s, reproduced ? absl::StrCat(c_.roles.size() > 1 ? "server.schedule.log and client.schedule.log"
                                                              : "schedule.log",
                                          ": ", cur.size(), " of the run's ", all.size(),
                                          " decisions, shrunk by ddmin")
                           : "the run's full decision log");
  // Once more with text reports and a trace, as a user will see it.
  Plan p;
  p.index = 0;
  for (size_t r = 0; r < c_.roles.size(); ++r)
    p.decide.push_back({absl::StrCat("schedule=", s.dir, "/", RolePrefix(r), "schedule.log")});
  RunSync(p, /*text=*/true, s.dir + "/");
  std::string report;
  for (size_t r = 0; r < c_.roles.size(); ++r) {
    std::string out;
    ReadText(absl::StrCat(work_, "/shrink/", RolePrefix(r), "out"), &out);
    if (c_.roles.size() > 1) absl::StrAppend(&report, "== ", RoleName(r), " ==\n");
    absl::StrAppend(&report, out);
  }
  WriteText(s.dir + "/report.txt", report);
  const bool shown = absl::StrContains(report, absl::StrCat("rdmasan: ", s.check, ":"));
  WriteText(s.dir + "/shrunk.txt",
            absl::StrFormat("decisions %d of %d\nreplays %d\nreproduced %s\nreport %s\n", cur.size(),
                            all.size(), tests, reproduced ? "yes" : "no", shown ? "yes" : "no"));
  if (progress_shown_ && tty_) std::fputs("\r\033[K", stderr);
  Say("%d-%s: %s to %zu decision%s (%d replays): %s/repro.sh\n%s", s.number, s.check,
      reproduced ? "shrunk" : "not reproduced by replay; kept", cur.size(), cur.size() == 1 ? "" : "s", tests,
      s.dir, story);
}

}  // namespace rdmasan::cli::fuzz
