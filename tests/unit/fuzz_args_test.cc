// cli/fuzz_args: every flag of `rdmasan fuzz`'s table (cli/fuzz_flags.inc)
// is accepted with the values its row allows, rejected with one it does
// not (the error names the flag and what was expected), keeps its default
// when not given, and is listed in `rdmasan fuzz --help`.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/fuzz_args.h"
#include "cli/usage.h"

namespace rdmasan::cli::fuzz {
namespace {

struct Row {
  std::string name;
  std::string allowed;
  std::string expected;
};

const std::vector<Row>& Rows() {
  static const std::vector<Row> rows = {
#define RDMASAN_FUZZ_FLAG(type, name, dflt, allowed, value, expected, help) {#name, allowed, expected},
#include "cli/fuzz_flags.inc"
#undef RDMASAN_FUZZ_FLAG
  };
  return rows;
}

// Values a row's `allowed` column admits, and values it does not.
std::vector<std::string> GoodValues(const Row& r) {
  if (r.allowed == ">0") return {"0.5", "7"};
  if (r.allowed == "<K/N>") return {"0/1", "3/4"};
  if (r.allowed == "<faults>") return {"none", "", "post_send:nth=1"};
  if (r.allowed == "<dir>") return {"some/dir"};
  std::vector<std::string> range = absl::StrSplit(r.allowed, "..");
  if (range.size() == 2) return range;
  return absl::StrSplit(r.allowed, '|');
}

std::vector<std::string> BadValues(const Row& r) {
  if (r.allowed == ">0") return {"0", "-1", "x"};
  if (r.allowed == "<K/N>") return {"4/4", "1", "x/2"};
  if (r.allowed == "<faults>") return {"post_snd:nth=1"};
  if (r.allowed == "<dir>") return {""};
  std::vector<std::string> range = absl::StrSplit(r.allowed, "..");
  if (range.size() == 2) {
    int64_t lo = 0;
    EXPECT_TRUE(absl::SimpleAtoi(range[0], &lo)) << r.allowed;
    return {absl::StrCat(lo - 1), absl::StrCat(range[1], "0"), "x"};
  }
  return {"x", ""};
}

absl::Status Parse(std::vector<std::string> args, Config* c) {
  args.push_back("--");
  args.push_back("true");
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  return ParseFuzzArgs(static_cast<int>(argv.size()), argv.data(), c);
}

TEST(FuzzArgs, EveryFlagOfTheTableTakesTheValuesItAllows) {
  ASSERT_GE(Rows().size(), 11u);
  for (const Row& r : Rows()) {
    for (const std::string& v : GoodValues(r)) {
      Config c;
      // --depth is for --strategy=pct only.
      absl::Status s = Parse({"--strategy=pct", absl::StrCat("--", r.name, "=", v)}, &c);
      EXPECT_TRUE(s.ok()) << "--" << r.name << "=" << v << ": " << s.message();
    }
  }
}

TEST(FuzzArgs, EveryFlagOfTheTableRefusesAValueItDoesNotAllow) {
  for (const Row& r : Rows()) {
    for (const std::string& v : BadValues(r)) {
      Config c;
      const std::string arg = absl::StrCat("--", r.name, "=", v);
      absl::Status s = Parse({arg}, &c);
      ASSERT_FALSE(s.ok()) << arg;
      EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
      const std::string want = absl::StrCat("fuzz: option '", arg, "': ");
      EXPECT_EQ(std::string(s.message()).substr(0, want.size()), want) << s.message();
      if (r.allowed != "<faults>") {
        EXPECT_EQ(s.message(), absl::StrCat(want, "expected ", r.expected));
      }
    }
  }
}

TEST(FuzzArgs, WhatIsNotGivenKeepsItsDefault) {
  Config c;
  ASSERT_TRUE(Parse({"--runs=5"}, &c).ok());
  const Config defaults;
  EXPECT_EQ(c.runs, 5u);
  EXPECT_EQ(c.depth, defaults.depth);
  EXPECT_EQ(c.strategy, "random");
  EXPECT_EQ(c.out, "rdmasan-fuzz");
  EXPECT_EQ(c.shard.k, 0);
  EXPECT_EQ(c.shard.n, 1);
  EXPECT_FALSE(c.faults.given);
  ASSERT_EQ(c.roles.size(), 1u);
  EXPECT_EQ(c.roles[0], std::vector<std::string>{"true"});
}

TEST(FuzzArgs, DepthAppliesToPctOnly) {
  Config c;
  EXPECT_EQ(Parse({"--depth=2"}, &c).message(), "fuzz: --depth applies to --strategy=pct only");
  Config same_as_default;
  EXPECT_TRUE(Parse({"--depth=3"}, &same_as_default).ok());
}

TEST(FuzzArgs, RdmasanOptionsPassThroughButNotTheCampaignsOwn) {
  Config c;
  ASSERT_TRUE(Parse({"--reorder=pct", "--verbosity=1"}, &c).ok());
  EXPECT_EQ(c.options, (std::vector<std::string>{"reorder=pct", "verbosity=1"}));
  EXPECT_TRUE(c.user_reorder);
  Config owned;
  EXPECT_NE(Parse({"--log_path=x"}, &owned).message().find("the campaign sets this option"),
            absl::string_view::npos);
  Config unknown;
  EXPECT_NE(Parse({"--bogus=1"}, &unknown).message().find("unknown option '--bogus'"),
            absl::string_view::npos);
}

TEST(FuzzArgs, HelpListsEveryFlag) {
  const std::string help = FuzzUsageText();
  for (const Row& r : Rows())
    EXPECT_NE(help.find(absl::StrCat("--", r.name, "=")), std::string::npos) << r.name;
  EXPECT_NE(help.find("(default 3)"), std::string::npos) << help;
}

}  // namespace
}  // namespace rdmasan::cli::fuzz
