// Start-up of the preloaded shim: parse options early so help=1 and option
// errors show before the program runs.
//
// A bad option value (RDMASAN_OPTIONS or __rdmasan_default_options), a
// reporter configuration that cannot work (checks=, report_format=, an
// unreadable suppressions file), a log_path whose file cannot be created
// or a trace= path in a folder that cannot be written stops the program
// here, before main, with one line per problem on stderr and exit status
// 2, as a sanitizer does: a run whose reports or trace would go missing,
// or whose checks are not the ones asked for, is worse than no run.
// Nothing else happens at start: softnic attaches and the trace opens on
// the first verbs call.
//
// These lines are written to stderr here, not through core::Diag: they
// are about the options the reporter is built from, so its log_path may be
// the bad option itself (Diag would first say it writes to stderr instead)
// or a good one whose file would hide, from the person who started the
// program, why it never ran.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/options.h"
#include "core/report.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "traces/trace.h"

namespace {

constexpr int kExitBadOptions = 2;

// The folder the trace will be written to must exist and be writable (the
// file itself is created on the first verbs call, and only then).
std::string TraceFolderError(const std::string& pattern) {
  if (pattern.empty()) return "";
  std::string path = rdmasan::traces::ExpandTracePath(pattern, getpid());
  size_t slash = path.rfind('/');
  std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  if (access(dir.c_str(), W_OK | X_OK) == 0) return "";
  return absl::StrCat("trace: cannot write to folder '", dir, "' of '", path, "': ", std::strerror(errno));
}

__attribute__((constructor)) void RdmasanInit() {
  const auto& opts = rdmasan::core::GlobalOptions();
  if (opts.help) {
    fputs(rdmasan::core::OptionsHelp().c_str(), stderr);
    _exit(0);
  }
  std::vector<std::string> errors = rdmasan::core::StartupErrors();
  if (std::string e = TraceFolderError(opts.trace); !e.empty()) errors.push_back(std::move(e));
  if (std::string e = rdmasan::interpose::ScheduleError(); !e.empty()) errors.push_back(std::move(e));
  if (errors.empty()) {
    // Before the program can fork or exec: its children and later images
    // inherit the run this one began (or belongs to).
    rdmasan::interpose::TraceRun();
    rdmasan::interpose::InstallChaos();
    return;
  }
  int pid = getpid();
  for (const std::string& e : errors) fprintf(stderr, "==%d==rdmasan: ERROR: %s\n", pid, e.c_str());
  fprintf(stderr, "==%d==rdmasan: ERROR: bad options; the program was not run (help=1 lists the options)\n",
          pid);
  _exit(kExitBadOptions);
}

}  // namespace
