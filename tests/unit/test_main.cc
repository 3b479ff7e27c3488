// Unit-test main: every test binary gets a private softnic fabric, so
// parallel test runs never meet.  A binary may ask for a named fabric
// (needed when a test forks a peer process) by defining kFabricName.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"

extern const char* const kRdmasanTestFabric;

int main(int argc, char** argv) {
  std::string fabric = kRdmasanTestFabric;
  if (fabric != "inproc") absl::StrAppend(&fabric, "-", getpid());
  // The softnic tests misuse verbs on purpose; the checkers have their own
  // tests that feed them events directly.
  // Tests that turn checking on provoke findings on purpose: they assert
  // the reporter's counts, and the process exit status stays the tests'.
  std::string opts = absl::StrCat("softnic=on:checking=false:exitcode=0:softnic_fabric=", fabric);
  if (const char* extra = std::getenv("RDMASAN_OPTIONS")) opts = absl::StrCat(extra, ":", opts);
  setenv("RDMASAN_OPTIONS", opts.c_str(), 1);
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
