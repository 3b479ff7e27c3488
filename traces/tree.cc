// traces/tree: the names of the traces of one run's process tree, one file
// per process image (docs/traces.md, "Process trees"):
//   PATH                the run's first image to record (the program
//                       `rdmasan run` started, or the first of its
//                       descendants to make a verbs call); PATH is the
//                       trace= pattern with %p expanded;
//   PATH.<pid>[.<n>]    every other image: a forked child, or an image a
//                       process exec'd into, when PATH (or PATH.incomplete)
//                       already holds a trace of this run: the first free
//                       name of PATH.<pid>, PATH.<pid>.1, PATH.<pid>.2, ...
//                       (with %p in the pattern PATH already names the pid,
//                       and a later image of it is PATH.1, PATH.2, ...).
// A run is told by its id (the first image's pid and start time, inherited
// through the environment), which each trace's header carries as its "run"
// property: a trace of an earlier run at PATH is replaced, as before.  A
// trace being written is PATH.incomplete with an flock held on it by its
// writer, so a live trace is never replaced, whatever its run.  The name is
// chosen and the file created under an flock of the folder, so two images
// starting at once never both take PATH.
//
// May not: write or remove any file but the trace it opens (a leftover it
// replaces is removed by TraceWriter::Open).
#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "traces/format.h"
#include "traces/header.h"
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

namespace {

// Whether the trace at `path` (complete or being written) was recorded in
// run `run`: its header's "run" property.
bool OfRun(const std::string& path, const std::string& run) {
  const int fd = open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  uint8_t head[kPrologueBytes + kChunkHeaderBytes];
  std::string payload;
  bool ok = pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) &&
            std::memcmp(head, kMagic, sizeof kMagic) == 0;
  if (ok) {
    const ChunkHeader c = ReadChunkHeader(head + kPrologueBytes);
    ok = c.kind == kChunkHeader && c.len <= (16u << 20);
    if (ok) {
      payload.resize(c.len);
      ok = pread(fd, payload.data(), c.len, sizeof head) == static_cast<ssize_t>(c.len);
    }
  }
  close(fd);
  TraceHeader h;
  if (!ok ||
      !DecodeHeader(reinterpret_cast<const uint8_t*>(payload.data()), payload.size(), sizeof head, &h).ok())
    return false;
  for (const auto& [k, v] : h.properties)
    if (k == "run") return v == run;
  return false;
}

// Holds an flock on the folder of `path` while it lives (none if the folder
// cannot be opened for reading: then nothing is serialized).
class FolderLock {
 public:
  explicit FolderLock(const std::string& path) {
    const size_t slash = path.rfind('/');
    const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
    fd_ = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd_ >= 0)
      while (flock(fd_, LOCK_EX) != 0 && errno == EINTR) {}
  }
  ~FolderLock() {
    if (fd_ >= 0) close(fd_);
  }
  FolderLock(const FolderLock&) = delete;
  FolderLock& operator=(const FolderLock&) = delete;

 private:
  int fd_ = -1;
};

}  // namespace

std::string TracePathForImage(std::string_view pattern, int64_t pid, const std::string& run) {
  const std::string path = ExpandTracePath(pattern, pid);
  const std::string incomplete = path + ".incomplete";
  if (!TraceBeingWritten(incomplete) && !OfRun(path, run) && !OfRun(incomplete, run)) return path;
  const std::string stem = pattern.find("%p") != std::string_view::npos ? path : absl::StrCat(path, ".", pid);
  for (int n = 0; n < 10000; ++n) {
    std::string name = n == 0 ? stem : absl::StrCat(stem, ".", n);
    if (!Exists(name) && !Exists(name + ".incomplete")) return name;
  }
  return absl::StrCat(stem, ".", 10000);  // creating it fails rather than replace a trace
}

absl::StatusOr<std::unique_ptr<TraceWriter>> OpenImageTrace(std::string_view pattern, int64_t pid,
                                                            const std::string& run, TraceHeader header) {
  header.properties.push_back({"run", run});
  FolderLock lock(ExpandTracePath(pattern, pid));
  return TraceWriter::Open(TracePathForImage(pattern, pid, run), header);
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
