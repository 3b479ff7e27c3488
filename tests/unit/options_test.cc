#include "core/options.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/status.h"

namespace rdmasan::core {
namespace {

TEST(Options, ParsesKnownAndReportsBad) {
  Options o;
  absl::Status status =
      ParseOptions("softnic=on:softnic_fabric=abc verbosity=2:checks=all,-wr-id-duplicate", &o);
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_EQ(o.softnic, "on");
  EXPECT_EQ(o.softnic_fabric, "abc");
  EXPECT_EQ(o.verbosity, 2);
  EXPECT_EQ(o.checks, "all,-wr-id-duplicate");
  status = ParseOptions("verbosity=x:nosuch=1:help", &o);
  EXPECT_TRUE(absl::IsInvalidArgument(status)) << status;
  std::vector<std::string> errors = ErrorMessages(status);
  ASSERT_EQ(errors.size(), 3u);
  EXPECT_NE(errors[0].find("verbosity"), std::string::npos);
  EXPECT_NE(errors[1].find("unknown option 'nosuch'"), std::string::npos);
  EXPECT_NE(errors[2].find("no value"), std::string::npos);
  EXPECT_EQ(o.verbosity, 2) << "a bad value keeps the previous one";
}

// Issue 10 item 17: values outside what an option allows were accepted
// (softnic=perhaps silently disabled softnic).
TEST(Options, ValuesOutsideTheirRowAreErrors) {
  struct Case {
    const char* item;
    const char* says;
  } cases[] = {
      {"softnic=perhaps", "one of: auto, on, off"},
      {"buffer_check=x", "one of: full, sampled, off"},
      {"report_format=xml", "one of: text, json, sarif"},
      {"verbosity=-5", "0 to 2"},
      {"exitcode=256", "0 to 255"},
      {"checks=bogus", "unknown check id 'bogus'"},
      {"softnic_fabric=../etc", "A-Z a-z 0-9"},
      {"softnic_fabric=", "A-Z a-z 0-9"},
  };
  for (const Case& c : cases) {
    Options o;
    Options before = o;
    std::vector<std::string> errors = ErrorMessages(ParseOptions(c.item, &o));
    ASSERT_EQ(errors.size(), 1u) << c.item;
    EXPECT_NE(errors[0].find(c.says), std::string::npos) << c.item << ": " << errors[0];
    EXPECT_EQ(o.softnic, before.softnic) << c.item;
    EXPECT_EQ(o.verbosity, before.verbosity) << c.item;
    EXPECT_EQ(o.checks, before.checks) << c.item;
    EXPECT_EQ(o.softnic_fabric, before.softnic_fabric) << c.item;
  }
  Options o;
  EXPECT_TRUE(ParseOptions("softnic=off:buffer_check=full:report_format=sarif:verbosity=2:exitcode=0:"
                           "checks=all;-wr-id-duplicate:softnic_fabric=my-tests_1.x",
                           &o)
                  .ok());
  EXPECT_EQ(o.softnic_fabric, "my-tests_1.x");
}

TEST(Options, HelpListsEveryOption) {
  std::string help = OptionsHelp();
  for (const char* name : {"softnic", "softnic_fabric", "verbosity", "log_path", "help"})
    EXPECT_NE(help.find(name), std::string::npos) << name;
  EXPECT_NE(help.find("[one of: auto, on, off]"), std::string::npos) << help;
  EXPECT_TRUE(IsKnownOption("softnic"));
  EXPECT_FALSE(IsKnownOption("softnicx"));
}

}  // namespace
}  // namespace rdmasan::core
