// rdmasan_man_page: writes rdmasan(1) to stdout at build time (cli/usage).
#include <cstdio>

#include "cli/usage.h"

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s VERSION YYYY-MM-DD\n", argv[0]);
    return 2;
  }
  std::fputs(rdmasan::cli::ManPage(argv[1], argv[2]).c_str(), stdout);
  return 0;
}
