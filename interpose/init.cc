// Start-up of the preloaded shim: parse options early so help=1 and option
// errors show before the program runs.
#include <unistd.h>

#include <cstdio>

#include "core/options.h"

namespace {

__attribute__((constructor)) void RdmasanInit() {
  const auto& opts = rdmasan::core::GlobalOptions();
  if (opts.help) {
    fputs(rdmasan::core::OptionsHelp().c_str(), stderr);
    _exit(0);
  }
}

}  // namespace
