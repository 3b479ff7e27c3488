// traces/codec: see codec.h.  The field tables below are FORMAT.md's
// "Records" tables in executable form; a change to one is a change to the
// other (and a format version change).
#include "traces/codec.h"

#include <infiniband/verbs.h>

#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace rdmasan::traces {
namespace {

using core::Event;
using core::EventKind;

// ---------------------------------------------------------- field tables --
// Each field: (mask bit, member, coding).  Absent from the mask = equal to
// the template (the previous record of the same kind in this chunk).
enum Coding { kRaw, kZig, kDelta, kPlus1, kStack };

// Bits 0..2 of the event mask: send_wrs, recv_wrs, wcs non-empty.
// Fields every event sets.
#define RDMASAN_TRACE_EVENT_COMMON_FIELDS(X) \
  X(3, ret, kZig)                            \
  X(4, obj, kDelta)                          \
  X(5, stack, kStack)                        \
  X(6, tid, kRaw)                            \
  X(7, err, kZig)                            \
  X(8, count, kRaw)                          \
  X(9, bad_index, kPlus1)
// Fields most events leave 0 (the encoder skips comparing them one by one
// when all are 0 here and in the template).
constexpr int kFirstRareBit = 10;
#define RDMASAN_TRACE_EVENT_RARE_FIELDS(X) \
  X(10, parent, kDelta)                    \
  X(11, send_cq, kDelta)                   \
  X(12, recv_cq, kDelta)                   \
  X(13, srq, kDelta)                       \
  X(14, channel, kDelta)                   \
  X(15, addr, kDelta)                      \
  X(16, length, kRaw)                      \
  X(17, iova, kDelta)                      \
  X(18, access, kRaw)                      \
  X(19, lkey, kRaw)                        \
  X(20, rkey, kRaw)                        \
  X(21, qp_type, kRaw)                     \
  X(22, qp_num, kRaw)                      \
  X(23, sq_sig_all, kRaw)                  \
  X(24, caps.max_send_wr, kRaw)            \
  X(25, caps.max_recv_wr, kRaw)            \
  X(26, caps.max_send_sge, kRaw)           \
  X(27, caps.max_recv_sge, kRaw)           \
  X(28, caps.max_inline_data, kRaw)        \
  X(29, cqe, kZig)                         \
  X(30, attr_mask, kRaw)                   \
  X(31, qp_state, kRaw)

// Send and receive WRs: bit 0: wr_id != previous + 1; bit 1: number of
// SGEs changed.
#define RDMASAN_TRACE_SENDWR_FIELDS(X) \
  X(2, opcode, kRaw)                   \
  X(3, send_flags, kRaw)               \
  X(4, remote_addr, kDelta)            \
  X(5, rkey, kRaw)                     \
  X(6, imm_data, kRaw)                 \
  X(7, num_sge, kZig)                  \
  X(8, remote_qpn, kRaw)               \
  X(9, compare_add, kRaw)              \
  X(10, swap, kRaw)                    \
  X(11, ah, kDelta)                    \
  X(12, posted_at, kStack)

#define RDMASAN_TRACE_RECVWR_FIELDS(X) X(2, num_sge, kZig)

// Bit 0: addr changed (delta); bit 3: hash != 0 (varint); bit 4: hash_now
// != hash (varint).
#define RDMASAN_TRACE_SGE_FIELDS(X) \
  X(1, length, kRaw)                \
  X(2, lkey, kRaw)

// Bit 0: wr_id != previous + 1.
#define RDMASAN_TRACE_WC_FIELDS(X) \
  X(1, status, kRaw)               \
  X(2, opcode, kRaw)               \
  X(3, qp_num, kRaw)               \
  X(4, byte_len, kRaw)             \
  X(5, vendor_err, kRaw)

// ---------------------------------------------------------- field codecs --
template <Coding C>
inline uint8_t* PutField(uint8_t* p, uint64_t v, uint64_t tpl) {
  if constexpr (C == kRaw || C == kStack) {
    return PutVarint(p, v);
  } else if constexpr (C == kZig) {
    return PutVarint(p, Zig(static_cast<int64_t>(v)));
  } else if constexpr (C == kDelta) {
    return PutVarint(p, Zig(static_cast<int64_t>(v - tpl)));
  } else {
    return PutVarint(p, static_cast<uint32_t>(v + 1));
  }
}

template <Coding C>
inline uint64_t GetField(Dec& d, uint64_t tpl) {
  // Deltas (addresses, ids) are often two bytes long.
  uint64_t x = C == kDelta ? d.Varint2() : d.Varint();
  if constexpr (C == kRaw || C == kStack) {
    return x;
  } else if constexpr (C == kZig) {
    return static_cast<uint64_t>(Unzig(x));
  } else if constexpr (C == kDelta) {
    return tpl + static_cast<uint64_t>(Unzig(x));
  } else {
    return static_cast<uint32_t>(x - 1);
  }
}

template <typename T>
inline void Assign(T* field, uint64_t v) {
  *field = static_cast<T>(v);
}

// What the codec does with each field of a table, as X-macro bodies over a
// record o, its template slots t, its mask m (and p, d for the bytes).
#define RDMASAN_TRACE_DIFF(bit, f, C) \
  if (Canon(o.f) != t[bit]) m |= uint64_t{1} << bit;
#define RDMASAN_TRACE_PUT(bit, f, C)        \
  if (m >> bit & 1) {                       \
    p = PutField<C>(p, Canon(o.f), t[bit]); \
    t[bit] = Canon(o.f);                    \
  }
// A kStack field's slot keeps the writer's id; the caller maps it to the
// local one (MapStack), since the record's member holds the local id.  A
// slot always holds a value as Canon gives it (zero, the reset value, or
// the Canon of a member), so a field equal to its template takes the
// slot's value back unchanged.
#define RDMASAN_TRACE_GET(bit, f, C)                   \
  if constexpr (C == kStack) {                         \
    if (m >> bit & 1) t[bit] = GetField<C>(d, t[bit]); \
  } else if (m >> bit & 1) {                           \
    Assign(&o->f, GetField<C>(d, t[bit]));             \
    t[bit] = Canon(o->f);                              \
  } else {                                             \
    Assign(&o->f, t[bit]);                             \
  }
#define RDMASAN_TRACE_STACK_BIT(bit, f, C) (C == kStack ? bit : 0) +
#define RDMASAN_TRACE_MASK_BIT(bit, f, C) | (uint64_t{1} << bit)
// A record that changes none of the table's fields: each takes its slot's
// value (a kStack slot stays as it is).
#define RDMASAN_TRACE_COPY(bit, f, C) \
  if constexpr (C != kStack) Assign(&o->f, t[bit]);

// One codec per field table, so each table is walked by the same three
// loops.  kStackBit: the kStack field's bit, 0 if none (slot 0 is never a
// field's).
#define RDMASAN_TRACE_FIELD_CODEC(Name, Type, FIELDS)                                    \
  struct Name {                                                                          \
    [[maybe_unused]] static constexpr int kStackBit = FIELDS(RDMASAN_TRACE_STACK_BIT) 0; \
    static constexpr uint64_t kFieldMask = 0 FIELDS(RDMASAN_TRACE_MASK_BIT);             \
    static uint64_t Diff(const Type& o, const uint64_t* t) {                             \
      uint64_t m = 0;                                                                    \
      FIELDS(RDMASAN_TRACE_DIFF)                                                         \
      return m;                                                                          \
    }                                                                                    \
    static uint8_t* Put(uint8_t* p, const Type& o, uint64_t m, uint64_t* t) {            \
      FIELDS(RDMASAN_TRACE_PUT)                                                          \
      return p;                                                                          \
    }                                                                                    \
    static void Get(Dec& d, Type* o, uint64_t m, uint64_t* t) {                          \
      if (!(m & kFieldMask)) {                                                           \
        FIELDS(RDMASAN_TRACE_COPY)                                                       \
        return;                                                                          \
      }                                                                                  \
      FIELDS(RDMASAN_TRACE_GET)                                                          \
    }                                                                                    \
  };

RDMASAN_TRACE_FIELD_CODEC(EventCommonCodec, Event, RDMASAN_TRACE_EVENT_COMMON_FIELDS)
RDMASAN_TRACE_FIELD_CODEC(EventRareCodec, Event, RDMASAN_TRACE_EVENT_RARE_FIELDS)
RDMASAN_TRACE_FIELD_CODEC(SgeCodec, core::Sge, RDMASAN_TRACE_SGE_FIELDS)
RDMASAN_TRACE_FIELD_CODEC(WcCodec, core::Completion, RDMASAN_TRACE_WC_FIELDS)

RDMASAN_TRACE_FIELD_CODEC(SendWrFieldCodec, core::SendWr, RDMASAN_TRACE_SENDWR_FIELDS)
struct SendWrCodec : SendWrFieldCodec {
  static constexpr const char* kName = "send WR";  // in errors
};
RDMASAN_TRACE_FIELD_CODEC(RecvWrFieldCodec, core::RecvWr, RDMASAN_TRACE_RECVWR_FIELDS)
struct RecvWrCodec : RecvWrFieldCodec {
  static constexpr const char* kName = "receive WR";
};

static_assert(EventCommonCodec::kStackBit == 5 && EventRareCodec::kStackBit == 0);
static_assert(SendWrCodec::kStackBit == kSendWrSlots - 1 && RecvWrCodec::kStackBit == 0);

// ---------------------------------------------------------------- encode --
// wr_id (mask bit 0) against the previous one + 1: consecutive ids, the
// common case, cost nothing.
inline uint64_t WrIdBit(uint64_t wr_id, const uint64_t* t) { return wr_id != t[0] + 1 ? 1 : 0; }

inline uint8_t* PutWrId(uint8_t* p, uint64_t m, uint64_t wr_id, uint64_t* t) {
  if (m & 1) p = PutVarint(p, Zig(static_cast<int64_t>(wr_id - (t[0] + 1))));
  t[0] = wr_id;
  return p;
}

inline uint64_t GetWrId(Dec& d, uint64_t m, uint64_t* t) {
  t[0] = (m & 1) ? t[0] + 1 + static_cast<uint64_t>(Unzig(d.Varint())) : t[0] + 1;
  return t[0];
}

uint8_t* EncodeSge(uint8_t* p, const core::Sge& o, uint64_t* t) {
  uint64_t m = SgeCodec::Diff(o, t);
  if (o.addr != t[0]) m |= 1;
  if (o.hash != 0) m |= 8;
  if (o.hash_now != o.hash) m |= 16;
  *p++ = static_cast<uint8_t>(m);
  if (m & 1) p = PutField<kDelta>(p, o.addr, t[0]);
  t[0] = o.addr;
  p = SgeCodec::Put(p, o, m, t);
  if (m & 8) p = PutVarint(p, o.hash);
  if (m & 16) p = PutVarint(p, o.hash_now);
  return p;
}

// Send and receive WRs share their layout: mask, wr_id, SGE count (bit 1,
// against the previous WR's), the type's own fields, then the SGEs.
// A BIND_MW WR's binding travels in send-WR fields that WR does not use
// (FORMAT.md, "Send WR"), so that the record's layout is 1.1's: a 1.1
// reader reads it, and sees a BIND_MW with some extra values.
inline void BindToFields(const core::SendWr& w, core::SendWr* o) {
  o->remote_addr = w.bind.addr;
  o->compare_add = w.bind.length;
  o->swap = w.bind.mr;
  o->imm_data = w.bind.access;
  o->ah = w.bind.mw;
}
inline void FieldsToBind(core::SendWr* w) {
  w->bind = core::MwBind{w->ah, w->swap, w->remote_addr, w->compare_add, w->imm_data};
  w->remote_addr = w->compare_add = w->swap = 0;
  w->imm_data = 0;
  w->ah = 0;
}

template <typename Codec, typename Wr>
inline uint8_t* EncodeWr(uint8_t* p, const Wr& w, uint64_t* t, uint64_t* sge_t) {
  uint64_t m = Codec::Diff(w, t) | WrIdBit(w.wr_id, t);
  if (w.sges.size() != t[1]) m |= 2;
  p = PutVarint(p, m);
  p = PutWrId(p, m, w.wr_id, t);
  if (m & 2) p = PutVarint(p, w.sges.size());
  t[1] = w.sges.size();
  p = Codec::Put(p, w, m, t);
  for (const core::Sge& g : w.sges) p = EncodeSge(p, g, sge_t);
  return p;
}

// A BIND_MW WR, coded from a copy with its binding in the reused fields
// (off the common path: the copy is made only for these).
template <typename Codec>
[[gnu::noinline]] uint8_t* EncodeBindWr(uint8_t* p, const core::SendWr& w, uint64_t* t, uint64_t* sge_t) {
  core::SendWr c = w;
  BindToFields(w, &c);
  return EncodeWr<Codec>(p, c, t, sge_t);
}

template <typename Codec, typename WrList>
uint8_t* EncodeWrs(uint8_t* p, const WrList& wrs, uint64_t* t, uint64_t* sge_t) {
  p = PutVarint(p, wrs.size());
  for (const auto& w : wrs) {
    if constexpr (std::is_same_v<typename WrList::value_type, core::SendWr>)
      if (__builtin_expect(w.opcode == IBV_WR_BIND_MW, 0)) {
        p = EncodeBindWr<Codec>(p, w, t, sge_t);
        continue;
      }
    p = EncodeWr<Codec>(p, w, t, sge_t);
  }
  return p;
}

uint8_t* EncodeWcs(uint8_t* p, const decltype(Event::wcs)& wcs, uint64_t* t) {
  p = PutVarint(p, wcs.size());
  for (const core::Completion& c : wcs) {
    uint64_t m = WcCodec::Diff(c, t) | WrIdBit(c.wr_id, t);
    *p++ = static_cast<uint8_t>(m);  // < 64: a one-byte varint
    p = PutWrId(p, m, c.wr_id, t);
    p = WcCodec::Put(p, c, m, t);
  }
  return p;
}

// Bits 0..2: which lists follow; the rest: the fields that differ from tp.
uint64_t EventMask(const Event& e, uint64_t* tp) {
  uint64_t m = 0;
  if (!e.send_wrs.empty()) m |= 1;
  if (!e.recv_wrs.empty()) m |= 2;
  if (!e.wcs.empty()) m |= 4;
  // The rare fields: one OR over the event's values and one flag for the
  // template (kept in its otherwise unused slot 0) usually settle all 22.
  uint64_t rare = 0;
#define X(bit, f, C) rare |= Canon(e.f);
  RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
#undef X
  m |= EventCommonCodec::Diff(e, tp);
  if (rare != 0 || tp[0] != 0) m |= EventRareCodec::Diff(e, tp);
  tp[0] = rare != 0;
  return m;
}

}  // namespace

namespace {

uint8_t* EncodeEventBody(uint8_t* p, const Event& e, uint32_t code, Templates& t) {
  p = PutVarint(p, Zig(static_cast<int64_t>(e.seq - t.sh.prev_seq)));
  t.sh.prev_seq = e.seq;
  // The time, against the previous record's: a few bytes when traced,
  // one (zero) when events carry no time.
  p = PutVarint(p, Zig(static_cast<int64_t>(e.time - t.sh.prev_ts)));
  t.sh.prev_ts = e.time;
  uint64_t* tp = t.ev[TemplateSlot(code)];
  const uint64_t m = EventMask(e, tp);
  p = PutVarint(p, m);
  p = EventCommonCodec::Put(p, e, m, tp);
  if (m >> kFirstRareBit) p = EventRareCodec::Put(p, e, m, tp);  // most events skip the 22
  if (m & 1) p = EncodeWrs<SendWrCodec>(p, e.send_wrs, t.sh.swr, t.sh.ssge);
  if (m & 2) p = EncodeWrs<RecvWrCodec>(p, e.recv_wrs, t.sh.rwr, t.sh.rsge);
  if (m & 4) p = EncodeWcs(p, e.wcs, t.sh.wc);
  if (code == kCodeWcReason) {  // format 1.2: the reason's text
    p = PutVarint(p, e.text.size());
    std::memcpy(p, e.text.data(), e.text.size());
    p += e.text.size();
  }
  return p;
}

}  // namespace

uint8_t* EncodeEvent(uint8_t* p, const Event& e, Templates& t) {
  const uint32_t code = KindCode(e.kind);
  p = PutVarint(p, code);
  if (!IsSkippableCode(code)) return EncodeEventBody(p, e, code, t);
  // Length-prefixed (FORMAT.md): the body goes after room for the longest
  // length varint, then moves up behind the real one.  The shared
  // templates are restored, so a reader that skips the record agrees.
  const Templates::Shared saved = t.sh;
  uint8_t* body = p + kMaxVarintBytes;
  uint8_t* end = EncodeEventBody(body, e, code, t);
  t.sh = saved;
  const size_t len = static_cast<size_t>(end - body);
  p = PutVarint(p, len);
  std::memmove(p, body, len);
  return p + len;
}

uint8_t* EncodeStackRecord(uint8_t* p, core::StackId id, const std::vector<uintptr_t>& pcs) {
  p = PutVarint(p, kCodeStack);
  p = PutVarint(p, id);
  p = PutVarint(p, pcs.size());
  uint64_t prev = 0;
  for (uintptr_t pc : pcs) {  // neighbouring frames are close: deltas are short
    p = PutVarint(p, Zig(static_cast<int64_t>(pc - prev)));
    prev = pc;
  }
  return p;
}

bool DecodeStackRecord(Dec& d, uint64_t* id, uintptr_t pcs[core::kMaxStackFrames], size_t* kept) {
  *id = d.Varint();
  uint64_t npcs = d.Varint();
  if (!d.ok || npcs > d.left()) return false;
  uint64_t pc = 0;
  *kept = 0;
  for (uint64_t i = 0; i < npcs; ++i) {
    pc += static_cast<uint64_t>(Unzig(d.Varint()));
    if (*kept < core::kMaxStackFrames) pcs[(*kept)++] = pc;
  }
  return d.ok;
}

absl::Status RecordError(uint64_t off, std::string_view what) {
  return absl::DataLossError(absl::StrFormat("trace record at offset %d: %s", off, what));
}

// ---------------------------------------------------------------- decode --
EventChunkDecoder::EventChunkDecoder(const uint8_t* payload, uint64_t payload_off, uint32_t len,
                                     uint32_t count, const StackMap* stacks, uint64_t skip_from)
    : stacks_(stacks),
      skip_from_(skip_from),
      base_(payload),
      payload_off_(payload_off),
      d_{payload, payload + len},
      remaining_(count) {
  tpl_.Reset();
}

bool EventChunkDecoder::Fail(uint64_t off, std::string_view what) {
  error_ = RecordError(off, what);
  has_head_ = false;
  return false;
}

[[gnu::always_inline]] inline bool EventChunkDecoder::PeekNext(Dec& d) {
  has_head_ = false;
  while (remaining_ > 0) {
    head_p_ = d.p;
    uint64_t code = d.Varint();
    if (!d.ok) return Fail(head_off(), "truncated record kind");
    --remaining_;
    const core::EventKind kind = CodeKind(code);
    if (__builtin_expect(IsSkippableCode(code), 0)) {
      uint64_t len = d.Varint();
      if (!d.ok || len > d.left())
        return Fail(head_off(), absl::StrCat("record of kind ", code, " overruns its chunk"));
      if (kind == core::EventKind::kCount || code >= skip_from_) {
        d.Skip(len);
        continue;
      }
      // An event of a minor version: decoded within its length, against
      // the shared templates, which it then leaves as they were.
      ext_saved_ = tpl_.sh;
      ext_posted_saved_ = posted_local_;
      chunk_end_ = d.end;
      ext_end_ = d.p + len;
      d.end = ext_end_;
    } else if (kind == core::EventKind::kCount) {
      return Fail(head_off(), absl::StrCat("record kind ", code, " is not valid in an event chunk"));
    }
    uint64_t delta = d.Varint();
    if (!d.ok) return Fail(head_off(), "truncated sequence number");
    tpl_.sh.prev_seq += static_cast<uint64_t>(Unzig(delta));
    head_code_ = static_cast<uint32_t>(code);
    head_seq_ = tpl_.sh.prev_seq;
    has_head_ = true;
    return true;
  }
  if (d.p != d.end) return Fail(Off(d), "bytes after the chunk's last record");
  return true;
}

// Shrinks a reused list to n entries, keeping its heap storage: an
// InlinedVector's clear() and resize() give it back and are out of line,
// so a batch slot that had held a poll of more than four completions
// allocated again at its next one, and freed at the next event of
// another kind.  pop_back is inline and never frees.
template <typename List>
[[gnu::always_inline]] inline void ShrinkTo(List* list, size_t n) {
  while (list->size() > n) list->pop_back();
}

bool EventChunkDecoder::MapNewStack(uint64_t trace_id, core::StackId* local) {
  if (trace_id == 0) {
    *local = 0;
    return true;
  }
  auto it = stacks_->find(trace_id);
  if (it == stacks_->end())
    return Fail(head_off(), absl::StrCat("stack ", trace_id, " is not defined before its use"));
  *local = it->second;
  return true;
}

[[gnu::always_inline]] inline bool EventChunkDecoder::DecodeSge(Dec& d, core::Sge* o, uint64_t* t) {
  if (d.left() < 1) return Fail(Off(d), "truncated SGE");
  uint8_t m = *d.p++;
  if (m & ~0x1fu) return Fail(Off(d) - 1, "bad SGE mask");
  o->addr = (m & 1) ? GetField<kDelta>(d, t[0]) : t[0];
  t[0] = o->addr;
  SgeCodec::Get(d, o, m, t);
  o->hash = (m & 8) ? d.Varint() : 0;
  o->hash_now = (m & 16) ? d.Varint() : o->hash;
  return true;
}

// The list's slots are reused: a slot the record has is overwritten whole
// (every member below), one it has not is dropped.  The list grows a WR at
// a time, as the bytes prove each one there.
template <typename Codec, typename WrList>
[[gnu::always_inline]] inline bool EventChunkDecoder::DecodeWrs(Dec& d, WrList* wrs, uint64_t* t,
                                                                uint64_t* sge_t) {
  uint64_t n = d.Varint();
  if (!d.ok || n > d.left()) return Fail(head_off(), absl::StrCat("bad ", Codec::kName, " count"));
  for (uint64_t i = 0; i < n; ++i) {
    auto& w = i < wrs->size() ? (*wrs)[i] : wrs->emplace_back();
    uint64_t m = d.Varint();
    w.wr_id = GetWrId(d, m, t);
    if (m & 2) t[1] = d.Varint();
    const uint64_t nsge = t[1];
    const uint64_t old_stack = t[Codec::kStackBit];
    Codec::Get(d, &w, m, t);
    if (!d.ok || nsge > d.left()) return Fail(head_off(), absl::StrCat("bad ", Codec::kName));
    if constexpr (Codec::kStackBit != 0) {
      if (!MapStack(t[Codec::kStackBit], old_stack, &posted_local_)) return false;
      w.posted_at = posted_local_;
      if (__builtin_expect(w.opcode == IBV_WR_BIND_MW, 0)) {
        FieldsToBind(&w);
      } else {
        w.bind = core::MwBind{};
      }
    }
    for (uint64_t j = 0; j < nsge; ++j)
      if (!DecodeSge(d, j < w.sges.size() ? &w.sges[j] : &w.sges.emplace_back(), sge_t)) return false;
    ShrinkTo(&w.sges, nsge);
  }
  ShrinkTo(wrs, n);
  return true;
}

[[gnu::always_inline]] inline bool EventChunkDecoder::DecodeWcs(Dec& d, decltype(Event::wcs)* wcs) {
  uint64_t n = d.Varint();
  if (!d.ok || n > d.left()) return Fail(head_off(), "bad completion count");
  for (uint64_t i = 0; i < n; ++i) {
    core::Completion& c = i < wcs->size() ? (*wcs)[i] : wcs->emplace_back();
    uint64_t m = d.Varint();
    c.wr_id = GetWrId(d, m, tpl_.sh.wc);
    WcCodec::Get(d, &c, m, tpl_.sh.wc);
  }
  ShrinkTo(wcs, n);
  return true;
}

[[gnu::always_inline]] inline bool EventChunkDecoder::Body(Dec& d, Event* e) {
  e->kind = CodeKind(head_code_);
  e->seq = head_seq_;
  const uint32_t slot = TemplateSlot(head_code_);
  uint64_t* tp = tpl_.ev[slot];
  tpl_.sh.prev_ts += static_cast<uint64_t>(Unzig(d.Varint2()));
  e->time = tpl_.sh.prev_ts;
  const uint64_t m = d.Varint();
  if (!d.ok) return Fail(head_off(), "truncated field mask");
  const uint64_t old_stack = tp[EventCommonCodec::kStackBit];
  EventCommonCodec::Get(d, e, m, tp);
  if (__builtin_expect((m >> kFirstRareBit) == 0 && !rare_set_[slot], 1)) {
    // The rare fields are all zero in the template and the record changes
    // none: the 22 slots need no look.
#define X(bit, f, C) e->f = 0;
    RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
#undef X
  } else {
    EventRareCodec::Get(d, e, m, tp);
    uint64_t any = 0;
#define X(bit, f, C) any |= tp[bit];
    RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
#undef X
    rare_set_[slot] = any != 0;
  }
  if (!d.ok) return Fail(head_off(), "truncated fields");
  if (!MapStack(tp[EventCommonCodec::kStackBit], old_stack, &stack_local_[slot])) return false;
  e->stack = stack_local_[slot];
  if (!(m & 1)) {
    ShrinkTo(&e->send_wrs, 0);
  } else if (!DecodeWrs<SendWrCodec>(d, &e->send_wrs, tpl_.sh.swr, tpl_.sh.ssge)) {
    return false;
  }
  if (!(m & 2)) {
    ShrinkTo(&e->recv_wrs, 0);
  } else if (!DecodeWrs<RecvWrCodec>(d, &e->recv_wrs, tpl_.sh.rwr, tpl_.sh.rsge)) {
    return false;
  }
  if (!(m & 4)) {
    ShrinkTo(&e->wcs, 0);
  } else if (!DecodeWcs(d, &e->wcs)) {
    return false;
  }
  if (!e->text.empty()) e->text.clear();  // most slots have none: no store
  if (__builtin_expect(head_code_ == kCodeWcReason, 0)) {
    if (!d.Bytes(&e->text)) return Fail(head_off(), "bad reason text");
  }
  if (!d.ok) return Fail(head_off(), "record overruns its chunk");
  if (__builtin_expect(IsSkippableCode(head_code_), 0)) {
    if (d.p != ext_end_) return Fail(head_off(), "record shorter than its length");
    d.end = chunk_end_;
    tpl_.sh = ext_saved_;
    posted_local_ = ext_posted_saved_;
  }
  return true;
}

// The readers above on a copy of d_ in registers.
absl::Status EventChunkDecoder::Peek() {
  Dec d = d_;
  const bool ok = PeekNext(d);
  d_ = d;
  return ok ? absl::OkStatus() : error_;
}

bool EventChunkDecoder::DecodeOne(Event* e) {
  Dec d = d_;
  const bool ok = Body(d, e) && PeekNext(d);
  d_ = d;
  return ok;
}

size_t EventChunkDecoder::DecodeRun(Event* out, size_t max, uint64_t limit, bool* failed) {
  Dec d = d_;
  size_t n = 0;
  for (;;) {
    if (!Body(d, &out[n]) || !PeekNext(d)) {
      *failed = true;
      break;
    }
    if (++n == max || !has_head_ || head_seq_ >= limit) break;
  }
  d_ = d;
  return n;
}

}  // namespace rdmasan::traces
