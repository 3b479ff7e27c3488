// traces/format: see format.h.
#include "traces/format.h"

#include <cstring>

#include "traces/crc32c.h"

namespace rdmasan::traces {

uint32_t ChunkCrc(const uint8_t* header, const uint8_t* payload, size_t len) {
  return Crc32c(Crc32c(0, header, 28), payload, len);
}

void FillChunkHeader(uint8_t* h, uint32_t len, uint32_t count, uint8_t kind, uint8_t flags, uint32_t stream,
                     uint64_t min_seq) {
  std::memset(h, 0, kChunkHeaderBytes);
  std::memcpy(h + 0, &len, 4);
  std::memcpy(h + 4, &count, 4);
  h[8] = kind;
  h[9] = flags;
  std::memcpy(h + 12, &stream, 4);
  std::memcpy(h + 16, &min_seq, 8);
  uint32_t crc = ChunkCrc(h, h + kChunkHeaderBytes, len);
  std::memcpy(h + 28, &crc, 4);
}

ChunkHeader ReadChunkHeader(const uint8_t* h) {
  ChunkHeader c;
  std::memcpy(&c.len, h, 4);
  std::memcpy(&c.count, h + 4, 4);
  c.kind = h[8];
  c.flags = h[9];
  std::memcpy(&c.stream, h + 12, 4);
  std::memcpy(&c.min_seq, h + 16, 8);
  std::memcpy(&c.crc, h + 28, 4);
  return c;
}

}  // namespace rdmasan::traces
