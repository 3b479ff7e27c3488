#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

namespace rdmasan::core {

int CreateForWrite(const std::string& path, CreateMode mode, int perm) {
  constexpr int kBase = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC;
  switch (mode) {
    case CreateMode::kAppend:
      return open(path.c_str(), kBase | O_APPEND, perm);
    case CreateMode::kTruncate:
      return open(path.c_str(), kBase | O_TRUNC, perm);
    case CreateMode::kFresh:
      break;
  }
  int fd = open(path.c_str(), kBase | O_EXCL, perm);
  if (fd >= 0 || errno != EEXIST) return fd;
  // Something is there.  Only a regular file of ours is a stale leftover
  // (a run killed before it renamed its trace): remove it and try once more.
  // A symlink, or anything of another user's, stays, and creating fails.
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return -1;
  if (!S_ISREG(st.st_mode) || st.st_uid != geteuid()) {
    errno = EEXIST;
    return -1;
  }
  if (unlink(path.c_str()) != 0) return -1;
  return open(path.c_str(), kBase | O_EXCL, perm);
}

}  // namespace rdmasan::core
