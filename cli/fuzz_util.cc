// cli/fuzz_util: see fuzz_util.h.
#include "cli/fuzz_util.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "core/file.h"

namespace rdmasan::cli::fuzz {

volatile sig_atomic_t g_interrupted = 0;
void OnInterrupt(int) { g_interrupted = 1; }

// ------------------------------------------------------------ small files --

bool ReadText(const std::string& path, std::string* out) {
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return false;
  out->clear();
  char buf[65536];
  ssize_t n;
  while ((n = read(fd, buf, sizeof buf)) > 0) out->append(buf, static_cast<size_t>(n));
  close(fd);
  return n == 0;
}

bool WriteText(const std::string& path, absl::string_view text, int perm) {
  int fd = core::CreateForWrite(path, core::CreateMode::kTruncate, perm);
  if (fd < 0) return false;
  size_t done = 0;
  while (done < text.size()) {
    ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  if (perm != 0644) fchmod(fd, perm);
  close(fd);
  return done == text.size();
}

bool AppendText(const std::string& path, absl::string_view text) {
  int fd = core::CreateForWrite(path, core::CreateMode::kAppend);
  if (fd < 0) return false;
  bool ok = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  return ok;
}

bool IsDir(const std::string& path) {
  struct stat st;
  return lstat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool MakeDir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) == 0) return true;
  return errno == EEXIST && IsDir(path);
}

std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d))
      if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) names.push_back(e->d_name);
    closedir(d);
  }
  std::sort(names.begin(), names.end());
  return names;
}

void ClearDir(const std::string& dir) {
  for (const std::string& n : ListDir(dir)) unlink(absl::StrCat(dir, "/", n).c_str());
}

std::string Absolute(const std::string& path) {
  char buf[PATH_MAX];
  if (realpath(path.c_str(), buf) != nullptr) return buf;
  return path;
}

std::string Basename(absl::string_view path) {
  size_t slash = path.rfind('/');
  return std::string(slash == absl::string_view::npos ? path : path.substr(slash + 1));
}

bool Listening(int port) {
  const std::string hex = absl::StrFormat(":%04X", port);
  for (const char* file : {"/proc/net/tcp", "/proc/net/tcp6"}) {
    std::string text;
    if (!ReadText(file, &text)) continue;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (f.size() > 3 && f[3] == "0A" && absl::EndsWith(f[1], hex)) return true;
    }
  }
  return false;
}

std::string ShellWord(absl::string_view arg) {
  std::string out, quoted;
  auto flush = [&] {
    if (!quoted.empty()) absl::StrAppend(&out, "'", quoted, "'");
    quoted.clear();
  };
  for (size_t i = 0; i < arg.size(); ++i) {
    if (arg.substr(i, 6) == "{port}") {
      flush();
      out += "\"$port\"";
      i += 5;
    } else if (arg[i] == '\'') {
      flush();
      out += "\\'";
    } else {
      quoted += arg[i];
    }
  }
  flush();
  return out.empty() ? "''" : out;
}

std::string WithPort(const std::string& arg, int port) {
  return absl::StrReplaceAll(arg, {{"{port}", absl::StrCat(port)}});
}

const char* SignalName(int sig) {
  switch (sig) {
    case SIGSEGV:
      return "SIGSEGV";
    case SIGBUS:
      return "SIGBUS";
    case SIGABRT:
      return "SIGABRT";
    case SIGFPE:
      return "SIGFPE";
    case SIGILL:
      return "SIGILL";
    case SIGKILL:
      return "SIGKILL";
    case SIGTERM:
      return "SIGTERM";
    case SIGTRAP:
      return "SIGTRAP";
    case SIGSYS:
      return "SIGSYS";
    case SIGINT:
      return "SIGINT";
    case SIGPIPE:
      return "SIGPIPE";
    default:
      return "signal";
  }
}

}  // namespace rdmasan::cli::fuzz
