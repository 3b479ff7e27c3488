#include "core/report.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/checks.h"
#include "core/options.h"
#include "core/stack.h"

namespace rdmasan::core {
namespace {

std::vector<Frame> MainFrames() {
  Frame a;
  a.pc = 0x55d0c0a1b2c3;
  a.function = "teardown";
  a.file = "/src/app/client.c";
  a.line = 88;
  a.module = "/usr/bin/client";
  a.module_offset = 0x12c3;
  Frame b = a;
  b.pc = 0x55d0c0a1b400;
  b.function = "main";
  b.line = 120;
  return {a, b};
}

std::vector<Frame> PostFrames() {
  Frame f;
  f.pc = 0x55d0c0a1b111;
  f.function = "send_chunk";
  f.file = "/src/app/client.c";
  f.line = 61;
  f.module = "/usr/bin/client";
  f.module_offset = 0x1111;
  return {f};
}

Finding DeregFinding(StackId stack = 101) {
  return Finding{CheckId::kDeregInFlight,
                 "MR 0x7 (lkey 0x1207) deregistered with 1 outstanding WR on QP 0x11",
                 stack,
                 {{StackKind::kPosted, "outstanding WR wr_id=0x2a RDMA_WRITE posted at", 102}}};
}

struct Captured {
  std::string text;
  Reporter::Sink Sink() {
    return [this](absl::string_view s) { text.append(s.data(), s.size()); };
  }
};

std::string TempDir() {
  char tmpl[] = "/tmp/rdmasan_report_test.XXXXXX";
  const char* dir = mkdtemp(tmpl);
  return dir ? dir : "/tmp";
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

size_t CountOf(const std::string& hay, const std::string& needle) {
  size_t n = 0;
  for (size_t at = hay.find(needle); at != std::string::npos; at = hay.find(needle, at + 1)) ++n;
  return n;
}

TEST(Checks, NamesAndProperties) {
  EXPECT_STREQ(CheckName(CheckId::kSqOverflow), "sq-overflow");
  EXPECT_EQ(CheckSeverity(CheckId::kUnsignaledRun), Severity::kWarning);
  EXPECT_FALSE(CheckDefaultOn(CheckId::kWrIdDuplicate));
  EXPECT_TRUE(CheckDefaultOn(CheckId::kDeregInFlight));
  EXPECT_NE(std::string(CheckDescription(CheckId::kCqOverrun)).find("cqe"), std::string::npos);
  EXPECT_EQ(CheckByName("free-in-flight"), CheckId::kFreeInFlight);
  EXPECT_EQ(CheckByName("nope"), std::nullopt);
  for (size_t i = 0; i < kNumChecks; ++i)
    EXPECT_EQ(CheckByName(CheckName(static_cast<CheckId>(i))), static_cast<CheckId>(i));
}

TEST(Checks, ParseCheckSets) {
  CheckSet s;
  EXPECT_FALSE(s.Enabled(CheckId::kWrIdDuplicate));
  ASSERT_TRUE(CheckSet::Parse("all,-wr-id-duplicate", &s).ok());
  EXPECT_EQ(s.Count(), kNumChecks - 1);
  EXPECT_FALSE(s.Enabled(CheckId::kWrIdDuplicate));
  ASSERT_TRUE(CheckSet::Parse("sq-overflow,cq-overrun", &s).ok());
  EXPECT_EQ(s.Count(), 2u);
  EXPECT_TRUE(s.Enabled(CheckId::kSqOverflow));
  EXPECT_TRUE(s.Enabled(CheckId::kCqOverrun));
  ASSERT_TRUE(CheckSet::Parse("-unsignaled-run;+wr-id-duplicate", &s).ok());
  EXPECT_FALSE(s.Enabled(CheckId::kUnsignaledRun));
  EXPECT_TRUE(s.Enabled(CheckId::kWrIdDuplicate));
  EXPECT_TRUE(s.Enabled(CheckId::kSqOverflow));
  // Nothing named, or an empty item, is a mistake to say, not a default.
  EXPECT_FALSE(CheckSet::Parse("", &s).ok());
  EXPECT_FALSE(CheckSet::Parse("sq-overflow,", &s).ok());
  EXPECT_FALSE(CheckSet::Parse("sq-overflow,,cq-overrun", &s).ok());
  EXPECT_FALSE(CheckSet::Parse(";", &s).ok());
  ASSERT_TRUE(CheckSet::Parse("default", &s).ok());
  EXPECT_EQ(s, CheckSet::Defaults());
  ASSERT_TRUE(CheckSet::Parse("none", &s).ok());
  EXPECT_EQ(s.Count(), 0u);
  absl::Status status = CheckSet::Parse("all,-no-such-check", &s);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  EXPECT_EQ(status.message(), "checks: unknown check id 'no-such-check' (rdmasan checks lists them)");
  EXPECT_EQ(s.Count(), 0u) << "a failed parse leaves the set alone";
}

TEST(Checks, NewOptionsParse) {
  Options o;
  EXPECT_EQ(o.exitcode, 66);
  EXPECT_FALSE(o.halt_on_error);
  EXPECT_EQ(o.report_format, "text");
  absl::Status status =
      ParseOptions("halt_on_error=1:exitcode=3:report_format=json:checks=all;-wr-id-duplicate", &o);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_TRUE(o.halt_on_error);
  EXPECT_EQ(o.exitcode, 3);
  EXPECT_EQ(o.checks, "all;-wr-id-duplicate");
  for (const char* name : {"halt_on_error", "exitcode", "log_path", "report_format", "suppressions", "checks",
                           "strip_path_prefix"})
    EXPECT_NE(OptionsHelp().find(name), std::string::npos) << name;
}

TEST(Render, TextHasTheSanitizerShape) {
  Finding f = DeregFinding();
  std::string text = RenderText(f, MainFrames(), {PostFrames()}, 4242);
  EXPECT_EQ(text,
            "==4242==ERROR: rdmasan: dereg-in-flight: MR 0x7 (lkey 0x1207) deregistered with 1 outstanding "
            "WR on QP 0x11\n"
            "    #0 0x55d0c0a1b2c3 in teardown /src/app/client.c:88\n"
            "    #1 0x55d0c0a1b400 in main /src/app/client.c:120\n"
            "  outstanding WR wr_id=0x2a RDMA_WRITE posted at:\n"
            "    #0 0x55d0c0a1b111 in send_chunk /src/app/client.c:61\n"
            "SUMMARY: rdmasan: dereg-in-flight client.c:88 in teardown\n");
}

TEST(Render, WarningsUnknownFramesAndEmptyStacks) {
  Finding f{
      CheckId::kUnsignaledRun, "run of 9 unsignaled WRs", 0, {{StackKind::kCreated, "QP created at", 0}}};
  Frame lib;
  lib.pc = 0x7f0000001000;
  lib.module = "/lib/libx.so";
  lib.module_offset = 0x1000;
  Frame none;
  none.pc = 0x10;
  std::string text = RenderText(f, {lib, none}, {{}}, 7);
  EXPECT_EQ(text,
            "==7==WARNING: rdmasan: unsignaled-run: run of 9 unsignaled WRs\n"
            "    #0 0x7f0000001000 (/lib/libx.so+0x1000)\n"
            "    #1 0x10 (<unknown>)\n"
            "  QP created at:\n"
            "    <empty stack>\n"
            "SUMMARY: rdmasan: unsignaled-run (/lib/libx.so+0x1000)\n");
  EXPECT_EQ(RenderSummaryLine(f, {}), "SUMMARY: rdmasan: unsignaled-run");
}

TEST(Render, JsonIsOneObjectPerLine) {
  Finding f = DeregFinding();
  f.message = "quote \" and backslash \\ and\nnewline";
  std::string json = RenderJson(f, MainFrames(), {PostFrames()}, 4242);
  ASSERT_FALSE(json.empty());
  EXPECT_EQ(json.back(), '\n');
  EXPECT_EQ(CountOf(json, "\n"), 1u);
  EXPECT_EQ(json.front(), '{');
  EXPECT_EQ(json[json.size() - 2], '}');
  EXPECT_EQ(CountOf(json, "{"), CountOf(json, "}"));
  EXPECT_EQ(CountOf(json, "["), CountOf(json, "]"));
  EXPECT_NE(json.find("\"check\":\"dereg-in-flight\""), std::string::npos) << json;
  EXPECT_NE(json.find("\"severity\":\"error\""), std::string::npos);
  EXPECT_NE(json.find("\"message\":\"quote \\\" and backslash \\\\ and\\nnewline\""), std::string::npos)
      << json;
  EXPECT_NE(
      json.find(
          "{\"pc\":\"0x55d0c0a1b2c3\",\"function\":\"teardown\",\"file\":\"/src/app/client.c\",\"line\":88,"
          "\"module\":\"/usr/bin/client\",\"offset\":\"0x12c3\"}"),
      std::string::npos)
      << json;
  EXPECT_NE(json.find("\"related\":[{\"label\":\"outstanding WR wr_id=0x2a RDMA_WRITE posted "
                      "at\",\"kind\":\"posted\",\"stack\":[{"),
            std::string::npos)
      << json;
}

TEST(Render, SarifLog) {
  std::vector<RenderedFinding> findings = {{DeregFinding(), MainFrames(), {PostFrames()}}};
  std::string sarif = RenderSarif(findings);
  EXPECT_NE(sarif.find("\"version\": \"2.1.0\""), std::string::npos);
  EXPECT_EQ(sarif.back(), '\n');
  const nlohmann::json log = nlohmann::json::parse(sarif);
  EXPECT_EQ(log["$schema"], "https://json.schemastore.org/sarif-2.1.0.json");
  ASSERT_EQ(log["runs"].size(), 1u);
  const nlohmann::json& run = log["runs"][0];
  EXPECT_EQ(run["tool"]["driver"]["name"], "rdmasan");
  const nlohmann::json& rules = run["tool"]["driver"]["rules"];
  ASSERT_EQ(rules.size(), kNumChecks);
  for (size_t i = 0; i < kNumChecks; ++i) {
    const CheckId c = static_cast<CheckId>(i);
    EXPECT_EQ(rules[i]["id"], CheckName(c));
    EXPECT_EQ(rules[i]["shortDescription"]["text"], CheckDescription(c));
    EXPECT_EQ(rules[i]["defaultConfiguration"]["enabled"], CheckDefaultOn(c));
  }
  EXPECT_EQ(CountOf(sarif, "\"ruleId\""), 1u);
  ASSERT_EQ(run["results"].size(), 1u);
  const nlohmann::json& result = run["results"][0];
  EXPECT_EQ(result["ruleId"], "dereg-in-flight");
  EXPECT_EQ(result["ruleIndex"], static_cast<size_t>(CheckId::kDeregInFlight));
  EXPECT_EQ(result["level"], "error");
  EXPECT_EQ(result["message"]["text"], DeregFinding().message);
  EXPECT_EQ(result["locations"][0]["physicalLocation"],
            nlohmann::json::parse(
                R"({"artifactLocation":{"uri":"file:///src/app/client.c"},"region":{"startLine":88}})"))
      << sarif;
  EXPECT_EQ(result["locations"][0]["logicalLocations"][0]["fullyQualifiedName"], "teardown");
  ASSERT_EQ(result["relatedLocations"].size(), 1u);
  EXPECT_EQ(result["relatedLocations"][0]["id"], 0);
  EXPECT_EQ(result["relatedLocations"][0]["physicalLocation"]["region"]["startLine"], 61);
  ASSERT_EQ(result["stacks"].size(), 2u);
  EXPECT_EQ(result["stacks"][0]["frames"].size(), 2u);
  EXPECT_EQ(result["stacks"][0]["frames"][0]["address"]["absoluteAddress"], 0x55d0c0a1b2c3u);
  EXPECT_EQ(result["stacks"][1]["message"]["text"], "outstanding WR wr_id=0x2a RDMA_WRITE posted at");
  // Keys in SARIF's usual order.
  EXPECT_LT(sarif.find("\"$schema\""), sarif.find("\"version\""));
  EXPECT_LT(sarif.find("\"version\""), sarif.find("\"runs\""));
  EXPECT_LT(sarif.find("\"tool\""), sarif.find("\"results\""));
  EXPECT_LT(sarif.find("\"ruleId\""), sarif.find("\"stacks\""));
  std::string empty = RenderSarif({});
  EXPECT_NE(empty.find("\"results\": []"), std::string::npos) << empty;
  EXPECT_TRUE(nlohmann::json::parse(empty)["runs"][0]["results"].empty());
}

TEST(Render, SarifFrameWithModuleOnly) {
  Frame lib;
  lib.pc = 0x7f0000001000;
  lib.module = "/lib/libx.so";
  lib.module_offset = 0x1000;
  std::vector<RenderedFinding> findings = {{Finding{CheckId::kUnsignaledRun, "run", 1, {}}, {lib}, {}}};
  const nlohmann::json result = nlohmann::json::parse(RenderSarif(findings))["runs"][0]["results"][0];
  EXPECT_EQ(result["level"], "warning");
  EXPECT_EQ(result["locations"][0]["physicalLocation"],
            nlohmann::json::parse(
                R"({"artifactLocation":{"uri":"file:///lib/libx.so"},"address":{"relativeAddress":4096}})"));
  EXPECT_FALSE(result["locations"][0].contains("logicalLocations"));
  EXPECT_FALSE(result.contains("relatedLocations"));
}

// Strings the program being watched controls: quotes, backslashes, control
// characters and UTF-8 (here "é" and "→").
const char kOddFunction[] = "ns::op\"()\\ \t\x01 caf\xc3\xa9";
const char kOddFile[] = "/src/dir \"q\"\\x/\xe2\x86\x92\n.c";
const char kOddMessage[] =
    "quote \" backslash \\ newline\n tab\t ctl\x01\x1f del\x7f utf8 \xc3\xa9\xe2\x86\x92";
const char kOddLabel[] = "label \"x\"\r\n";

Finding OddFinding() {
  return Finding{CheckId::kDeregInFlight, kOddMessage, 7, {{StackKind::kCreated, kOddLabel, 8}}};
}

std::vector<Frame> OddFrames() {
  std::vector<Frame> frames = MainFrames();
  frames[0].function = kOddFunction;
  frames[0].file = kOddFile;
  frames[0].module = kOddFile;
  return frames;
}

// SARIF URIs are percent-encoded.
std::string PercentDecode(const std::string& uri) {
  std::string out;
  for (size_t i = 0; i < uri.size(); ++i) {
    if (uri[i] == '%' && i + 2 < uri.size()) {
      out.push_back(static_cast<char>(std::stoi(uri.substr(i + 1, 2), nullptr, 16)));
      i += 2;
    } else {
      out.push_back(uri[i]);
    }
  }
  return out;
}

TEST(Render, JsonEscapesWhatTheProgramControls) {
  std::string line = RenderJson(OddFinding(), OddFrames(), {OddFrames()}, 1);
  EXPECT_EQ(CountOf(line, "\n"), 1u) << "still one line: " << line;
  EXPECT_EQ(line.find('\x01'), std::string::npos) << "control characters are escaped";
  const nlohmann::json j = nlohmann::json::parse(line);
  EXPECT_EQ(j["message"], kOddMessage);
  EXPECT_EQ(j["stack"][0]["function"], kOddFunction);
  EXPECT_EQ(j["stack"][0]["file"], kOddFile);
  EXPECT_EQ(j["stack"][0]["module"], kOddFile);
  EXPECT_EQ(j["related"][0]["label"], kOddLabel);
  EXPECT_EQ(j["related"][0]["stack"][0]["function"], kOddFunction);
  EXPECT_NE(line.find("caf\xc3\xa9"), std::string::npos) << "UTF-8 is kept as it is, not \\u-escaped";
}

TEST(Render, SarifEscapesWhatTheProgramControls) {
  std::string sarif = RenderSarif({{OddFinding(), OddFrames(), {OddFrames()}}});
  const nlohmann::json result = nlohmann::json::parse(sarif)["runs"][0]["results"][0];
  EXPECT_EQ(result["message"]["text"], kOddMessage);
  const nlohmann::json& loc = result["locations"][0];
  EXPECT_EQ(loc["logicalLocations"][0]["fullyQualifiedName"], kOddFunction);
  EXPECT_EQ(PercentDecode(loc["physicalLocation"]["artifactLocation"]["uri"]),
            std::string("file://") + kOddFile);
  EXPECT_EQ(result["relatedLocations"][0]["message"]["text"], kOddLabel);
  EXPECT_EQ(result["stacks"][0]["message"]["text"], kOddMessage);
  EXPECT_EQ(result["stacks"][1]["message"]["text"], kOddLabel);
  EXPECT_EQ(result["stacks"][0]["frames"][0]["module"], kOddFile);
}

// Symbol names come from the watched program's binaries and may be any
// bytes: invalid UTF-8 must not throw out of the renderers (the shim runs
// inside that program); it comes out as U+FFFD.
TEST(Render, InvalidUtf8DoesNotThrow) {
  const std::string bad = "bad\xff\xfe name \xc3";  // stray bytes, a truncated sequence
  Finding f = DeregFinding();
  f.message = bad;
  f.related[0].label = bad;
  std::vector<Frame> frames = MainFrames();
  frames[0].function = bad;
  frames[0].file = "/src/" + bad + ".c";
  frames[0].module = bad;
  std::string line, sarif;
  ASSERT_NO_THROW(line = RenderJson(f, frames, {frames}, 1));
  ASSERT_NO_THROW(sarif = RenderSarif({{f, frames, {frames}}}));
  nlohmann::json j, s;
  ASSERT_NO_THROW(j = nlohmann::json::parse(line)) << line;
  ASSERT_NO_THROW(s = nlohmann::json::parse(sarif)) << sarif;
  const std::string replacement = "\xef\xbf\xbd";  // U+FFFD
  for (const std::string& got :
       {j["message"].get<std::string>(), j["stack"][0]["function"].get<std::string>(),
        s["runs"][0]["results"][0]["message"]["text"].get<std::string>(),
        s["runs"][0]["results"][0]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"]
            .get<std::string>()}) {
    EXPECT_EQ(got.rfind("bad", 0), 0u) << got;
    EXPECT_NE(got.find(replacement + " name "), std::string::npos) << got;
  }
  // And through a reporter, as a live run reports.
  Captured out;
  Options o;
  o.report_format = "json";
  Reporter r(o, out.Sink());
  ASSERT_NO_THROW(r.ReportSymbolized(f, frames, {frames}));
  ASSERT_NO_THROW(r.Finish());
  EXPECT_EQ(CountOf(out.text, "\n"), 2u) << out.text;
  ASSERT_NO_THROW(nlohmann::json::parse(out.text.substr(0, out.text.find('\n'))));
}

TEST(Reporter, PrintsOncePerCheckAndStack) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(101), MainFrames(), {PostFrames()}));
  EXPECT_FALSE(r.ReportSymbolized(DeregFinding(101), MainFrames(), {PostFrames()}));
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(103), MainFrames(), {PostFrames()}));
  Finding other = DeregFinding(101);
  other.check = CheckId::kFreeInFlight;
  EXPECT_TRUE(r.ReportSymbolized(other, MainFrames(), {PostFrames()}));
  EXPECT_EQ(CountOf(out.text, "ERROR: rdmasan: dereg-in-flight"), 2u);
  EXPECT_EQ(r.Count(CheckId::kDeregInFlight), 2u);
  EXPECT_EQ(r.TotalCount(), 3u);
  EXPECT_TRUE(r.HadErrors());
}

TEST(Reporter, DisabledChecksAndWarningsDoNotFail) {
  Captured out;
  Options o;
  Reporter r(o, out.Sink());
  Finding dup{CheckId::kWrIdDuplicate, "wr_id 0x1 twice", 5, {}};
  EXPECT_FALSE(r.ReportSymbolized(dup, MainFrames(), {}));  // off by default
  Finding warn{CheckId::kUnsignaledRun, "long run", 5, {}};
  EXPECT_TRUE(r.ReportSymbolized(warn, MainFrames(), {}));
  EXPECT_FALSE(r.HadErrors());
  EXPECT_EQ(r.Finish(), 0);
  o.checks = "sq-overflow";
  Reporter only(o, out.Sink());
  EXPECT_FALSE(only.ReportSymbolized(DeregFinding(), MainFrames(), {PostFrames()}));
}

TEST(Reporter, StacklessFindingsDedupByMessage) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  Finding a{CheckId::kForkWithMrs, "fork with 2 MRs", 0, {}};
  Finding b{CheckId::kForkWithMrs, "fork with 3 MRs", 0, {}};
  EXPECT_TRUE(r.ReportSymbolized(a, {}, {}));
  EXPECT_FALSE(r.ReportSymbolized(a, {}, {}));
  EXPECT_TRUE(r.ReportSymbolized(b, {}, {}));
}

TEST(Reporter, SuppressionsByFunctionFileAndModule) {
  std::string dir = TempDir();
  std::string supp = dir + "/supp.txt";
  {
    std::ofstream f(supp);
    f << "# comment\n\n"
         "dereg-in-flight:teardown\n"
         "  free-in-flight : *client.c  \n"
         "sq-overflow:libx.so\n"
         "cq-overrun:*nomatch*\n";
  }
  Captured out;
  Options o;
  o.suppressions = supp;
  o.verbosity = 1;
  Reporter r(o, out.Sink());
  EXPECT_EQ(out.text, "") << "no parse errors";
  EXPECT_FALSE(r.ReportSymbolized(DeregFinding(1), MainFrames(), {}));
  EXPECT_FALSE(r.ReportSymbolized(DeregFinding(1), MainFrames(), {}));
  EXPECT_FALSE(r.ReportSymbolized(DeregFinding(2), MainFrames(), {}));
  Finding free_f{CheckId::kFreeInFlight, "free", 3, {}};
  EXPECT_FALSE(r.ReportSymbolized(free_f, PostFrames(), {}));  // file basename
  Frame lib;
  lib.pc = 0x7f0000001000;
  lib.module = "/lib/libx.so";
  Finding sq{CheckId::kSqOverflow, "full", 4, {}};
  EXPECT_FALSE(r.ReportSymbolized(sq, {lib}, {}));  // module basename
  Finding cq{CheckId::kCqOverrun, "overrun", 5, {}};
  EXPECT_TRUE(r.ReportSymbolized(cq, MainFrames(), {}));
  Finding other{CheckId::kInvalidLkey, "bad lkey", 1, {}};
  EXPECT_TRUE(r.ReportSymbolized(other, MainFrames(), {})) << "patterns apply to their own check only";
  EXPECT_EQ(r.SuppressedCount(), 5u);
  r.Finish();
  EXPECT_NE(out.text.find("suppressions used:"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("3 dereg-in-flight:teardown"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("1 free-in-flight:*client.c"), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find("cq-overrun:*nomatch*"), std::string::npos) << "unused rules are not listed";
}

TEST(Reporter, BadSuppressionsAndOptionsAreReported) {
  std::string dir = TempDir();
  std::string supp = dir + "/bad.txt";
  {
    std::ofstream f(supp);
    f << "no-such-check:foo\nmissing-colon\nsq-overflow:ok\n";
  }
  Captured out;
  Options o;
  o.suppressions = supp;
  o.checks = "all,-bogus";
  o.report_format = "xml";
  Reporter r(o, out.Sink());
  std::string errors = absl::StrJoin(r.config_errors(), "\n");
  EXPECT_NE(errors.find("unknown check id 'no-such-check'"), std::string::npos) << errors;
  EXPECT_NE(errors.find("line 2"), std::string::npos) << errors;
  EXPECT_NE(errors.find("'bogus'"), std::string::npos) << errors;
  EXPECT_NE(errors.find("report_format"), std::string::npos) << errors;
  EXPECT_EQ(out.text, "") << "the caller decides what to do with them";
  Captured out2;
  o.suppressions = dir + "/does-not-exist";
  o.checks = "default";
  o.report_format = "text";
  Reporter r2(o, out2.Sink());
  ASSERT_EQ(r2.config_errors().size(), 1u);
  EXPECT_NE(r2.config_errors()[0].find("cannot read"), std::string::npos) << r2.config_errors()[0];
}

TEST(Reporter, OpenLogSaysWhyALogPathCannotBeCreated) {
  Options o;
  o.log_path = TempDir() + "/no-such-folder/log";
  Reporter r(o);
  std::string e = r.OpenLog();
  EXPECT_NE(e.find("log_path: cannot create"), std::string::npos) << e;
  EXPECT_NE(e.find("No such file or directory"), std::string::npos) << e;
  o.log_path = TempDir() + "/log";
  Reporter ok(o);
  EXPECT_EQ(ok.OpenLog(), "");
  ok.Message("a note");
  std::ifstream f(absl::StrCat(o.log_path, ".", getpid()));
  std::string line;
  std::getline(f, line);
  EXPECT_EQ(line, absl::StrCat("==", getpid(), "==rdmasan: a note"));
}

TEST(Reporter, TheProgramsErrnoSurvivesAReport) {
  // A report runs inside the program's verbs call, whose errno may be its
  // answer: a log that cannot be created (its open fails with ENOENT), the
  // symbolizing and the writes leave errno as the call left it.
  Options o;
  o.log_path = TempDir() + "/no-such-folder/log";
  Reporter r(o);
  errno = EXDEV;
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(101), MainFrames(), {PostFrames()}));
  EXPECT_EQ(errno, EXDEV);
  errno = ENOTTY;
  EXPECT_TRUE(r.Report(DeregFinding(103)));
  EXPECT_EQ(errno, ENOTTY);
  errno = EXDEV;
  r.Message("a note");
  EXPECT_EQ(errno, EXDEV);
}

TEST(Reporter, JsonFormatWritesOneLinePerFindingAndASummary) {
  Captured out;
  Options o;
  o.report_format = "json";
  Reporter r(o, out.Sink());
  r.ReportSymbolized(DeregFinding(1), MainFrames(), {PostFrames()});
  r.ReportSymbolized(DeregFinding(2), MainFrames(), {PostFrames()});
  r.Finish();
  EXPECT_EQ(CountOf(out.text, "\n"), 3u) << out.text;
  EXPECT_EQ(CountOf(out.text, "\n{"), 2u);
  EXPECT_NE(out.text.find("\"summary\":{\"findings\":2,\"counts\":{\"dereg-in-flight\":2}"),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find(absl::StrCat("{\"pid\":", getpid(),
                                       ",\"summary\":{\"findings\":2,\"counts\":{\"dereg-in-flight\":2},"
                                       "\"suppressed\":0}}\n")),
            std::string::npos)
      << out.text;
}

TEST(Reporter, FinishPrintsCountsAndReturnsExitcode) {
  Captured out;
  Options o;
  o.exitcode = 42;
  Reporter r(o, out.Sink());
  r.ReportSymbolized(Finding{CheckId::kSqOverflow, "x", 1, {}}, MainFrames(), {});
  r.ReportSymbolized(DeregFinding(2), MainFrames(), {});
  r.ReportSymbolized(DeregFinding(3), MainFrames(), {});
  EXPECT_EQ(r.Finish(), 42);
  EXPECT_NE(out.text.find(
                absl::StrCat("==", getpid(), "==rdmasan: 3 findings: sq-overflow 1, dereg-in-flight 2\n")),
            std::string::npos)
      << out.text;
  size_t len = out.text.size();
  EXPECT_EQ(r.Finish(), 42);
  EXPECT_EQ(out.text.size(), len) << "Finish is idempotent";
  Captured quiet;
  Reporter clean(Options{}, quiet.Sink());
  EXPECT_EQ(clean.Finish(), 0);
  EXPECT_EQ(quiet.text, "");
}

TEST(Reporter, SarifFileAtFinish) {
  std::string dir = TempDir();
  Captured out;
  Options o;
  o.report_format = "sarif";
  o.log_path = dir + "/log";
  Reporter r(o, out.Sink());
  EXPECT_EQ(r.SarifPath(), absl::StrCat(dir, "/log.", getpid(), ".sarif"));
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(), MainFrames(), {PostFrames()}));
  EXPECT_NE(out.text.find("ERROR: rdmasan: dereg-in-flight"), std::string::npos) << "text is printed too";
  r.Finish();
  std::string sarif = Slurp(r.SarifPath());
  EXPECT_NE(sarif.find("\"version\": \"2.1.0\""), std::string::npos) << sarif;
  EXPECT_NE(sarif.find("\"id\": \"sq-overflow\""), std::string::npos);
  EXPECT_NE(sarif.find("\"id\": \"fork-with-mrs\""), std::string::npos);
  EXPECT_EQ(CountOf(sarif, "\"ruleId\""), 1u);
  EXPECT_EQ(nlohmann::json::parse(sarif)["runs"][0]["results"].size(), 1u);
}

TEST(Reporter, LogPathGetsPidSuffix) {
  std::string dir = TempDir();
  Options o;
  o.log_path = dir + "/rdmasan";
  Reporter r(o);
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(), MainFrames(), {PostFrames()}));
  r.Finish();
  std::string log = Slurp(absl::StrCat(dir, "/rdmasan.", getpid()));
  EXPECT_NE(log.find("ERROR: rdmasan: dereg-in-flight"), std::string::npos) << log;
  EXPECT_NE(log.find("1 finding: dereg-in-flight 1"), std::string::npos) << log;
}

// Another user's symlink planted where the log and the SARIF log will be
// created: neither is followed, the victim's file is untouched, and the
// report still reaches the user (the log falls back to stderr).
TEST(Reporter, LogAndSarifNeverFollowAPlantedSymlink) {
  std::string dir = TempDir();
  const std::string victim = dir + "/victim";
  {
    std::ofstream f(victim);
    f << "precious\n";
  }
  Options o;
  o.report_format = "sarif";
  o.log_path = dir + "/planted";
  const std::string log = absl::StrCat(o.log_path, ".", getpid());
  ASSERT_EQ(symlink(victim.c_str(), log.c_str()), 0);
  Captured out;
  Reporter r(o);  // writes to the log path, not a sink
  ASSERT_EQ(symlink(victim.c_str(), r.SarifPath().c_str()), 0);
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(), MainFrames(), {PostFrames()}));
  r.Finish();
  EXPECT_EQ(Slurp(victim), "precious\n");
  struct stat st;
  ASSERT_EQ(lstat(log.c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
  ASSERT_EQ(lstat(r.SarifPath().c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode));
}

// Another user's file (or one anyone may write) at the log or SARIF name is
// refused at start, with the path and the reason, and never written.
TEST(Reporter, LogAndSarifOthersCanWriteAreRefusedAtStart) {
  std::string dir = TempDir();
  Options o;
  o.report_format = "sarif";
  o.log_path = dir + "/log";
  Reporter probe(o);
  const std::string sarif = probe.SarifPath();
  const std::string log = absl::StrCat(o.log_path, ".", getpid());
  for (const std::string& planted : {sarif, log}) {
    {
      std::ofstream f(planted);
      f << "theirs\n";
    }
    ASSERT_EQ(chmod(planted.c_str(), 0666), 0);
    Reporter r(o);
    std::string e = r.OpenLog();
    EXPECT_NE(e.find(planted), std::string::npos) << e;
    EXPECT_NE(e.find("mode 0666 lets other users write it"), std::string::npos) << e;
    EXPECT_NE(e.find(planted == sarif ? "report_format=sarif" : "log_path"), std::string::npos) << e;
    EXPECT_EQ(Slurp(planted), "theirs\n");
    unlink(planted.c_str());
  }
}

// A replayed trace's strings (a softnic reason, a frame's file) reach the
// terminal with control characters escaped (issue 29 item 10); JSON lines
// are escaped by the JSON writer.
TEST(Reporter, ControlCharactersFromATraceAreEscaped) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  r.Message(
      "reason \x1b[2J\x1b]0;owned\x07 done\xc2\x9b"
      "6n tab\tok");
  EXPECT_EQ(out.text.find('\x1b'), std::string::npos) << out.text;
  EXPECT_EQ(out.text.find('\x07'), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("reason \\x1b[2J\\x1b]0;owned\\x07 done\\xc2\\x9b6n tab\tok\n"), std::string::npos)
      << out.text;
  Captured frames;
  Reporter f(Options{}, frames.Sink());
  std::vector<Frame> main = MainFrames();
  main[0].file = "/src/app/\x1b[31mclient.c";
  f.ReportSymbolized(DeregFinding(), main, {PostFrames()});
  EXPECT_EQ(frames.text.find('\x1b'), std::string::npos) << frames.text;
  EXPECT_NE(frames.text.find("\\x1b[31mclient.c"), std::string::npos) << frames.text;
}

TEST(Reporter, StripPathPrefix) {
  Captured out;
  Options o;
  o.strip_path_prefix = "/src/";
  Reporter r(o, out.Sink());
  r.ReportSymbolized(DeregFinding(), MainFrames(), {PostFrames()});
  EXPECT_NE(out.text.find("in teardown app/client.c:88"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("in send_chunk app/client.c:61"), std::string::npos) << out.text;
}

TEST(Reporter, HidesInlinedVerbsHeaderFrames) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  Frame verbs = MainFrames()[0];
  verbs.function = "ibv_post_send";
  verbs.file = "/usr/include/infiniband/verbs.h";
  verbs.line = 3300;
  std::vector<Frame> frames = {verbs, MainFrames()[0], MainFrames()[1]};
  Finding f{CheckId::kSqOverflow, "full", 9, {}};
  ASSERT_TRUE(r.ReportSymbolized(f, frames, {}));
  EXPECT_EQ(out.text.find("verbs.h"), std::string::npos) << out.text;
  EXPECT_NE(out.text.find("    #0 0x55d0c0a1b2c3 in teardown /src/app/client.c:88\n"), std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find("SUMMARY: rdmasan: sq-overflow client.c:88 in teardown"), std::string::npos);
}

// The application's own frame is never dropped, even where the line table
// puts its location in verbs.h (a symbolizer that missed the inlined call):
// only verbs.h's ibv_* / __ibv_* frames are hidden (issue 10 item 1).
TEST(Reporter, KeepsTheApplicationsFrameWhateverItsFile) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  Frame app = MainFrames()[0];
  app.function = "issue_rpc";
  app.file = "/usr/include/infiniband/verbs.h";
  app.line = 3342;
  std::vector<Frame> frames = {app, MainFrames()[1]};
  Finding f{CheckId::kSqOverflow, "full", 11, {}};
  ASSERT_TRUE(r.ReportSymbolized(f, frames, {}));
  EXPECT_NE(out.text.find("    #0 0x55d0c0a1b2c3 in issue_rpc /usr/include/infiniband/verbs.h:3342\n"),
            std::string::npos)
      << out.text;
}

__attribute__((noinline)) StackId PostSomething(int* line) {
  *line = __LINE__ + 1;  // the next line
  StackId id = CaptureStack();
  asm volatile("" ::: "memory");
  return id;
}

TEST(Reporter, ReportSymbolizesRealStacks) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  int line = 0;
  StackId stack = PostSomething(&line);
  Finding f{CheckId::kSgeOutOfBounds,
            "SGE [0x1000, +64) outside MR",
            stack,
            {{StackKind::kRegistered, "MR registered at", stack}}};
  ASSERT_TRUE(r.Report(f));
  EXPECT_FALSE(r.Report(f));
  EXPECT_NE(out.text.find(absl::StrCat("in rdmasan::core::(anonymous namespace)::PostSomething(int*) ")),
            std::string::npos)
      << out.text;
  EXPECT_NE(out.text.find(absl::StrCat("core_report_test.cc:", line, "\n")), std::string::npos) << out.text;
  EXPECT_NE(
      out.text.find(absl::StrCat("SUMMARY: rdmasan: sge-out-of-bounds core_report_test.cc:", line, " in ")),
      std::string::npos)
      << out.text;
}

TEST(Reporter, NestedReportFromTheSameThreadIsDroppedNotDeadlocked) {
  Reporter* self = nullptr;
  int nested_printed = -1;
  std::string text;
  Reporter r(Options{}, [&](absl::string_view s) {
    text.append(s.data(), s.size());
    if (nested_printed < 0 && self)
      nested_printed = self->ReportSymbolized(DeregFinding(999), MainFrames(), {});
  });
  self = &r;
  EXPECT_TRUE(r.ReportSymbolized(DeregFinding(1), MainFrames(), {}));
  EXPECT_EQ(nested_printed, 0);
}

TEST(Reporter, ConcurrentReports) {
  Captured out;
  Reporter r(Options{}, out.Sink());
  std::vector<std::thread> threads;
  for (int t = 0; t < 8; ++t)
    threads.emplace_back([&r, t] {
      for (int i = 0; i < 50; ++i)
        r.ReportSymbolized(DeregFinding(1000 + (t * 50 + i) % 100), MainFrames(), {});
    });
  for (auto& th : threads) th.join();
  EXPECT_EQ(r.TotalCount(), 100u);
  EXPECT_EQ(CountOf(out.text, "SUMMARY:"), 100u);
}

TEST(ReporterDeathTest, HaltOnErrorExitsWithExitcode) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Options o;
  o.halt_on_error = true;
  o.exitcode = 66;
  EXPECT_EXIT(
      {
        Reporter r(o);
        r.ReportSymbolized(Finding{CheckId::kUnsignaledRun, "warning only", 1, {}}, MainFrames(), {});
        r.ReportSymbolized(DeregFinding(), MainFrames(), {PostFrames()});
        std::fprintf(stderr, "not reached\n");
        std::exit(0);
      },
      ::testing::ExitedWithCode(66),
      "WARNING: rdmasan: unsignaled-run(.|\n)*ERROR: rdmasan: dereg-in-flight(.|\n)*"
      "SUMMARY: rdmasan: dereg-in-flight client.c:88 in teardown\n(.|\n)*"
      "2 findings: unsignaled-run 1, dereg-in-flight 1");
}

// Findings that follow an injected fault name it (issue 11): an indented
// line after the message in text, "context" in JSON, properties.context in
// SARIF; nothing when there is none.
Finding InjectedFinding() {
  Finding f = DeregFinding();
  f.context = "after injected wc.error RETRY_EXC_ERR on QP 0x5 wr_id=0x12 (decision #3)";
  return f;
}

TEST(Render, ContextIsALineAfterTheMessage) {
  std::string text = RenderText(InjectedFinding(), MainFrames(), {PostFrames()}, 4242);
  EXPECT_EQ(text,
            "==4242==ERROR: rdmasan: dereg-in-flight: MR 0x7 (lkey 0x1207) deregistered with 1 outstanding "
            "WR on QP 0x11\n"
            "  after injected wc.error RETRY_EXC_ERR on QP 0x5 wr_id=0x12 (decision #3)\n"
            "    #0 0x55d0c0a1b2c3 in teardown /src/app/client.c:88\n"
            "    #1 0x55d0c0a1b400 in main /src/app/client.c:120\n"
            "  outstanding WR wr_id=0x2a RDMA_WRITE posted at:\n"
            "    #0 0x55d0c0a1b111 in send_chunk /src/app/client.c:61\n"
            "SUMMARY: rdmasan: dereg-in-flight client.c:88 in teardown\n");
  EXPECT_EQ(RenderText(DeregFinding(), MainFrames(), {PostFrames()}, 4242).find("after injected"),
            std::string::npos);
}

TEST(Render, ContextInJsonAndSarif) {
  const Finding f = InjectedFinding();
  const nlohmann::json j = nlohmann::json::parse(RenderJson(f, MainFrames(), {PostFrames()}, 1));
  EXPECT_EQ(j["context"], f.context);
  EXPECT_EQ(j["message"], DeregFinding().message);
  EXPECT_FALSE(nlohmann::json::parse(RenderJson(DeregFinding(), MainFrames(), {}, 1)).contains("context"));
  const nlohmann::json result =
      nlohmann::json::parse(RenderSarif({{f, MainFrames(), {PostFrames()}}}))["runs"][0]["results"][0];
  EXPECT_EQ(result["properties"]["context"], f.context);
  EXPECT_EQ(result["message"]["text"], DeregFinding().message);
  const nlohmann::json plain =
      nlohmann::json::parse(RenderSarif({{DeregFinding(), MainFrames(), {}}}))["runs"][0]["results"][0];
  EXPECT_FALSE(plain.contains("properties"));
}

TEST(Render, DescribesDecisionEvents) {
  auto decision = [](uint32_t point, uint64_t outcome, uint32_t qpn, int64_t wr_id) {
    Event e;
    e.kind = EventKind::kDecision;
    e.count = point;
    e.addr = outcome;
    e.qp_num = qpn;
    if (wr_id >= 0) e.wcs.push_back({static_cast<uint64_t>(wr_id), 0, 0, qpn, 0, 0});
    return e;
  };
  EXPECT_EQ(DescribeDecisionEvent(decision(10, 12, 0x5, 0x12)),
            "wc.error RETRY_EXC_ERR on QP 0x5 wr_id=0x12");
  EXPECT_EQ(DescribeDecisionEvent(decision(0, (uint64_t{12} << 32) | 2, 0x1a, 0x40)),
            "post_send ENOMEM at WR 1 on QP 0x1a wr_id=0x40");
  EXPECT_EQ(DescribeDecisionEvent(decision(1, (uint64_t{22} << 32) | 1, 0, -1)), "post_recv EINVAL at WR 0");
  EXPECT_EQ(DescribeDecisionEvent(decision(3, 12, 0, -1)), "reg_mr ENOMEM");
  EXPECT_EQ(DescribeDecisionEvent(decision(5, 14, 0, -1)), "create_qp EFAULT");
  EXPECT_EQ(DescribeDecisionEvent(decision(13, 1, 0x7, -1)), "async.qp_fatal on QP 0x7");
  EXPECT_EQ(DescribeDecisionEvent(decision(15, 3, 0, -1)), "sched.pick outcome 3");
  EXPECT_EQ(DescribeDecisionEvent(decision(99, 3, 0, -1)), "point 99 outcome 3");
}

}  // namespace
}  // namespace rdmasan::core
