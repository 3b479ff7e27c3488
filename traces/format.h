// traces/format: the trace file's framing, shared by the writer and the
// reader: the prologue, the 32-byte chunk header with its checksum, and the
// numbering of chunk kinds and record codes (FORMAT.md sections 1-3).
//
// The numbers here are the format: changing one is a format version change
// (FORMAT.md, "Versions"), never a refactor.
//
// May not: depend on anything but core/event.h (for the EventKind count);
// allocate or lock (FillChunkHeader runs on the fatal-signal path).
#ifndef RDMASAN_TRACES_FORMAT_H_
#define RDMASAN_TRACES_FORMAT_H_

#include <cstddef>
#include <cstdint>

#include "core/event.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the trace format is little-endian; add byte swaps");

namespace rdmasan::traces {

inline constexpr char kMagic[8] = {'R', 'D', 'M', 'A', 'S', 'A', 'N', 'T'};
inline constexpr size_t kPrologueBytes = 16;
inline constexpr size_t kChunkHeaderBytes = 32;

enum ChunkKind : uint8_t { kChunkHeader = 1, kChunkEvents = 2, kChunkMeta = 3, kChunkEnd = 4 };
inline constexpr uint8_t kFlagSorted = 1;  // events chunk: records in increasing seq

// Record kind codes.  Event kinds: 1..31 in EventKind's order (FORMAT.md).
// Adding an EventKind breaks the static_assert on purpose: give it a code
// (>= 64 with a length prefix for a minor version, see FORMAT.md).
// kDecision is not yet given a code (pending: a length-prefixed record
// >= 64, format 1.1); the writer drops it.
inline constexpr int kNumEventKinds = static_cast<int>(core::EventKind::kDecision);
static_assert(static_cast<int>(core::EventKind::kCount) == 32,
              "new EventKind: update the trace format (FORMAT.md, traces/format.h)");
inline constexpr uint32_t kFirstEventCode = 1;
inline constexpr uint32_t kCodeStack = 32;
inline constexpr uint32_t kCodeModule = 33;
inline constexpr uint32_t kFirstSkippableCode = 64;  // >= 64: varint length, then body
inline constexpr int kNumCodes = 32;                 // template slots (index = code)

inline uint32_t KindCode(core::EventKind k) { return kFirstEventCode + static_cast<uint32_t>(k); }

// A chunk header as stored (FORMAT.md, "Chunks").
struct ChunkHeader {
  uint32_t len = 0;  // payload bytes
  uint32_t count = 0;
  uint8_t kind = 0;
  uint8_t flags = 0;
  uint32_t stream = 0;
  uint64_t min_seq = 0;
  uint32_t crc = 0;
};

// Writes the header at h (kChunkHeaderBytes), checksumming it together with
// the len payload bytes that must already follow it.
void FillChunkHeader(uint8_t* h, uint32_t len, uint32_t count, uint8_t kind, uint8_t flags, uint32_t stream,
                     uint64_t min_seq);
ChunkHeader ReadChunkHeader(const uint8_t* h);
// The checksum a chunk should carry: of the header's first 28 bytes, then
// the payload.
uint32_t ChunkCrc(const uint8_t* header, const uint8_t* payload, size_t len);

}  // namespace rdmasan::traces

#endif  // RDMASAN_TRACES_FORMAT_H_
