// traces/tree: the names of the traces of one run's process tree, one file
// per process image (README, "Traces of a process tree"):
//   PATH                the first image, the program `rdmasan run` started
//                       (PATH is the trace= pattern with %p expanded);
//   PATH.<pid>[.<n>]    every other image: a forked child, or an image a
//                       process exec'd into; the first free name of
//                       PATH.<pid>, PATH.<pid>.1, PATH.<pid>.2, ...
//                       (with %p in the pattern, PATH already names the
//                       pid, and its later images are PATH.1, PATH.2, ...).
// A trace being written is PATH.incomplete with an flock held on it by its
// writer, so a live trace is told from a stale leftover (a killed run's):
// the first image replaces a leftover, never a live trace, and the others
// never replace anything.
//
// May not: write, remove or lock any file but to test whether it is locked.
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "traces/trace.h"

namespace rdmasan::traces {
namespace {

bool Exists(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 || errno != ENOENT;
}

// "<digits>" or "<digits>.<digits>", optionally followed by ".incomplete".
bool IsImageSuffix(std::string_view s) {
  if (s.ends_with(".incomplete")) s.remove_suffix(sizeof(".incomplete") - 1);
  int parts = 0;
  while (!s.empty()) {
    size_t dot = s.find('.');
    std::string_view part = s.substr(0, dot);
    if (part.empty() || !std::all_of(part.begin(), part.end(), absl::ascii_isdigit) || ++parts > 2)
      return false;
    if (dot == std::string_view::npos) break;
    s.remove_prefix(dot + 1);
    if (s.empty()) return false;
  }
  return parts > 0;
}

}  // namespace

bool TraceBeingWritten(const std::string& incomplete_path) {
  const int fd = open(incomplete_path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool locked = flock(fd, LOCK_SH | LOCK_NB) != 0 && errno == EWOULDBLOCK;
  close(fd);
  return locked;
}

std::string TracePathForImage(std::string_view pattern, int64_t pid, bool first_image) {
  const std::string path = ExpandTracePath(pattern, pid);
  if (first_image && !TraceBeingWritten(path + ".incomplete")) return path;
  const std::string stem = pattern.find("%p") != std::string_view::npos ? path : absl::StrCat(path, ".", pid);
  for (int n = 0; n < 10000; ++n) {
    std::string name = n == 0 ? stem : absl::StrCat(stem, ".", n);
    if (!Exists(name) && !Exists(name + ".incomplete")) return name;
  }
  return absl::StrCat(stem, ".", 10000);  // creating it fails rather than replace a trace
}

std::vector<std::string> TraceSetMembers(const std::string& path) {
  std::string base = path;
  if (base.ends_with(".incomplete")) base.resize(base.size() - (sizeof(".incomplete") - 1));
  const size_t slash = base.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : base.substr(0, slash + 1);
  const std::string name = slash == std::string::npos ? base : base.substr(slash + 1);
  std::vector<std::string> out;
  DIR* d = opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    std::string_view entry = e->d_name;
    if (entry.size() <= name.size() + 1 || !entry.starts_with(name) || entry[name.size()] != '.') continue;
    if (!IsImageSuffix(entry.substr(name.size() + 1))) continue;
    out.push_back(slash == std::string::npos ? std::string(entry) : dir + std::string(entry));
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace rdmasan::traces
