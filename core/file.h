// core/file: how rdmasan opens the files it writes (traces, logs, SARIF
// logs, decision logs, fuzz output) and reads (suppressions, schedules,
// traces) on a machine other users share.  A path may name a folder anyone
// can write to (/tmp): nothing another user planted there — a symlink to
// the victim's files, a file of theirs, a FIFO, a folder — is ever followed,
// written, or waited on.
//
// Writing: a file is ours when it is a regular file owned by our effective
// uid, with one link, that no other user can write (mode bits 0022 clear).
// A new file is created 0600 with O_EXCL (reports carry stacks and
// addresses; only fuzz campaign folders ask for 0644); an existing one is
// appended to or replaced only after fstat of the open fd says it is ours,
// and is truncated only after that (never O_TRUNC at open).
// Reading: an input file must be a regular file (never a folder, FIFO or
// device) of bounded size.
//
// May not: follow a symlink at the last component of a path, write through
// or truncate a file that is not ours, block on a FIFO, print, or allocate
// on a hot path.
#ifndef RDMASAN_CORE_FILE_H_
#define RDMASAN_CORE_FILE_H_

#include <sys/stat.h>

#include <cstddef>
#include <string>

namespace rdmasan::core {

enum class CreateMode {
  kFresh,     // a new file: a stale one of ours is removed first; a symlink,
              // or a file we may not remove, is an error (EEXIST)
  kAppend,    // append, creating it if absent; a symlink is an error (ELOOP),
              // an existing file that is not ours an error (EPERM)
  kTruncate,  // replace the contents, creating it if absent; as kAppend
};

// Opens `path` for writing (O_CLOEXEC, mode `perm` & ~umask for a new file).
// Returns the fd, or -1 with errno set and, when `why` is given, a reason a
// person can act on ("owned by uid 1001", "a directory", ...).
int CreateForWrite(const std::string& path, CreateMode mode, int perm = 0600, std::string* why = nullptr);

// "" when `st` describes a file of ours (see above), else why it is not.
std::string WhyNotOurs(const struct stat& st);

// "" when `path` is absent or a file of ours that CreateForWrite may append
// to or replace; else why not ("a symlink", "owned by uid 0", ...).  For
// checking at start a path that is written only at exit.
std::string CheckWritable(const std::string& path);

// The largest input file rdmasan reads whole (suppressions, schedules).
inline constexpr size_t kMaxInputFile = 16u << 20;

// Reads a whole input file into `out`: it must be a regular file (opened
// O_NONBLOCK, so a FIFO is refused, not waited on) of at most `max_bytes`.
// Returns "" or why not (errno text, "a directory", "a FIFO", "larger than
// 16 MiB", ...).
std::string ReadInputFile(const std::string& path, std::string* out, size_t max_bytes = kMaxInputFile);

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_FILE_H_
