// Suppressions that name a finding's labelled stacks (check-id:kind=pattern),
// the lines written before kinds existed, bad lines, and the suppression
// files rdmasan ships and applies by default.
#include <gtest/gtest.h>
#include <stdlib.h>

#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_join.h"
#include "core/options.h"
#include "core/report.h"
#include "core/status.h"

namespace rdmasan::core {
namespace {

Frame Fn(const std::string& function, const std::string& module = "/usr/bin/app") {
  Frame f;
  f.pc = 0x1000;
  f.function = function;
  f.module = module;
  return f;
}

// A free of registered memory by the application, the MR registered by
// `registered_by` (called from the application's main).
struct FreeRegistered {
  Finding finding;
  std::vector<Frame> main;
  std::vector<std::vector<Frame>> related;
};

FreeRegistered FreeOf(const std::string& registered_by, StackId stack = 7) {
  FreeRegistered f;
  f.finding = Finding{CheckId::kFreeRegistered,
                      "freed while MR 0x6 still registers it",
                      stack,
                      {{StackKind::kRegistered, "MR 0x6 registered at", 8}}};
  f.main = {Fn("release_buffers"), Fn("main")};
  f.related = {{Fn(registered_by, "/usr/lib/libcache.so.1"), Fn("main")}};
  return f;
}

int MatchOf(const Suppressions& s, const FreeRegistered& f) { return s.Match(f.finding, f.main, f.related); }

TEST(StackKinds, NamesAreStableAndRoundTrip) {
  EXPECT_STREQ(StackKindName(StackKind::kMain), "main");
  EXPECT_STREQ(StackKindName(StackKind::kRegistered), "registered");
  EXPECT_STREQ(StackKindName(StackKind::kPosted), "posted");
  EXPECT_STREQ(StackKindName(StackKind::kCreated), "created");
  for (size_t i = 0; i < kNumStackKinds; ++i) {
    StackKind k = static_cast<StackKind>(i);
    ASSERT_EQ(StackKindByName(StackKindName(k)), k);
    EXPECT_STRNE(StackKindDescription(k), "");
  }
  EXPECT_FALSE(StackKindByName("registered_at"));
  EXPECT_STREQ(StackKindName(StackKind::kCount), "<invalid>");
}

TEST(Suppressions, KindRuleMatchesOnlyStacksOfThatKind) {
  Suppressions s;
  ASSERT_TRUE(s.Parse("free-registered:registered=cache_register*\n").ok());
  EXPECT_EQ(MatchOf(s, FreeOf("cache_register_region")), 0);
  EXPECT_EQ(MatchOf(s, FreeOf("setup")), -1) << "the application registered it itself";
  // The same frames under another kind do not match.
  FreeRegistered posted = FreeOf("cache_register_region");
  posted.finding.related[0].kind = StackKind::kPosted;
  EXPECT_EQ(MatchOf(s, posted), -1);
  // Nor does the main stack, whatever it holds.
  FreeRegistered in_main = FreeOf("setup");
  in_main.main.insert(in_main.main.begin(), Fn("cache_register_region"));
  EXPECT_EQ(MatchOf(s, in_main), -1);
  // Another check: no.
  FreeRegistered other = FreeOf("cache_register_region");
  other.finding.check = CheckId::kDeregInFlight;
  EXPECT_EQ(MatchOf(s, other), -1);
}

TEST(Suppressions, KindRuleMatchesModulesAndAnyFrameOfAnyStackOfItsKind) {
  Suppressions s;
  ASSERT_TRUE(s.Parse("free-registered:registered=libcache.so*").ok());
  EXPECT_EQ(MatchOf(s, FreeOf("anything")), 0) << "module basename";
  FreeRegistered two = FreeOf("setup");
  two.finding.related.insert(two.finding.related.begin(),
                             RelatedStack{StackKind::kBound, "window bound at", 9});
  two.related.insert(two.related.begin(), {Fn("bind_it")});
  Suppressions t;
  ASSERT_TRUE(t.Parse("free-registered:registered=main").ok());
  EXPECT_EQ(MatchOf(t, two), 0) << "the second frame of the second related stack";
  // A related stack with no frames (symbolization gave none) never matches.
  two.related.resize(1);
  EXPECT_EQ(MatchOf(t, two), -1);
}

TEST(Suppressions, OldLinesStillMatchTheMainStack) {
  Suppressions s;
  ASSERT_TRUE(s.Parse("free-registered:release_*\nfree-registered:*/app\n").ok());
  EXPECT_EQ(MatchOf(s, FreeOf("cache_register_region")), 0);
  EXPECT_EQ(s.Match(CheckId::kFreeRegistered, {Fn("release_buffers")}), 0);
  EXPECT_EQ(s.Match(CheckId::kFreeRegistered, {Fn("x")}), 1) << "module path";
  // Old lines never look at related stacks.
  Suppressions t;
  ASSERT_TRUE(t.Parse("free-registered:cache_register*").ok());
  EXPECT_EQ(MatchOf(t, FreeOf("cache_register_region")), -1);
  // main= says the same thing explicitly, and lets a pattern start with word=.
  Suppressions u;
  ASSERT_TRUE(u.Parse("free-registered:main=release_*\nfree-registered:main=a=b*").ok());
  EXPECT_EQ(MatchOf(u, FreeOf("x")), 0);
  EXPECT_EQ(u.Match(CheckId::kFreeRegistered, {Fn("a=b_c")}), 1);
  // Patterns with '=' after other characters are plain patterns, as before.
  Suppressions v;
  ASSERT_TRUE(v.Parse("free-registered:*x=y*").ok());
  EXPECT_EQ(v.Match(CheckId::kFreeRegistered, {Fn("op_x=y_1")}), 0);
}

TEST(Suppressions, RuleTextParsesBackAndRuleSourceSaysWhere) {
  Suppressions s;
  ASSERT_TRUE(s.Parse("# c\n free-registered : registered = cache_* \nsq-overflow:teardown\n"
                      "cq-overrun:main=k=v\n",
                      "my.supp")
                  .ok());
  ASSERT_EQ(s.size(), 3u);
  EXPECT_EQ(s.RuleText(0), "free-registered:registered=cache_*");
  EXPECT_EQ(s.RuleText(1), "sq-overflow:teardown");
  EXPECT_EQ(s.RuleText(2), "cq-overrun:main=k=v");
  EXPECT_EQ(s.RuleSource(0), "my.supp:2");
  EXPECT_EQ(s.RuleSource(1), "my.supp:3");
  for (int i = 0; i < 3; ++i) {
    Suppressions again;
    ASSERT_TRUE(again.Parse(s.RuleText(i)).ok()) << s.RuleText(i);
    EXPECT_EQ(again.RuleText(0), s.RuleText(i));
    EXPECT_EQ(again.RuleSource(0), "line 1");
  }
  EXPECT_EQ(s.RuleText(3), "");
  EXPECT_EQ(s.RuleSource(-1), "");
}

TEST(Suppressions, BadLinesAreErrorsNamingFileAndLine) {
  Suppressions s;
  absl::Status st = s.Parse(
      "free-registered:registerd=cache_*\n"  // 1: misspelt kind
      "free-registered:registered=\n"        // 2: empty pattern
      "free-registered:registered_at=x\n"    // 3: not a kind
      "no-such-check:registered=x\n"         // 4
      "missing colon\n"                      // 5
      "free-registered:registered=ok_*\n",   // 6: good
      "/etc/app.supp");
  std::vector<std::string> errors = ErrorMessages(st);
  ASSERT_EQ(errors.size(), 5u) << absl::StrJoin(errors, "\n");
  EXPECT_EQ(errors[0],
            "suppressions: /etc/app.supp line 1: unknown stack kind 'registerd' in "
            "'free-registered:registerd=cache_*' (one of: main, registered, posted, created, allocated, "
            "bound, invalidated, destroyed, waiting, in-verbs)");
  EXPECT_EQ(errors[1], "suppressions: /etc/app.supp line 2: empty pattern");
  EXPECT_NE(errors[2].find("line 3: unknown stack kind 'registered_at'"), std::string::npos) << errors[2];
  EXPECT_NE(errors[3].find("line 4: unknown check id 'no-such-check'"), std::string::npos) << errors[3];
  EXPECT_NE(errors[4].find("line 5: expected check-id:pattern or check-id:kind=pattern"), std::string::npos)
      << errors[4];
  ASSERT_EQ(s.size(), 1u) << "good lines still apply";
  EXPECT_EQ(s.RuleSource(0), "/etc/app.supp:6");
  // Without a source, as before.
  Suppressions t;
  EXPECT_EQ(ErrorMessages(t.Parse("x:y")),
            std::vector<std::string>{"suppressions line 1: unknown check id 'x' (rdmasan checks "
                                     "lists them)"});
}

TEST(ShippedSuppressions, EveryFileParsesAndEveryRuleNamesALibraryFunction) {
  const auto& files = DefaultSuppressions();
  ASSERT_GE(files.size(), 2u);
  std::vector<std::string> names;
  for (const auto& f : files) {
    names.push_back(f.name);
    Suppressions s;
    absl::Status st = s.Parse(f.text, f.name);
    EXPECT_TRUE(st.ok()) << f.name << ": " << st.message();
    for (size_t i = 0; i < s.size(); ++i) {
      // A pattern that a function of any program could match ("*", "main")
      // would hide the application's own bugs.
      std::string rule = s.RuleText(static_cast<int>(i));
      std::string pattern = rule.substr(rule.find_last_of(":=") + 1);
      EXPECT_TRUE(pattern.rfind("uc", 0) == 0 || pattern.rfind("mca_", 0) == 0 ||
                  pattern.rfind("opal_", 0) == 0 || pattern.rfind("ompi_", 0) == 0)
          << f.name << ": " << rule;
    }
  }
  EXPECT_EQ(absl::StrJoin(names, ","), "ucx.supp,openmpi.supp");
}

Options Quiet() {
  Options o;
  o.verbosity = 1;
  return o;
}

// The lazy deregistration of UCX's registration cache as rdmasan saw it
// (suppressions/ucx.supp, rule 1), symbolized from Debian's UCX 1.13.1.
FreeRegistered UcxRcacheFree() {
  FreeRegistered f;
  f.finding = Finding{CheckId::kFreeRegistered,
                      "freed while MR 0x18 still registers it",
                      11,
                      {{StackKind::kRegistered, "MR 0x18 registered at", 12}}};
  f.main = {Fn("uct_mem_free", "/usr/lib/x86_64-linux-gnu/libuct.so.0.0.0"),
            Fn("uct_iface_mp_chunk_release", "/usr/lib/x86_64-linux-gnu/libuct.so.0.0.0"),
            Fn("ucs_mpool_cleanup", "/usr/lib/x86_64-linux-gnu/libucs.so.0.0.0")};
  f.related = {{Fn("uct_ib_reg_mr", "/usr/lib/x86_64-linux-gnu/ucx/libuct_ib.so.0.0.0"),
                Fn("ucs_rcache_get", "/usr/lib/x86_64-linux-gnu/libucs.so.0.0.0"),
                Fn("uct_iface_mem_alloc", "/usr/lib/x86_64-linux-gnu/libuct.so.0.0.0"), Fn("main")}};
  return f;
}

TEST(ShippedSuppressions, ApplyByDefaultAndListTheirHitsWithTheirFile) {
  std::string out;
  Reporter r(Quiet(), [&](absl::string_view s) { out.append(s.data(), s.size()); });
  EXPECT_TRUE(r.config_errors().empty()) << absl::StrJoin(r.config_errors(), "\n");
  FreeRegistered f = UcxRcacheFree();
  EXPECT_FALSE(r.ReportSymbolized(f.finding, f.main, f.related));
  // The application's own registration: reported.
  FreeRegistered mine = FreeOf("setup", 21);
  EXPECT_TRUE(r.ReportSymbolized(mine.finding, mine.main, mine.related));
  r.Finish();
  EXPECT_NE(out.find("suppressions loaded: ucx.supp (shipped, "), std::string::npos) << out;
  EXPECT_NE(out.find("openmpi.supp (shipped, "), std::string::npos) << out;
  EXPECT_NE(out.find("1 free-registered:registered=ucs_rcache_*  (ucx.supp:"), std::string::npos) << out;
}

TEST(ShippedSuppressions, OffWithDefaultSuppressionsFalse) {
  std::string out;
  Options o = Quiet();
  o.default_suppressions = false;
  Reporter r(o, [&](absl::string_view s) { out.append(s.data(), s.size()); });
  FreeRegistered f = UcxRcacheFree();
  EXPECT_TRUE(r.ReportSymbolized(f.finding, f.main, f.related));
  r.Finish();
  EXPECT_EQ(out.find("ucx.supp"), std::string::npos) << out;
  EXPECT_EQ(out.find("suppressions loaded"), std::string::npos) << "no file at all";
}

TEST(ShippedSuppressions, TheUsersFileComesFirst) {
  char tmpl[] = "/tmp/rdmasan_supp_test.XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  std::string path = std::string(tmpl) + "/user.supp";
  std::ofstream(path) << "free-registered:registered=uct_ib_reg_mr\n";
  std::string out;
  Options o = Quiet();
  o.suppressions = path;
  Reporter r(o, [&](absl::string_view s) { out.append(s.data(), s.size()); });
  FreeRegistered f = UcxRcacheFree();
  EXPECT_FALSE(r.ReportSymbolized(f.finding, f.main, f.related));
  r.Finish();
  EXPECT_NE(out.find("suppressions loaded: " + path + " (1 rule), ucx.supp (shipped"), std::string::npos)
      << out;
  EXPECT_NE(out.find("1 free-registered:registered=uct_ib_reg_mr  (" + path + ":1)"), std::string::npos)
      << out;
}

TEST(Render, JsonAndSarifCarryTheKinds) {
  FreeRegistered f = FreeOf("cache_register_region");
  nlohmann::json j = nlohmann::json::parse(RenderJson(f.finding, f.main, f.related));
  EXPECT_EQ(j["related"][0]["kind"], "registered");
  EXPECT_EQ(j["related"][0]["label"], "MR 0x6 registered at");
  nlohmann::json s = nlohmann::json::parse(RenderSarif({{f.finding, f.main, f.related}}));
  const auto& result = s["runs"][0]["results"][0];
  EXPECT_EQ(result["stacks"][0]["properties"]["kind"], "main");
  EXPECT_EQ(result["stacks"][1]["properties"]["kind"], "registered");
  EXPECT_EQ(result["relatedLocations"][0]["properties"]["kind"], "registered");
}

}  // namespace
}  // namespace rdmasan::core
