// libFuzzer target: arbitrary bytes read as a trace.  Opens them through a
// memfd (the reader maps files), reads the header, iterates every record and
// maps every stack to module offsets, one event at a time and in batches.
// Must never crash, hang or leak.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "traces/trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  int fd = memfd_create("trace", MFD_CLOEXEC);
  if (fd < 0) return 0;
  size_t off = 0;
  while (off < size) {
    ssize_t n = write(fd, data + off, size - off);
    if (n <= 0) break;
    off += static_cast<size_t>(n);
  }
  std::string path = "/proc/self/fd/" + std::to_string(fd);
  auto reader = rdmasan::traces::TraceReader::Open(path);
  if (reader.ok()) {
    rdmasan::core::Event e;
    for (int i = 0; i < 10000000; ++i) {
      auto more = (*reader)->Next(&e);
      if (!more.ok() || !*more) break;
      if (e.stack) (void)(*reader)->ModuleOffsets(e.stack);
    }
    (void)(*reader)->truncated();
  }
  // Again as `rdmasan replay` reads: in batches (TraceReader::NextBatch,
  // whose runs of one chunk's events take another path), the events
  // chunks' checksums checked as each is reached.
  auto batched = rdmasan::traces::TraceReader::Open(
      path, rdmasan::traces::TraceReader::Options{.check_events_on_read = true});
  if (batched.ok()) {
    std::vector<rdmasan::core::Event> batch(7);
    for (int i = 0; i < 10000000 / 7; ++i) {
      absl::Status error;
      const size_t n = (*batched)->NextBatch(batch.data(), batch.size(), &error);
      for (size_t k = 0; k < n; ++k)
        if (batch[k].stack) (void)(*batched)->ModuleOffsets(batch[k].stack);
      if (!error.ok() || n < batch.size()) break;
    }
  }
  close(fd);
  return 0;
}
