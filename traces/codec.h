// traces/codec: the records inside chunks (FORMAT.md, "Records"): events,
// with their WRs, SGEs and completions, encoded against per-chunk
// templates; and stack definitions.
//
// Each field is written only when it differs from the template (the same
// field of the previous record of its kind in the chunk), most as deltas or
// zigzag varints: a steady post/poll stream costs ~16 bytes an event.
// Templates are reset at each chunk's start, so a chunk decodes alone and
// the reader can merge chunks in any order.
//
// May not: depend on anything but core/ and the other traces/ seams;
// allocate or lock while encoding (EncodeEvent runs on the writer's Append
// path, into a buffer sized by EncodedBound); trust its input while
// decoding (every count and length is checked against the bytes left).
#ifndef RDMASAN_TRACES_CODEC_H_
#define RDMASAN_TRACES_CODEC_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string_view>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "core/event.h"
#include "core/stack.h"
#include "traces/format.h"
#include "traces/varint.h"

namespace rdmasan::traces {

// Template slots per record type: index = the field's mask bit (codec.cc's
// field tables).
inline constexpr int kEventSlots = 32;
inline constexpr int kBadIndexBit = 9;
inline constexpr int kSendWrSlots = 13;
inline constexpr int kRecvWrSlots = 3;
inline constexpr int kSgeSlots = 3;
inline constexpr int kWcSlots = 6;

// The templates; reset at the start of every chunk, so a chunk decodes alone.
struct Templates {
  uint64_t ev[kNumCodes][kEventSlots];  // per event code (TemplateSlot)
  // What records of every kind share.  A length-prefixed record (code >=
  // 64) is coded against them but leaves them as it found them, so a reader
  // that skips it (an older minor version's) stays in step.
  struct Shared {
    uint64_t swr[kSendWrSlots];
    uint64_t rwr[kRecvWrSlots];
    uint64_t ssge[kSgeSlots];  // SGEs of send WRs
    uint64_t rsge[kSgeSlots];  // SGEs of receive WRs
    uint64_t wc[kWcSlots];
    uint64_t prev_seq;
    uint64_t prev_ts;  // time of the previous record of any kind it counts
  } sh;

  void Reset() {
    std::memset(this, 0, sizeof(*this));
    for (auto& t : ev) t[kBadIndexBit] = UINT32_MAX;
  }
};

// Upper bound of an event's encoding.  Inline: the Append path sizes every
// event with it.
inline size_t EncodedBound(const core::Event& e) {
  size_t n = 1 + 10 + 10 + 5 + kEventSlots * 10 + 3 * 10;  // code, length prefix (>= 64), ...
  for (const auto& w : e.send_wrs) n += 2 + 10 + 10 + kSendWrSlots * 10 + w.sges.size() * 48;
  for (const auto& w : e.recv_wrs) n += 1 + 10 + 10 + 10 + w.sges.size() * 48;
  n += e.wcs.size() * (1 + kWcSlots * 10);
  n += 10 + e.text.size();  // kWcReason's text (format 1.2)
  return n;
}

// Writes e's record at p (EncodedBound(e) bytes available); returns its end.
uint8_t* EncodeEvent(uint8_t* p, const core::Event& e, Templates& t);

// Upper bound of a stack record.
inline constexpr size_t kMaxStackRecordBytes = 16 + 10 * core::kMaxStackFrames + 10;
// A whole stack record (code, id, pcs) at p; returns its end.
uint8_t* EncodeStackRecord(uint8_t* p, core::StackId id, const std::vector<uintptr_t>& pcs);
// A stack record's body, read after its code; false if malformed.  Keeps
// the first kMaxStackFrames pcs (*kept of them) of a longer stack.
bool DecodeStackRecord(Dec& d, uint64_t* id, uintptr_t pcs[core::kMaxStackFrames], size_t* kept);

// The error for a malformed record, naming its file offset.
absl::Status RecordError(uint64_t off, std::string_view what);

// A trace's stack ids (the writer process's) -> this process's depot.
using StackMap = absl::flat_hash_map<uint64_t, core::StackId>;

// Reads one events chunk's records in order.  Peek() reads only the next
// record's kind and seq, which is all the reader needs to merge chunks;
// DecodeBody() reads the rest.
//
// The decoder overwrites every member of the Event it decodes into and
// reuses the WR, SGE and completion slots it finds there, so a caller that
// decodes into the same Events again (a batch) pays no construction or
// allocation per event.
class EventChunkDecoder {
 public:
  // payload: the chunk's len payload bytes, at file offset payload_off;
  // count: its record count; stacks: outlives the decoder.
  // skip_from: skip length-prefixed events of codes >= skip_from, as an
  // older reader does (64: a 1.0 reader, 65: a 1.1 reader).
  EventChunkDecoder(const uint8_t* payload, uint64_t payload_off, uint32_t len, uint32_t count,
                    const StackMap* stacks, uint64_t skip_from = UINT64_MAX);

  // Reads the next event record's kind and seq (skipping records of
  // unknown skippable kinds); has_head() is false at the chunk's end.
  absl::Status Peek();
  // The body of the peeked record into *e, then peeks the next.
  absl::Status DecodeBody(core::Event* e) { return DecodeOne(e) ? absl::OkStatus() : error_; }
  // DecodeBody without the Status: false on a malformed record (error()
  // says which).
  bool DecodeOne(core::Event* e);
  // Decodes into out[0..) while the next record is there, its seq is below
  // limit and fewer than max are decoded (at least one: the caller peeked
  // a head below limit); returns how many.  The same events and errors as
  // DecodeOne called in turn, with the cursor held in registers across
  // records.  On a malformed record *failed is set (error() says which)
  // and the count is of the events before it.
  size_t DecodeRun(core::Event* out, size_t max, uint64_t limit, bool* failed);

  bool has_head() const { return has_head_; }
  uint64_t head_seq() const { return head_seq_; }
  const absl::Status& error() const { return error_; }

 private:
  // The record readers below work on a copy of d_ that DecodeOne and Peek
  // hold in registers, and write back when they are done.
  uint64_t Off(const Dec& d) const { return payload_off_ + static_cast<uint64_t>(d.p - base_); }
  uint64_t head_off() const { return payload_off_ + static_cast<uint64_t>(head_p_ - base_); }
  // Sets error_ (a malformed record at off); returns false.
  [[gnu::cold, gnu::noinline]] bool Fail(uint64_t off, std::string_view what);
  bool PeekNext(Dec& d);
  bool Body(Dec& d, core::Event* e);
  // A kStack template slot went from old_id to trace_id: *local follows.
  bool MapStack(uint64_t trace_id, uint64_t old_id, core::StackId* local) {
    return trace_id == old_id || MapNewStack(trace_id, local);  // most records keep their stack
  }
  [[gnu::noinline]] bool MapNewStack(uint64_t trace_id, core::StackId* local);
  bool DecodeSge(Dec& d, core::Sge* g, uint64_t* t);
  template <typename Codec, typename WrList>
  bool DecodeWrs(Dec& d, WrList* wrs, uint64_t* t, uint64_t* sge_t);
  bool DecodeWcs(Dec& d, decltype(core::Event::wcs)* wcs);

  const StackMap* stacks_;
  uint64_t skip_from_;
  const uint8_t* base_;
  uint64_t payload_off_;
  Dec d_;
  uint32_t remaining_;  // records not yet peeked
  Templates tpl_;
  // Per template slot: whether any of the event's rare fields (codec.cc)
  // is non-zero in the template; while none is and a record changes none,
  // they are all zero.
  bool rare_set_[kNumCodes] = {};
  // The local ids of the current template stacks: per event kind, and of
  // the send WRs' posted_at.
  core::StackId stack_local_[kNumCodes] = {};
  core::StackId posted_local_ = 0;
  // A length-prefixed event record being read: where its body ends, the
  // chunk's end, and the shared templates to restore after it.
  const uint8_t* ext_end_ = nullptr;
  const uint8_t* chunk_end_ = nullptr;
  Templates::Shared ext_saved_{};
  core::StackId ext_posted_saved_ = 0;
  // The peeked record: its kind code and seq are read, the body is next.
  bool has_head_ = false;
  uint32_t head_code_ = 0;
  uint64_t head_seq_ = 0;
  const uint8_t* head_p_ = nullptr;  // where it starts (its offset only for errors)
  absl::Status error_;               // the first malformed record's
};

}  // namespace rdmasan::traces

#endif  // RDMASAN_TRACES_CODEC_H_
