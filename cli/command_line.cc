// cli/command_line: the --name=value options of `rdmasan run`, `devices`,
// `replay` and `fuzz` (see cli.h), checked against core/options.
//
// May not: interpret an option beyond checking that it exists and parses
// (the preloaded runtime owns their meaning), or print but in UsageError.
#include <cstdio>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "cli/cli.h"
#include "core/options.h"
#include "core/status.h"

namespace rdmasan::cli {

absl::Status ParseCommandLine(int argc, char** argv, CommandLine* cl) {
  int i = 0;
  for (; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (arg == "--") {
      ++i;
      break;
    }
    if (!absl::StartsWith(arg, "--") && arg != "-h") break;
    if (arg == "--help" || arg == "-h") {
      cl->help = true;
      continue;
    }
    absl::string_view body = arg.substr(2);
    size_t eq = body.find('=');
    absl::string_view name = body.substr(0, eq);
    if (name.empty())
      return absl::InvalidArgumentError(
          absl::StrFormat("malformed option '%s' (expected --name=value)", arg));
    // core/options takes std::string_view, which Debian's absl (built with
    // ABSL_OPTION_USE_STD_STRING_VIEW 0) does not share with
    // absl::string_view: pass std::string, which converts to both.
    if (!rdmasan::core::IsKnownOption(std::string(name)))
      return absl::InvalidArgumentError(
          absl::StrFormat("unknown option '--%s' (`rdmasan run --help=1` lists the options)", name));
    if (eq == absl::string_view::npos)
      return absl::InvalidArgumentError(
          absl::StrFormat("option '--%s' needs a value (--%s=value)", name, name));
    absl::string_view value = body.substr(eq + 1);
    // RDMASAN_OPTIONS separates items with ':', spaces and newlines, so a
    // value holding one of them cannot be passed through it.
    // A fault or chaos spec's settings are the exception: its ':' items
    // continue faults= (chaos=) there, unless one would read as an option
    // of its own.
    bool spec_colons = name == "faults" || name == "chaos";
    if (spec_colons)
      for (absl::string_view item : absl::StrSplit(value, ':'))
        if (rdmasan::core::IsKnownOption(std::string(item.substr(0, item.find('='))))) spec_colons = false;
    if (value.find_first_of(spec_colons ? " \n" : ": \n") != absl::string_view::npos)
      return absl::InvalidArgumentError(
          absl::StrFormat("option '--%s': value '%s' may not contain ':', spaces or newlines", name, value));
    std::string item = absl::StrCat(name, "=", value);
    rdmasan::core::Options scratch;
    // One item (no separators): at most one error.
    RDMASAN_RETURN_IF_ERROR(rdmasan::core::ParseOptions(std::string(item), &scratch));
    if (name == "help" && scratch.help) cl->help = true;
    cl->options.push_back(std::move(item));
  }
  for (; i < argc; ++i) cl->rest.push_back(argv[i]);
  return absl::OkStatus();
}

int UsageError(const absl::Status& status) {
  std::fprintf(stderr, "rdmasan: %s\n", std::string(status.message()).c_str());
  return 2;  // a bad command line, as main.cc's kExitUsage
}

}  // namespace rdmasan::cli
