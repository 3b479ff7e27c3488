// cli: the `rdmasan` command's shared pieces (main.cc: run, devices;
// trace_commands.cc: replay, trace).
#ifndef RDMASAN_CLI_CLI_H_
#define RDMASAN_CLI_CLI_H_

#include <string>
#include <vector>

namespace rdmasan::cli {

struct CommandLine {
  std::vector<std::string> options;  // "name=value", validated
  bool help = false;
  std::vector<char*> rest;  // the program and its arguments (run), or extras
};

// Parses leading --name=value options.  Stops at "--" (consumed) or at the
// first argument not starting with "--".  Returns false (after printing why)
// on an unknown option, a malformed one, or a bad value.
bool ParseCommandLine(int argc, char** argv, CommandLine* cl);

int Replay(int argc, char** argv);
int Trace(int argc, char** argv);

}  // namespace rdmasan::cli

#endif  // RDMASAN_CLI_CLI_H_
