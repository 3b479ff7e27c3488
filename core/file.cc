#include "core/file.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmasan::core {
namespace {

const char* KindOf(mode_t m) {
  if (S_ISDIR(m)) return "a directory";
  if (S_ISLNK(m)) return "a symlink";
  if (S_ISFIFO(m)) return "a FIFO";
  if (S_ISSOCK(m)) return "a socket";
  if (S_ISCHR(m)) return "a character device";
  if (S_ISBLK(m)) return "a block device";
  return nullptr;
}

void Say(std::string* why, std::string text) {
  if (why) *why = std::move(text);
}

// Checks the file open at `fd`; on failure closes it and returns -1 with
// errno EPERM (ELOOP cannot happen: O_NOFOLLOW refused a link at open).
int KeepIfOurs(int fd, std::string* why) {
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    errno = e;
    Say(why, std::strerror(e));
    return -1;
  }
  if (std::string w = WhyNotOurs(st); !w.empty()) {
    close(fd);
    errno = S_ISDIR(st.st_mode) ? EISDIR : EPERM;
    Say(why, std::move(w));
    return -1;
  }
  return fd;
}

// Why opening `path` failed with `err`: what is there when that is the
// reason (a FIFO without a reader is ENXIO, a folder EISDIR, a symlink
// ELOOP), else the errno text.  Restores errno.
std::string WhyOpenFailed(const std::string& path, int err) {
  struct stat st;
  std::string why = std::strerror(err);
  if (err != ENOENT && lstat(path.c_str(), &st) == 0)
    if (const char* kind = KindOf(st.st_mode)) why = kind;
  errno = err;
  return why;
}

}  // namespace

std::string WhyNotOurs(const struct stat& st) {
  if (const char* kind = KindOf(st.st_mode)) return kind;
  if (!S_ISREG(st.st_mode)) return "not a regular file";
  if (st.st_uid != geteuid()) return absl::StrCat("owned by uid ", st.st_uid, ", not by us");
  if (st.st_nlink != 1) return absl::StrCat("has ", st.st_nlink, " hard links");
  if (st.st_mode & 0022)
    return absl::StrFormat("mode %04o lets other users write it (chmod go-w it, or remove it)",
                           st.st_mode & 07777);
  return "";
}

std::string CheckWritable(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return errno == ENOENT ? "" : std::strerror(errno);
  return WhyNotOurs(st);
}

int CreateForWrite(const std::string& path, CreateMode mode, int perm, std::string* why) {
  // O_NONBLOCK: opening a FIFO planted at the path never waits for a reader
  // (and the fstat below refuses it); it is cleared before returning.
  constexpr int kBase = O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK;
  int fd = -1;
  if (mode == CreateMode::kFresh) {
    fd = open(path.c_str(), kBase | O_EXCL, perm);
    if (fd < 0 && errno == EEXIST) {
      // Something is there.  Only a file of ours is a stale leftover (a run
      // killed before it renamed its trace): remove it and try once more.
      // A symlink, or anything of another user's, stays, and creating fails.
      struct stat st;
      if (lstat(path.c_str(), &st) != 0) {
        Say(why, std::strerror(errno));
        return -1;
      }
      if (std::string w = WhyNotOurs(st); !w.empty()) {
        Say(why, std::move(w));
        errno = EEXIST;
        return -1;
      }
      if (unlink(path.c_str()) != 0) {
        Say(why, std::strerror(errno));
        return -1;
      }
      fd = open(path.c_str(), kBase | O_EXCL, perm);
    }
    if (fd < 0) {
      Say(why, WhyOpenFailed(path, errno));
      return -1;
    }
  } else {
    fd = open(path.c_str(), kBase | (mode == CreateMode::kAppend ? O_APPEND : 0), perm);
    if (fd < 0) {
      Say(why, WhyOpenFailed(path, errno));
      return -1;
    }
    if (KeepIfOurs(fd, why) < 0) return -1;
    if (mode == CreateMode::kTruncate && ftruncate(fd, 0) != 0) {
      const int e = errno;
      close(fd);
      errno = e;
      Say(why, std::strerror(e));
      return -1;
    }
  }
  const int fl = fcntl(fd, F_GETFL);
  if (fl >= 0) fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

std::string ReadInputFile(const std::string& path, std::string* out, size_t max_bytes) {
  out->clear();
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return std::strerror(errno);
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    close(fd);
    return std::strerror(e);
  }
  if (!S_ISREG(st.st_mode)) {
    close(fd);
    const char* kind = KindOf(st.st_mode);
    return absl::StrCat(kind ? kind : "not a regular file", ", not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    close(fd);
    return absl::StrFormat("%d bytes, larger than the limit of %d", st.st_size, max_bytes);
  }
  // Read at most one byte past the limit: a file that grows while read
  // is still bounded.
  char buf[16384];
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      close(fd);
      out->clear();
      return std::strerror(e);
    }
    if (n == 0) break;
    out->append(buf, static_cast<size_t>(n));
    if (out->size() > max_bytes) {
      close(fd);
      out->clear();
      return absl::StrFormat("larger than the limit of %d bytes", max_bytes);
    }
  }
  close(fd);
  return "";
}

}  // namespace rdmasan::core
