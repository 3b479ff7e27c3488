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

// Record kind codes.  Event kinds before kDecision: codes 1..31 in
// EventKind's order, no length prefix (format 1.0).  Kinds added in a minor
// version get a code >= 64 with a length prefix, which an older reader
// skips (FORMAT.md, "Records"): kDecision is 64 (format 1.1).
// Adding an EventKind breaks the static_assert on purpose: give it a code.
inline constexpr int kNumCoreEventKinds = static_cast<int>(core::EventKind::kDecision);  // codes 1..31
inline constexpr int kNumEventKinds = static_cast<int>(core::EventKind::kCount);         // all recorded
static_assert(static_cast<int>(core::EventKind::kCount) == 42,
              "new EventKind: update the trace format (FORMAT.md, traces/format.h)");
inline constexpr uint32_t kFirstEventCode = 1;
inline constexpr uint32_t kCodeStack = 32;
inline constexpr uint32_t kCodeModule = 33;
inline constexpr uint32_t kFirstSkippableCode = 64;  // >= 64: varint length, then body
inline constexpr uint32_t kCodeDecision = 64;        // format 1.1: EventKind::kDecision
// Format 1.2: memory windows, 65 alloc_mw .. 69 remote_inv, 70 wc_reason
// (EventKind's order after kDecision).
inline constexpr uint32_t kCodeWcReason = 70;
// Format 1.3: 71 resize_cq.  Format 1.4: 72 post_srq_ops, 73 tm_wc.
// Format 1.5: 74 dest_modified.
// Template slots: index = code for codes 1..31; the skippable event codes
// 64.. follow at kNumCoreCodes.. (TemplateSlot).
inline constexpr int kNumCoreCodes = 32;
inline constexpr int kNumCodes = kNumCoreCodes + (kNumEventKinds - kNumCoreEventKinds);

inline uint32_t KindCode(core::EventKind k) {
  const uint32_t i = static_cast<uint32_t>(k);
  return i < kNumCoreEventKinds ? kFirstEventCode + i : kCodeDecision + (i - kNumCoreEventKinds);
}
// The event kind of code, or kCount when code names none.
inline core::EventKind CodeKind(uint64_t code) {
  if (code >= kFirstEventCode && code < kFirstEventCode + kNumCoreEventKinds)
    return static_cast<core::EventKind>(code - kFirstEventCode);
  if (code >= kCodeDecision && code < kCodeDecision + (kNumEventKinds - kNumCoreEventKinds))
    return static_cast<core::EventKind>(kNumCoreEventKinds + (code - kCodeDecision));
  return core::EventKind::kCount;
}
// The template slot of an event code (KindCode's values only).
inline uint32_t TemplateSlot(uint32_t code) {
  return code < kFirstSkippableCode ? code : kNumCoreCodes + (code - kFirstSkippableCode);
}
// Whether an event code is length-prefixed (a minor version's).
inline bool IsSkippableCode(uint64_t code) { return code >= kFirstSkippableCode; }
// Which count of the end chunk a record of this event code is in: 0
// `events` (codes 1..31), 1 `ext_events` (code 64, format 1.1), 2
// `later_events` (codes >= 65, format 1.2).  A 1.1 reader, which knows
// only code 64, checks events + ext_events and skips the rest unseen.
inline int EndCountOf(uint64_t code) {
  return code < kFirstSkippableCode ? 0 : code == kCodeDecision ? 1 : 2;
}

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
