// trace_read_bench: the trace reader alone over a recorded trace, in events
// per second, for bench/speed.sh's replay goal (issue 33: the reader >= 40 M
// events/s, beside `rdmasan replay` of the same trace).  Reads the whole
// trace REPS times (each a fresh TraceReader::Open, as the replay opens it)
// and prints each pass and the best.  Decoding an event into core::Event is
// the reader's work; nothing is checked.  Events are read in batches
// (TraceReader::NextBatch), as the replay reads them.
//
// May not: print a figure for a trace it could not read to the end, or for
// passes that disagree on the number of events (exit 1).
//
// usage: trace_read_bench TRACE [REPS (3)]
// The last line is "trace_read_bench: result events=N mevents_per_s=R".
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/event.h"
#include "traces/trace.h"

int main(int argc, char** argv) {
  if (argc < 2 || argc > 3) {
    std::fprintf(stderr, "usage: trace_read_bench TRACE [REPS]\n");
    return 2;
  }
  const int reps = argc > 2 ? std::atoi(argv[2]) : 3;
  if (reps <= 0) return 2;
  double best = 0;
  uint64_t events = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    // Opened as the replay opens it: each events chunk's checksum checked
    // as the reading reaches it.
    auto reader = rdmasan::traces::TraceReader::Open(
        argv[1], rdmasan::traces::TraceReader::Options{.check_events_on_read = true});
    if (!reader.ok()) {
      std::fprintf(stderr, "trace_read_bench: FAILED: %s\n", std::string(reader.status().message()).c_str());
      return 1;
    }
    // In batches, as `rdmasan replay` reads.
    std::vector<rdmasan::core::Event> batch(512);
    uint64_t count = 0, check = 0;
    for (;;) {
      absl::Status error;
      const size_t n = (*reader)->NextBatch(batch.data(), batch.size(), &error);
      if (!error.ok()) {
        std::fprintf(stderr, "trace_read_bench: FAILED: %s\n", std::string(error.message()).c_str());
        return 1;
      }
      for (size_t i = 0; i < n; ++i) check += batch[i].seq + batch[i].wcs.size();
      count += n;
      if (n < batch.size()) break;
    }
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if ((*reader)->truncated()) {
      std::fprintf(stderr, "trace_read_bench: FAILED: %s\n", (*reader)->warning().c_str());
      return 1;
    }
    if (r > 0 && count != events) {
      std::fprintf(stderr, "trace_read_bench: FAILED: pass %d read %llu events, pass 1 %llu\n", r + 1,
                   static_cast<unsigned long long>(count), static_cast<unsigned long long>(events));
      return 1;
    }
    events = count;
    const double rate = static_cast<double>(count) / secs / 1e6;
    if (rate > best) best = rate;
    std::printf("trace_read_bench: pass %d: %llu events in %.3f s, %.2f M events/s (checksum %llu)\n", r + 1,
                static_cast<unsigned long long>(count), secs, rate, static_cast<unsigned long long>(check));
  }
  std::printf("trace_read_bench: result events=%llu mevents_per_s=%.2f\n",
              static_cast<unsigned long long>(events), best);
  return 0;
}
