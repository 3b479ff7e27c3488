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

TEST(Options, HelpListsEveryOption) {
  std::string help = OptionsHelp();
  for (const char* name : {"softnic", "softnic_fabric", "verbosity", "log_path", "help"})
    EXPECT_NE(help.find(name), std::string::npos) << name;
  EXPECT_TRUE(IsKnownOption("softnic"));
  EXPECT_FALSE(IsKnownOption("softnicx"));
}

}  // namespace
}  // namespace rdmasan::core
