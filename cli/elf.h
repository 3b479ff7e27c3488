// cli/elf: what `rdmasan run` must know of a program before it execs it,
// read from the ELF file: whether it is dynamically linked (LD_PRELOAD can
// reach it at all), and the sanitizer runtime it links (libasan, libtsan,
// libhwasan: each must be the first library loaded, so it goes first in
// LD_PRELOAD, ahead of librdmasan.so), and whether a file named as the
// shim (RDMASAN_LIB) is a shared object the loader can preload.
//
// May not: map or execute the file, follow its dependencies, or trust a
// single offset or size in it: every header, table and string is bounds-
// checked against the file (a malformed ELF is "not an ELF we can read",
// and `rdmasan run` then leaves the decision to the kernel and the loader).
#ifndef RDMASAN_CLI_ELF_H_
#define RDMASAN_CLI_ELF_H_

#include <string>
#include <vector>

namespace rdmasan::cli {

struct ElfInfo {
  bool elf = false;                 // a 64-bit little-endian ELF we could read
  bool executable = false;          // ET_EXEC or ET_DYN
  bool shared_object = false;       // ET_DYN
  bool interpreter = false;         // has PT_INTERP: the dynamic loader runs it
  std::vector<std::string> needed;  // DT_NEEDED sonames, in order
};

// Reads `path`; info.elf is false for anything else (a script, a short or
// malformed file).
ElfInfo ReadElf(const std::string& path);

// Where execvp() would find `name`: `name` itself when it has a '/', else
// the first executable regular file of that name on $PATH (glibc's default
// path when PATH is unset).  "" when there is none.
std::string ResolveProgram(const std::string& name);

// The sanitizer runtimes among `needed` that must come first in LD_PRELOAD
// (libasan.so.N, libtsan.so.N, libhwasan.so), in order.
std::vector<std::string> FirstRuntimes(const std::vector<std::string>& needed);

}  // namespace rdmasan::cli

#endif  // RDMASAN_CLI_ELF_H_
