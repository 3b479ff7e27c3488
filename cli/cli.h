// cli: the `rdmasan` command's shared pieces (main.cc: run, devices;
// trace_commands.cc: replay, trace).
//
// May not: interpret options beyond checking that they exist and parse
// (the preloaded runtime owns their meaning).
#ifndef RDMASAN_CLI_CLI_H_
#define RDMASAN_CLI_CLI_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace rdmasan::cli {

struct CommandLine {
  std::vector<std::string> options;  // "name=value", validated
  bool help = false;
  std::vector<char*> rest;  // the program and its arguments (run), or extras
};

// Parses leading --name=value options.  Stops at "--" (consumed) or at the
// first argument not starting with "--".  Returns InvalidArgument, saying
// why, on an unknown option, a malformed one, or a bad value; prints
// nothing (UsageError does).
absl::Status ParseCommandLine(int argc, char** argv, CommandLine* cl);

// Prints "rdmasan: <message>" to stderr; returns the usage exit status (2).
int UsageError(const absl::Status& status);

int Replay(int argc, char** argv);
int Fuzz(int argc, char** argv);

// For `rdmasan fuzz` (cli/fuzz.cc): sets LD_PRELOAD (and checks
// RDMASAN_OPTIONS) as `rdmasan run` does, for the runs it forks; and this
// executable's absolute path.  `programs`: the programs of its roles (a
// sanitizer runtime one links goes first in LD_PRELOAD, as for `run`).
bool PrepareEnvironmentForFuzz(const std::vector<std::string>& programs);
std::string SelfExeForFuzz();
int Trace(int argc, char** argv);

}  // namespace rdmasan::cli

#endif  // RDMASAN_CLI_CLI_H_
