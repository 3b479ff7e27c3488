// traces/merge: TraceReader::Next, which yields the events of every chunk
// in Event::seq order.
//
// Each thread's events are in its own chunks, so the file is seq-ordered
// only chunk by chunk.  Chunks are opened lazily in min_seq order, and a
// heap of open chunks (one cursor each) picks the smallest next seq; at
// most the chunks whose seq ranges overlap are open at once, whatever the
// trace's length.
#include "traces/trace.h"

#include <sys/mman.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "absl/strings/str_format.h"
#include "traces/codec.h"
#include "traces/format.h"

namespace rdmasan::traces {

using core::Event;

// One open events chunk.  A sorted chunk is decoded one record at a time as
// the merge reaches it; an unsorted one (a stream that got events out of
// seq order) is decoded whole and sorted.
struct TraceReader::Cursor {
  Cursor(const uint8_t* payload, uint64_t payload_off, uint32_t len, uint32_t count, const StackMap* stacks,
         uint64_t skip_from)
      : dec(payload, payload_off, len, count, stacks, skip_from) {}

  EventChunkDecoder dec;
  std::vector<Event> all;
  size_t all_i = 0;
  bool whole = false;

  uint64_t seq() const { return whole ? all[all_i].seq : dec.head_seq(); }
  bool done() const { return whole ? all_i >= all.size() : !dec.has_head(); }
};

// Here, where Cursor is complete (cursors_ owns them).
TraceReader::TraceReader() = default;
TraceReader::~TraceReader() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

absl::Status TraceReader::OpenCursor(size_t i) {
  const ChunkRef& c = chunks_[i];
  if (!c.checked)
    if (absl::Status s = CheckChunk(c.offset); !s.ok()) return s;
  const uint64_t payload_off = c.offset + kChunkHeaderBytes;
  auto cur = std::make_unique<Cursor>(data_ + payload_off, payload_off, c.len, c.count, &stacks_,
                                      options_.skip_extension_events ? kFirstSkippableCode
                                      : options_.skip_window_events  ? kCodeDecision + 1
                                                                     : UINT64_MAX);
  if (absl::Status s = cur->dec.Peek(); !s.ok()) return s;
  if (!(c.flags & kFlagSorted)) {
    cur->whole = true;
    while (cur->dec.has_head()) {
      Event& e = cur->all.emplace_back();
      if (absl::Status s = cur->dec.DecodeBody(&e); !s.ok()) return s;
    }
    std::stable_sort(cur->all.begin(), cur->all.end(),
                     [](const Event& a, const Event& b) { return a.seq < b.seq; });
  }
  if (cur->done()) return absl::OkStatus();
  cursors_.push_back(std::move(cur));
  std::push_heap(cursors_.begin(), cursors_.end(),
                 [](const auto& a, const auto& b) { return a->seq() > b->seq(); });
  return absl::OkStatus();
}

absl::StatusOr<bool> TraceReader::Next(Event* out) {
  if (finished_) return false;
  auto cmp = [](const auto& a, const auto& b) { return a->seq() > b->seq(); };
  while (next_chunk_ < chunks_.size() &&
         (cursors_.empty() || chunks_[next_chunk_].min_seq <= cursors_.front()->seq())) {
    if (absl::Status s = OpenCursor(next_chunk_++); !s.ok()) {
      finished_ = true;
      return s;
    }
  }
  if (cursors_.empty()) {
    finished_ = true;
    const uint64_t expected =
        end_events_ + (options_.skip_extension_events ? 0 : end_ext_events_) +
        (options_.skip_extension_events || options_.skip_window_events ? 0 : end_later_events_);
    if (have_end_ && events_read_ != expected)
      return absl::DataLossError(
          absl::StrFormat("the end record counts %d events, the chunks hold %d", expected, events_read_));
    return false;
  }
  Cursor* c = cursors_.front().get();
  if (c->whole) {
    *out = std::move(c->all[c->all_i++]);
  } else if (absl::Status s = c->dec.DecodeBody(out); !s.ok()) {
    finished_ = true;
    return s;
  }
  ++events_read_;
  if (cursors_.size() > 1 || c->done()) {
    std::pop_heap(cursors_.begin(), cursors_.end(), cmp);
    if (c->done()) {
      cursors_.pop_back();
    } else {
      std::push_heap(cursors_.begin(), cursors_.end(), cmp);
    }
  }
  return true;
}

size_t TraceReader::NextBatch(Event* out, size_t max, absl::Status* error) {
  auto cmp = [](const auto& a, const auto& b) { return a->seq() > b->seq(); };
  size_t n = 0;
  while (n < max) {
    Cursor* c = cursors_.empty() ? nullptr : cursors_.front().get();
    // The front chunk's next events, while each comes before every other
    // open chunk's head and the next chunk's start, are what Next would
    // return one by one, and leave the heap as Next would: decoded here
    // in a run.  Anything else (opening a chunk, an unsorted chunk, a
    // tie, the end) goes through Next.
    if (!finished_ && c && !c->whole &&
        (next_chunk_ == chunks_.size() || chunks_[next_chunk_].min_seq > c->seq())) {
      uint64_t limit = next_chunk_ < chunks_.size() ? chunks_[next_chunk_].min_seq : UINT64_MAX;
      for (size_t i = 1; i < cursors_.size(); ++i) limit = std::min(limit, cursors_[i]->seq());
      EventChunkDecoder& dec = c->dec;
      if (dec.head_seq() < limit) {
        // With two chunks open, Next's pop and push of a front that stays
        // in front leave the heap as it was; with more they may reorder
        // the others, so they are done here too.
        // (Decoded a run at a time, or one at a time when reheaping.)
        const bool reheap = cursors_.size() > 2;
        while (n < max) {
          bool failed = false;
          const size_t got = dec.DecodeRun(&out[n], reheap ? 1 : max - n, limit, &failed);
          n += got;
          events_read_ += got;
          if (failed) {
            finished_ = true;
            *error = dec.error();
            return n;
          }
          if (!dec.has_head() || dec.head_seq() >= limit) {
            if (cursors_.size() > 1 || !dec.has_head()) {
              std::pop_heap(cursors_.begin(), cursors_.end(), cmp);
              if (!dec.has_head()) {
                cursors_.pop_back();
              } else {
                std::push_heap(cursors_.begin(), cursors_.end(), cmp);
              }
            }
            break;
          }
          if (reheap) {
            std::pop_heap(cursors_.begin(), cursors_.end(), cmp);
            std::push_heap(cursors_.begin(), cursors_.end(), cmp);
          }
        }
        continue;
      }
    }
    absl::StatusOr<bool> more = Next(&out[n]);
    if (!more.ok()) {
      *error = more.status();
      return n;
    }
    if (!*more) return n;
    ++n;
  }
  return n;
}

}  // namespace rdmasan::traces
