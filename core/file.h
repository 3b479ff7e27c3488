// core/file: how rdmasan creates the files it writes (traces, logs, SARIF
// logs) on a machine other users share.  A path may name a folder anyone
// can write to (/tmp): nothing another user planted there — a symlink to
// the victim's files, a file of theirs — is ever followed or written.
//
// May not: follow a symlink at the last component of a path it creates,
// write through a file that existed before unless the caller asked to
// append to (or replace) its own file, print, or allocate on a hot path.
#ifndef RDMASAN_CORE_FILE_H_
#define RDMASAN_CORE_FILE_H_

#include <string>

namespace rdmasan::core {

enum class CreateMode {
  kFresh,     // a new file: a stale one of ours is removed first; a symlink,
              // or a file we may not remove, is an error (EEXIST)
  kAppend,    // append, creating it if absent; a symlink is an error (ELOOP)
  kTruncate,  // replace the contents, creating it if absent; a symlink is an
              // error (ELOOP)
};

// Opens `path` for writing (O_CLOEXEC, mode & ~umask for a new file).
// Returns the fd, or -1 with errno set.
int CreateForWrite(const std::string& path, CreateMode mode, int perm = 0644);

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_FILE_H_
