// cli/fuzz_util: the small pieces every part of `rdmasan fuzz` uses: the
// campaign directory's file names and exit statuses, messages to stderr,
// whole-file reads and writes, directory listings, TCP port probes and
// shell quoting for repro.sh.
//
// May not: follow a link when it reads or writes a campaign file (files are
// opened with O_NOFOLLOW or created by core::CreateForWrite), remove
// anything but plain files of a directory it is given, or know what a
// campaign is (fuzz_campaign.h does).
#ifndef RDMASAN_CLI_FUZZ_UTIL_H_
#define RDMASAN_CLI_FUZZ_UTIL_H_

#include <signal.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace rdmasan::cli::fuzz {

using Clock = std::chrono::steady_clock;
using Json = nlohmann::json;

inline constexpr int kExitUsage = 2;
inline constexpr int kExitFindings = 66;
inline constexpr char kCampaignFile[] = "campaign.json";
inline constexpr char kRunsFile[] = "runs.txt";
inline constexpr uint64_t kBaseline = ~uint64_t(0);  // the run index of enumerate's baseline run

// Set by SIGINT and SIGTERM (OnInterrupt): the campaign stops starting runs.
extern volatile sig_atomic_t g_interrupted;
void OnInterrupt(int);

template <typename... Args>
void Say(const absl::FormatSpec<Args...>& format, const Args&... args) {
  std::fprintf(stderr, "rdmasan fuzz: %s\n", absl::StrFormat(format, args...).c_str());
}

inline uint64_t Mix(uint64_t x) {  // splitmix64
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

bool ReadText(const std::string& path, std::string* out);
bool WriteText(const std::string& path, absl::string_view text, int perm = 0644);
bool AppendText(const std::string& path, absl::string_view text);
bool IsDir(const std::string& path);
// mkdir, refusing a link in its place; true if it is a directory now.
bool MakeDir(const std::string& path);
// The names in `dir` (not . and ..), sorted.
std::vector<std::string> ListDir(const std::string& dir);
// Empties a work directory of ours (plain files only).
void ClearDir(const std::string& dir);
std::string Absolute(const std::string& path);
std::string Basename(absl::string_view path);

// Whether something listens on TCP `port` (IPv4 or IPv6), from /proc.
bool Listening(int port);
// Shell single-quoting; {port} becomes "$port".
std::string ShellWord(absl::string_view arg);
// {port} in `arg` replaced by `port`.
std::string WithPort(const std::string& arg, int port);

// "SIGSEGV" for the signals a run may die of; "signal" for others.
const char* SignalName(int sig);

}  // namespace rdmasan::cli::fuzz

#endif  // RDMASAN_CLI_FUZZ_UTIL_H_
