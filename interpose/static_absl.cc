// What librdmasan.so needs to take Debian's Abseil archives in statically
// (interpose/static_absl.cmake says why and how): the archives are built
// position-independent for executables, and three of their definitions
// cannot go into a shared library as they are.
//
//  - libabsl_base.a's sysinfo.cc.o keeps a thread_local with the
//    local-exec TLS model (GetCachedTID, which nothing in the shim calls):
//    the build drops that object, and NumCPUs and NominalCPUFrequency, the
//    two of its functions Abseil's spin locks and Mutex call, are defined
//    here, to the contract of absl/base/internal/sysinfo.h;
//  - libabsl_str_format_internal.a reads libc's `stderr` PC-relative (it
//    would need a copy relocation): the build renames that reference to
//    rdmasan_absl_stderr, defined here as libc's stderr stream.
//  (raw_hash_set and cordz_functions, with thread_locals of their own, stay
//  shared libraries.)
//
// May not: run anything at start-up (both functions compute on their first
// call, as Abseil's own do), or be linked anywhere but librdmasan.so.
#include <time.h>
#include <unistd.h>
#include <x86intrin.h>

#include <cstdio>
#include <cstdlib>

#include "absl/base/internal/sysinfo.h"

extern "C" {
extern FILE _IO_2_1_stderr_;  // libc's standard error stream: what `stderr` holds
// A constant initializer: valid from the first instruction, with no
// constructor to wait for.
__attribute__((visibility("hidden"))) FILE* rdmasan_absl_stderr = &_IO_2_1_stderr_;
}

namespace absl {
ABSL_NAMESPACE_BEGIN
namespace base_internal {
namespace {

// A value in kHz read from a sysfs file, or 0.
double ReadKhz(const char* path) {
  FILE* f = std::fopen(path, "re");
  if (!f) return 0;
  long khz = 0;
  if (std::fscanf(f, "%ld", &khz) != 1 || khz <= 0) khz = 0;
  std::fclose(f);
  return static_cast<double>(khz) * 1e3;
}

double NowSeconds() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// The cycle counter's rate (CycleClock reads the TSC on x86-64): the
// kernel's figure when it publishes one, else the counter measured against
// the monotonic clock over 2 ms.
double MeasureFrequency() {
  if (double hz = ReadKhz("/sys/devices/system/cpu/cpu0/tsc_freq_khz"); hz > 0) return hz;
  const double t0 = NowSeconds();
  const unsigned long long c0 = __rdtsc();
  const timespec pause = {0, 2000000};
  nanosleep(&pause, nullptr);
  const double t1 = NowSeconds();
  const unsigned long long c1 = __rdtsc();
  if (t1 > t0 && c1 > c0) return static_cast<double>(c1 - c0) / (t1 - t0);
  if (double hz = ReadKhz("/sys/devices/system/cpu/cpu0/cpufreq/cpuinfo_max_freq"); hz > 0) return hz;
  return 1.0;  // what Abseil answers where it cannot tell
}

}  // namespace

int NumCPUs() {
  static const int n = [] {
    long online = sysconf(_SC_NPROCESSORS_ONLN);
    return online > 0 ? static_cast<int>(online) : 1;
  }();
  return n;
}

double NominalCPUFrequency() {
  static const double hz = MeasureFrequency();
  return hz;
}

}  // namespace base_internal
ABSL_NAMESPACE_END
}  // namespace absl
