// softnic/user_dir: where softnic keeps a user's files.  See user_dir.h.
#include "softnic/user_dir.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/magic.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/statfs.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "core/report.h"

namespace rdmasan::softnic {
namespace {

constexpr size_t kRandomHex = 12;

// One message per process about a squatted name.
std::atomic<bool> g_said_squatted{false};

std::string Trimmed(std::string d) {
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  return d;
}

// A runtime directory to keep the user directory in: ours, private, not a
// link, on a memory file system (a fabric file on a disk would be written
// back).
bool RuntimeDirUsable(const std::string& d) {
  if (d.empty() || d[0] != '/') return false;
  struct stat st;
  struct statfs fs;
  if (lstat(d.c_str(), &st) != 0 || !IsPrivate(st, S_IFDIR) || statfs(d.c_str(), &fs) != 0) return false;
  return fs.f_type == TMPFS_MAGIC || fs.f_type == RAMFS_MAGIC;
}

enum class Made { kOk, kNotOurs, kError };

// Creates `path` 0700 if missing; kOk if it is then a private directory of
// ours, kNotOurs if something else holds the name, kError (errno) if it
// cannot be made.
Made MakePrivate(const std::string& path) {
  if (mkdir(path.c_str(), 0700) != 0 && errno != EEXIST) return Made::kError;
  const int fd = open(path.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  struct stat st;
  const bool ok = fd >= 0 && fstat(fd, &st) == 0 && IsPrivate(st, S_IFDIR);
  if (fd >= 0) close(fd);
  return ok ? Made::kOk : Made::kNotOurs;
}

// A random directory's name: <prefix><12 lowercase hex digits>.
bool RandomShape(const char* name, const std::string& prefix) {
  if (strncmp(name, prefix.c_str(), prefix.size()) != 0) return false;
  const char* hex = name + prefix.size();
  if (strlen(hex) != kRandomHex) return false;
  for (const char* p = hex; *p; ++p)
    if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'))) return false;
  return true;
}

// The least name of the random shape in `base_fd` that is a private
// directory of ours; "" if none.
std::string FindRandom(int base_fd, const std::string& prefix) {
  const int dup_fd = fcntl(base_fd, F_DUPFD_CLOEXEC, 0);
  DIR* d = dup_fd >= 0 ? fdopendir(dup_fd) : nullptr;
  if (!d) {
    if (dup_fd >= 0) close(dup_fd);
    return "";
  }
  std::string best;
  while (const dirent* e = readdir(d)) {
    struct stat st;
    if (RandomShape(e->d_name, prefix) && (best.empty() || best > e->d_name) &&
        fstatat(base_fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) == 0 && IsPrivate(st, S_IFDIR))
      best = e->d_name;
  }
  closedir(d);
  return best;
}

// The user directory when its predictable name in `base` is taken: a
// random name, found again by every process of the user.  The flock on
// `base` makes two processes that arrive first make one directory; it is
// waited for at most a second (anyone can hold it, and a holder delays,
// never denies).
bool RandomDir(const std::string& base, const std::string& prefix, std::string* out) {
  const int base_fd = open(base.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (base_fd < 0) return false;
  bool locked = false;
  for (int waited = 0; waited < 1000; ++waited) {
    if (flock(base_fd, LOCK_EX | LOCK_NB) == 0) {
      locked = true;
      break;
    }
    if (errno != EWOULDBLOCK && errno != EINTR) break;
    const timespec ms{0, 1000000};
    nanosleep(&ms, nullptr);
  }
  std::string name = FindRandom(base_fd, prefix);
  for (int attempt = 0; name.empty() && attempt < 16; ++attempt) {
    unsigned char r[kRandomHex / 2];
    if (getrandom(r, sizeof(r), 0) != static_cast<ssize_t>(sizeof(r))) break;
    std::string candidate = prefix;
    for (unsigned char c : r) {
      char hex[3];
      snprintf(hex, sizeof(hex), "%02x", c);
      candidate += hex;
    }
    if (mkdirat(base_fd, candidate.c_str(), 0700) != 0) {
      if (errno == EEXIST) continue;
      break;
    }
    struct stat st;
    if (fstatat(base_fd, candidate.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 && IsPrivate(st, S_IFDIR))
      name = candidate;
  }
  if (locked) flock(base_fd, LOCK_UN);
  close(base_fd);
  if (name.empty()) return false;
  *out = absl::StrCat(base, "/", name);
  return true;
}

// The user directory under `base` (RDMASAN_SOFTNIC_DIR or /dev/shm):
// rdmasan-<euid>.d, or a random name when that is taken.
bool DirIn(const std::string& base, std::string* out) {
  const std::string prefix = absl::StrCat("rdmasan-", geteuid(), ".");
  const std::string predictable = absl::StrCat(base, "/", prefix, "d");
  switch (MakePrivate(predictable)) {
    case Made::kOk:
      *out = predictable;
      return true;
    case Made::kError:
      core::Diag(
          absl::StrCat("softnic: cannot create ", predictable, ": ", strerror(errno),
                       "; softnic is unavailable: set RDMASAN_SOFTNIC_DIR to a directory you can write"));
      return false;
    case Made::kNotOurs:
      break;
  }
  if (!RandomDir(base, prefix, out)) {
    core::Diag(
        absl::StrCat("softnic: ", predictable, " is not this user's private directory (",
                     WhyNotOurs(predictable, S_IFDIR), ") and no other could be made in ", base,
                     "; softnic is unavailable: set RDMASAN_SOFTNIC_DIR to a directory only you can write"));
    return false;
  }
  if (!g_said_squatted.exchange(true))
    core::Diag(absl::StrCat("softnic: ", predictable, " is not this user's private directory (",
                            WhyNotOurs(predictable, S_IFDIR), "); using ", *out,
                            " instead, a name no other user could take first"));
  return true;
}

}  // namespace

bool IsPrivate(const struct stat& st, mode_t type) {
  return (st.st_mode & S_IFMT) == type && st.st_uid == geteuid() && (st.st_mode & 077) == 0;
}

std::string WhyNotOurs(const std::string& path, mode_t type) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) return strerror(errno);
  if (S_ISLNK(st.st_mode)) return "a symbolic link";
  if (st.st_uid != geteuid()) return absl::StrCat("owned by uid ", st.st_uid);
  if ((st.st_mode & S_IFMT) != type) {
    if (S_ISDIR(st.st_mode)) return "a directory";
    return type == S_IFDIR ? "not a directory" : "not a regular file";
  }
  char mode[8];
  snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return absl::StrCat("mode ", mode, ", open to other users");
}

bool UserPrivateDir(std::string* out) {
  if (const char* d = getenv("RDMASAN_SOFTNIC_DIR"); d && *d) return DirIn(Trimmed(d), out);
  std::string runtime;
  if (const char* x = getenv("XDG_RUNTIME_DIR"); x && RuntimeDirUsable(Trimmed(x)))
    runtime = Trimmed(x);
  else if (const std::string run = absl::StrCat("/run/user/", geteuid()); RuntimeDirUsable(run))
    runtime = run;
  if (!runtime.empty()) {
    // Nobody else can create a name in the runtime directory; what holds
    // ours is our own doing.
    *out = absl::StrCat(runtime, "/rdmasan");
    if (MakePrivate(*out) == Made::kOk) return true;
    core::Diag(absl::StrCat("softnic: ", *out, " is not a private directory (", WhyNotOurs(*out, S_IFDIR),
                            "); softnic is unavailable: remove it"));
    return false;
  }
  return DirIn("/dev/shm", out);
}

}  // namespace rdmasan::softnic
