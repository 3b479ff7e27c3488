// traces: writing and reading of the trace format, together in one file so
// they cannot drift.  FORMAT.md is the specification; the tables below (kind
// codes, field lists) are its executable form.
//
// Rules for the writer's Append path (it runs inside application threads,
// possibly inside free()/munmap() interposition): no allocation in steady
// state, no lock except the file mutex when a buffer is full or a stack is
// new, no dynamic-loader calls.  The signal path uses only atomics,
// pthread_mutex_trylock, write(2) and fdatasync(2).
#include "traces/trace.h"

#include <dlfcn.h>
#include <elf.h>
#include <fcntl.h>
#include <link.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>
#include <type_traits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

#ifndef RDMASAN_VERSION
#define RDMASAN_VERSION "unknown"
#endif

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the trace format is little-endian; add byte swaps");

namespace rdmasan::traces {
namespace {

using core::Event;
using core::EventKind;

// ------------------------------------------------------------ constants --
constexpr char kMagic[8] = {'R', 'D', 'M', 'A', 'S', 'A', 'N', 'T'};
constexpr size_t kPrologueBytes = 16;
constexpr size_t kChunkHeaderBytes = 32;
constexpr size_t kStreamPayload = 64 * 1024 - kChunkHeaderBytes;  // one stream buffer
constexpr size_t kMaxLargePayload = 16u << 20;                    // writer: one giant event
constexpr uint32_t kMaxChunkPayload = 64u << 20;                  // reader: anything larger is corrupt

enum ChunkKind : uint8_t { kChunkHeader = 1, kChunkEvents = 2, kChunkMeta = 3, kChunkEnd = 4 };
constexpr uint8_t kFlagSorted = 1;  // events chunk: records in increasing seq

// Record kind codes.  Event kinds: 1..31 in this table's order (FORMAT.md).
// Adding an EventKind breaks the static_assert on purpose: give it a code
// (>= 64 with a length prefix for a minor version, see FORMAT.md).
constexpr int kNumEventKinds = static_cast<int>(EventKind::kCount);
static_assert(kNumEventKinds == 31, "new EventKind: update the trace format (FORMAT.md, trace.cc)");
constexpr uint32_t kFirstEventCode = 1;
constexpr uint32_t kCodeStack = 32;
constexpr uint32_t kCodeModule = 33;
constexpr uint32_t kFirstSkippableCode = 64;  // >= 64: varint length, then body
constexpr int kNumCodes = 32;                 // template slots (index = code)

inline uint32_t KindCode(EventKind k) { return kFirstEventCode + static_cast<uint32_t>(k); }

// Header chunk tags (tag, length, value).
enum HeaderTag : uint32_t {
  kTagToolVersion = 1,
  kTagPid = 2,
  kTagExecutable = 3,
  kTagArg = 4,
  kTagStartTime = 5,
  kTagDeviceAttr = 6,
  kTagProperty = 7,
  kTagModule = 8,
  kTagArgc = 9,
};

// -------------------------------------------------------------- crc32c --
uint32_t g_crc_table[256];
bool g_crc_init = [] {
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    g_crc_table[i] = c;
  }
  return true;
}();

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) uint32_t Crc32cHw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c = __builtin_ia32_crc32di(c, v);
    p += 8;
    n -= 8;
  }
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
const bool g_have_sse42 = __builtin_cpu_supports("sse4.2");
#endif

// Chainable: Crc32c(Crc32c(0, a), b) == Crc32c(0, a ++ b).
uint32_t Crc32c(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (g_have_sse42) return ~Crc32cHw(crc, p, n);
#endif
  while (n--) crc = g_crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

uint32_t ChunkCrc(const uint8_t* header, const uint8_t* payload, size_t len) {
  return Crc32c(Crc32c(0, header, 28), payload, len);
}

// -------------------------------------------------------------- varints --
inline uint64_t Zig(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t Unzig(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

template <typename T>
inline uint64_t Canon(T v) {
  if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<uint64_t>(v);
  }
}

inline uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v) | 0x80;
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}
inline uint8_t* PutFixed64(uint8_t* p, uint64_t v) {
  std::memcpy(p, &v, 8);
  return p + 8;
}

void AppendVarint(std::string* s, uint64_t v) {
  uint8_t b[10];
  s->append(reinterpret_cast<char*>(b), PutVarint(b, v) - b);
}
void AppendBytes(std::string* s, std::string_view v) {
  AppendVarint(s, v.size());
  s->append(v);
}

struct Dec {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  uint64_t Varint() {
    if (p < end && *p < 0x80) return *p++;
    return VarintSlow();
  }
  uint64_t VarintSlow() {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (p >= end) return Fail();
      uint8_t b = *p++;
      v |= static_cast<uint64_t>(b & 0x7f) << shift;
      if (!(b & 0x80)) return v;
    }
    return Fail();
  }
  uint64_t Fixed64() {
    if (end - p < 8) return Fail();
    uint64_t v;
    std::memcpy(&v, p, 8);
    p += 8;
    return v;
  }
  bool Bytes(std::string* out) {
    uint64_t n = Varint();
    if (!ok || n > static_cast<uint64_t>(end - p)) return Fail(), false;
    out->assign(reinterpret_cast<const char*>(p), n);
    p += n;
    return true;
  }
  bool Skip(uint64_t n) {
    if (n > static_cast<uint64_t>(end - p)) return Fail(), false;
    p += n;
    return true;
  }
  size_t left() const { return static_cast<size_t>(end - p); }
  uint64_t Fail() {
    ok = false;
    p = end;
    return 0;
  }
};

// ---------------------------------------------------------- field tables --
// Each field: (mask bit, member, coding).  Absent from the mask = equal to
// the template (the previous record of the same kind in this chunk).
enum Coding { kRaw, kZig, kDelta, kPlus1, kStack };

// Bits 0..2 of the event mask: send_wrs, recv_wrs, wcs non-empty.
#define RDMASAN_TRACE_EVENT_FIELDS(X) \
  RDMASAN_TRACE_EVENT_COMMON_FIELDS(X) \
  RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
// Fields every event sets.
#define RDMASAN_TRACE_EVENT_COMMON_FIELDS(X) \
  X(3, ret, kZig)                     \
  X(4, obj, kDelta)                   \
  X(5, stack, kStack)                 \
  X(6, tid, kRaw)                     \
  X(7, err, kZig)                     \
  X(8, count, kRaw)                   \
  X(9, bad_index, kPlus1)
// Fields most events leave 0 (the encoder skips comparing them one by one
// when all are 0 here and in the template).
#define RDMASAN_TRACE_EVENT_RARE_FIELDS(X) \
  X(10, parent, kDelta)               \
  X(11, send_cq, kDelta)              \
  X(12, recv_cq, kDelta)              \
  X(13, srq, kDelta)                  \
  X(14, channel, kDelta)              \
  X(15, addr, kDelta)                 \
  X(16, length, kRaw)                 \
  X(17, iova, kDelta)                 \
  X(18, access, kRaw)                 \
  X(19, lkey, kRaw)                   \
  X(20, rkey, kRaw)                   \
  X(21, qp_type, kRaw)                \
  X(22, qp_num, kRaw)                 \
  X(23, sq_sig_all, kRaw)             \
  X(24, caps.max_send_wr, kRaw)       \
  X(25, caps.max_recv_wr, kRaw)       \
  X(26, caps.max_send_sge, kRaw)      \
  X(27, caps.max_recv_sge, kRaw)      \
  X(28, caps.max_inline_data, kRaw)   \
  X(29, cqe, kZig)                    \
  X(30, attr_mask, kRaw)              \
  X(31, qp_state, kRaw)
constexpr int kEventSlots = 32;
constexpr int kBadIndexBit = 9;

// Bit 0: wr_id != previous + 1; bit 1: number of SGEs changed.
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
constexpr int kSendWrSlots = 13;

#define RDMASAN_TRACE_RECVWR_FIELDS(X) X(2, num_sge, kZig)
constexpr int kRecvWrSlots = 3;

// Bit 0: addr changed (delta); bit 3: hash != 0 (fixed64); bit 4: hash_now
// != hash (fixed64).
#define RDMASAN_TRACE_SGE_FIELDS(X) \
  X(1, length, kRaw)                \
  X(2, lkey, kRaw)
constexpr int kSgeSlots = 3;

// Bit 0: wr_id != previous + 1.
#define RDMASAN_TRACE_WC_FIELDS(X) \
  X(1, status, kRaw)               \
  X(2, opcode, kRaw)               \
  X(3, qp_num, kRaw)               \
  X(4, byte_len, kRaw)             \
  X(5, vendor_err, kRaw)
constexpr int kWcSlots = 6;

// The templates; reset at the start of every chunk, so a chunk decodes alone.
struct Templates {
  uint64_t ev[kNumCodes][kEventSlots];
  uint64_t swr[kSendWrSlots];
  uint64_t rwr[kRecvWrSlots];
  uint64_t ssge[kSgeSlots];  // SGEs of send WRs
  uint64_t rsge[kSgeSlots];  // SGEs of receive WRs
  uint64_t wc[kWcSlots];
  uint64_t prev_seq;
  uint64_t prev_ts;  // time of the previous record of any kind

  void Reset() {
    std::memset(this, 0, sizeof(*this));
    for (auto& t : ev) t[kBadIndexBit] = UINT32_MAX;
  }
};

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
  uint64_t x = d.Varint();
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

// Upper bound of an event's encoding.
size_t EncodedBound(const Event& e) {
  size_t n = 1 + 10 + 5 + kEventSlots * 10 + 3 * 10;
  for (const auto& w : e.send_wrs) n += 2 + 10 + 10 + kSendWrSlots * 10 + w.sges.size() * 48;
  for (const auto& w : e.recv_wrs) n += 1 + 10 + 10 + 10 + w.sges.size() * 48;
  n += e.wcs.size() * (1 + kWcSlots * 10);
  return n;
}

uint8_t* EncodeSge(uint8_t* p, const core::Sge& g, uint64_t* t) {
  uint64_t mask = 0;
  if (g.addr != t[0]) mask |= 1;
#define X(bit, f, C) \
  if (Canon(g.f) != t[bit]) mask |= uint64_t{1} << bit;
  RDMASAN_TRACE_SGE_FIELDS(X)
#undef X
  if (g.hash != 0) mask |= 8;
  if (g.hash_now != g.hash) mask |= 16;
  *p++ = static_cast<uint8_t>(mask);
  if (mask & 1) p = PutField<kDelta>(p, g.addr, t[0]);
  t[0] = g.addr;
#define X(bit, f, C)                                  \
  if (mask >> bit & 1) p = PutField<C>(p, Canon(g.f), t[bit]); \
  t[bit] = Canon(g.f);
  RDMASAN_TRACE_SGE_FIELDS(X)
#undef X
  if (mask & 8) p = PutVarint(p, g.hash);
  if (mask & 16) p = PutVarint(p, g.hash_now);
  return p;
}

uint8_t* EncodeEvent(uint8_t* p, const Event& e, Templates& t) {
  const uint32_t code = KindCode(e.kind);
  p = PutVarint(p, code);
  p = PutVarint(p, Zig(static_cast<int64_t>(e.seq - t.prev_seq)));
  t.prev_seq = e.seq;
  // The time, against the previous record's: a few bytes when traced,
  // one (zero) when events carry no time.
  p = PutVarint(p, Zig(static_cast<int64_t>(e.time - t.prev_ts)));
  t.prev_ts = e.time;
  uint64_t* tp = t.ev[code];
  uint64_t mask = 0;
  if (!e.send_wrs.empty()) mask |= 1;
  if (!e.recv_wrs.empty()) mask |= 2;
  if (!e.wcs.empty()) mask |= 4;
  // The rare fields: one OR over the event's values and one flag for the
  // template (kept in its otherwise unused slot 0) usually settle all 22.
  uint64_t rare = 0;
#define X(bit, f, C) rare |= Canon(e.f);
  RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
#undef X
#define X(bit, f, C) \
  if (Canon(e.f) != tp[bit]) mask |= uint64_t{1} << bit;
  RDMASAN_TRACE_EVENT_COMMON_FIELDS(X)
  if (rare != 0 || tp[0] != 0) {
    RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
  }
#undef X
  tp[0] = rare != 0;
  p = PutVarint(p, mask);
#define X(bit, f, C)                               \
  if (mask >> bit & 1) {                           \
    p = PutField<C>(p, Canon(e.f), tp[bit]);       \
    tp[bit] = Canon(e.f);                          \
  }
  // RDMASAN_TRACE_EVENT_FIELDS' order (increasing bits); the rare fields
  // (bits 10 and up) are visited only when one of their bits is set.
  RDMASAN_TRACE_EVENT_COMMON_FIELDS(X)
  if (mask >> 10) {
    RDMASAN_TRACE_EVENT_RARE_FIELDS(X)
  }
#undef X
  if (mask & 1) {
    p = PutVarint(p, e.send_wrs.size());
    for (const core::SendWr& w : e.send_wrs) {
      uint64_t* s = t.swr;
      uint64_t m = 0;
      if (w.wr_id != s[0] + 1) m |= 1;
      if (w.sges.size() != s[1]) m |= 2;
#define X(bit, f, C) \
  if (Canon(w.f) != s[bit]) m |= uint64_t{1} << bit;
      RDMASAN_TRACE_SENDWR_FIELDS(X)
#undef X
      p = PutVarint(p, m);
      if (m & 1) p = PutVarint(p, Zig(static_cast<int64_t>(w.wr_id - (s[0] + 1))));
      s[0] = w.wr_id;
      if (m & 2) p = PutVarint(p, w.sges.size());
      s[1] = w.sges.size();
#define X(bit, f, C)                         \
  if (m >> bit & 1) {                        \
    p = PutField<C>(p, Canon(w.f), s[bit]);  \
    s[bit] = Canon(w.f);                     \
  }
      RDMASAN_TRACE_SENDWR_FIELDS(X)
#undef X
      for (const core::Sge& g : w.sges) p = EncodeSge(p, g, t.ssge);
    }
  }
  if (mask & 2) {
    p = PutVarint(p, e.recv_wrs.size());
    for (const core::RecvWr& w : e.recv_wrs) {
      uint64_t* s = t.rwr;
      uint64_t m = 0;
      if (w.wr_id != s[0] + 1) m |= 1;
      if (w.sges.size() != s[1]) m |= 2;
#define X(bit, f, C) \
  if (Canon(w.f) != s[bit]) m |= uint64_t{1} << bit;
      RDMASAN_TRACE_RECVWR_FIELDS(X)
#undef X
      p = PutVarint(p, m);
      if (m & 1) p = PutVarint(p, Zig(static_cast<int64_t>(w.wr_id - (s[0] + 1))));
      s[0] = w.wr_id;
      if (m & 2) p = PutVarint(p, w.sges.size());
      s[1] = w.sges.size();
#define X(bit, f, C)                         \
  if (m >> bit & 1) {                        \
    p = PutField<C>(p, Canon(w.f), s[bit]);  \
    s[bit] = Canon(w.f);                     \
  }
      RDMASAN_TRACE_RECVWR_FIELDS(X)
#undef X
      for (const core::Sge& g : w.sges) p = EncodeSge(p, g, t.rsge);
    }
  }
  if (mask & 4) {
    p = PutVarint(p, e.wcs.size());
    for (const core::Completion& c : e.wcs) {
      uint64_t* s = t.wc;
      uint64_t m = 0;
      if (c.wr_id != s[0] + 1) m |= 1;
#define X(bit, f, C) \
  if (Canon(c.f) != s[bit]) m |= uint64_t{1} << bit;
      RDMASAN_TRACE_WC_FIELDS(X)
#undef X
      *p++ = static_cast<uint8_t>(m);
      if (m & 1) p = PutVarint(p, Zig(static_cast<int64_t>(c.wr_id - (s[0] + 1))));
      s[0] = c.wr_id;
#define X(bit, f, C)                         \
  if (m >> bit & 1) {                        \
    p = PutField<C>(p, Canon(c.f), s[bit]);  \
    s[bit] = Canon(c.f);                     \
  }
      RDMASAN_TRACE_WC_FIELDS(X)
#undef X
    }
  }
  return p;
}

template <typename T>
inline void Assign(T* field, uint64_t v) {
  *field = static_cast<T>(v);
}

// ------------------------------------------------------------- header --
void EncodeModuleBody(std::string* s, const Module& m) {
  AppendBytes(s, m.path);
  AppendVarint(s, m.bias);
  AppendVarint(s, m.start);
  AppendVarint(s, m.end);
  AppendBytes(s, m.build_id);
}

bool DecodeModuleBody(Dec& d, Module* m) {
  d.Bytes(&m->path);
  m->bias = d.Varint();
  m->start = d.Varint();
  m->end = d.Varint();
  d.Bytes(&m->build_id);
  return d.ok;
}

void PutTag(std::string* s, uint32_t tag, std::string_view value) {
  AppendVarint(s, tag);
  AppendBytes(s, value);
}
std::string VarintString(uint64_t v) {
  std::string s;
  AppendVarint(&s, v);
  return s;
}
std::string PairString(const std::string& k, const std::string& v) {
  std::string s;
  AppendBytes(&s, k);
  AppendBytes(&s, v);
  return s;
}

std::string EncodeHeader(const TraceHeader& h) {
  std::string s;
  PutTag(&s, kTagToolVersion, h.tool_version);
  PutTag(&s, kTagPid, VarintString(static_cast<uint64_t>(h.pid)));
  PutTag(&s, kTagExecutable, h.executable);
  PutTag(&s, kTagArgc, VarintString(std::max<uint64_t>(h.argc, h.argv.size())));
  for (const auto& a : h.argv) PutTag(&s, kTagArg, a);
  PutTag(&s, kTagStartTime, VarintString(static_cast<uint64_t>(h.start_time_ns)));
  for (const auto& [k, v] : h.device_attrs) PutTag(&s, kTagDeviceAttr, PairString(k, v));
  for (const auto& [k, v] : h.properties) PutTag(&s, kTagProperty, PairString(k, v));
  for (const auto& m : h.modules) {
    std::string body;
    EncodeModuleBody(&body, m);
    PutTag(&s, kTagModule, body);
  }
  return s;
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

int64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// ------------------------------------------------ thread -> stream cache --
struct Registry {
  std::mutex mu;
  std::vector<std::pair<uint64_t, TraceWriter*>> live;
  std::atomic<uint64_t> next_gen{1};
};
Registry& GetRegistry() {
  static Registry* r = new Registry;  // never destroyed: threads may exit after static destructors
  return *r;
}

}  // namespace

// ------------------------------------------------------------- modules --
std::vector<Module> CurrentModules() {
  std::vector<Module> out;
  dl_iterate_phdr(
      [](dl_phdr_info* info, size_t, void* arg) -> int {
        auto* out = static_cast<std::vector<Module>*>(arg);
        Module m;
        m.path = info->dlpi_name ? info->dlpi_name : "";
        if (m.path.empty() && out->empty()) {
          char buf[4096];
          ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
          if (n > 0) m.path.assign(buf, n);
        }
        m.bias = info->dlpi_addr;
        uint64_t lo = UINT64_MAX, hi = 0;
        for (int i = 0; i < info->dlpi_phnum; ++i) {
          const ElfW(Phdr)& ph = info->dlpi_phdr[i];
          if (ph.p_type == PT_LOAD) {
            lo = std::min<uint64_t>(lo, info->dlpi_addr + ph.p_vaddr);
            hi = std::max<uint64_t>(hi, info->dlpi_addr + ph.p_vaddr + ph.p_memsz);
          } else if (ph.p_type == PT_NOTE && m.build_id.empty()) {
            const char* p = reinterpret_cast<const char*>(info->dlpi_addr + ph.p_vaddr);
            const char* end = p + ph.p_memsz;
            while (p + sizeof(ElfW(Nhdr)) <= end) {
              ElfW(Nhdr) nh;
              std::memcpy(&nh, p, sizeof(nh));
              const char* name = p + sizeof(nh);
              const char* desc = name + ((nh.n_namesz + 3) & ~3u);
              const char* next = desc + ((nh.n_descsz + 3) & ~3u);
              if (next > end) break;
              if (nh.n_type == NT_GNU_BUILD_ID && nh.n_namesz == 4 && std::memcmp(name, "GNU", 4) == 0) {
                for (uint32_t k = 0; k < nh.n_descsz; ++k)
                  absl::StrAppendFormat(&m.build_id, "%02x", static_cast<uint8_t>(desc[k]));
                break;
              }
              p = next;
            }
          }
        }
        if (lo == UINT64_MAX) return 0;
        m.start = lo;
        m.end = hi;
        out->push_back(std::move(m));
        return 0;
      },
      &out);
  return out;
}

TraceHeader CurrentProcessHeader() {
  TraceHeader h;
  h.tool_version = RDMASAN_VERSION;
  h.pid = getpid();
  char buf[4096];
  ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n > 0) h.executable.assign(buf, n);
  int fd = open("/proc/self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    std::string all;
    ssize_t r;
    while ((r = read(fd, buf, sizeof(buf))) > 0 && all.size() < (1u << 20)) all.append(buf, r);
    close(fd);
    size_t pos = 0;
    while (pos < all.size()) {
      size_t z = all.find('\0', pos);
      if (z == std::string::npos) z = all.size();
      ++h.argc;
      if (h.argv.size() < 32) h.argv.push_back(all.substr(pos, std::min<size_t>(z - pos, 256)));
      pos = z + 1;
    }
  }
  h.start_time_ns = NowNs();
  h.modules = CurrentModules();
  return h;
}

std::string ExpandTracePath(std::string_view pattern, int64_t pid) {
  std::string out;
  for (size_t i = 0; i < pattern.size(); ++i) {
    if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == 'p') {
      absl::StrAppend(&out, pid);
      ++i;
    } else if (pattern[i] == '%' && i + 1 < pattern.size() && pattern[i + 1] == '%') {
      out += '%';
      ++i;
    } else {
      out += pattern[i];
    }
  }
  return out;
}

// ============================================================== writer ==

enum StreamState : int { kIdle = 0, kBusy = 1, kTaken = 2, kClosed = 3 };

struct TraceWriter::Stream {
  alignas(64) std::atomic<int> state{kIdle};
  uint32_t id = 0;
  bool overflow = false;
  uint8_t* buf = nullptr;  // kChunkHeaderBytes + kStreamPayload
  size_t used = 0;         // payload bytes
  uint32_t records = 0;
  uint64_t min_seq = 0;
  uint64_t last_seq = 0;
  bool sorted = true;
  Templates tpl;

  Stream() : buf(new uint8_t[kChunkHeaderBytes + kStreamPayload]) { StartChunk(); }
  ~Stream() { delete[] buf; }
  void StartChunk() {
    used = 0;
    records = 0;
    min_seq = UINT64_MAX;
    last_seq = 0;
    sorted = true;
    tpl.Reset();
  }
};

// Per-thread cache: which stream this thread appends to, per writer.
struct ThreadStreams {
  struct Entry {
    uint64_t gen;
    TraceWriter::Stream* s;
  };
  Entry e[4] = {};
  int n = 0;
  ~ThreadStreams() {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> l(r.mu);
    for (int i = 0; i < n; ++i) {
      for (auto& [gen, w] : r.live)
        if (gen == e[i].gen) w->ReleaseStream(e[i].s);
    }
    n = 0;
  }
};
thread_local ThreadStreams t_streams;

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path, const TraceHeader& header) {
  std::unique_ptr<TraceWriter> w(new TraceWriter);
  w->path_ = path;
  w->tmp_path_ = path + ".incomplete";
  w->fd_ = ::open(w->tmp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (w->fd_ < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create trace ", w->tmp_path_));
  std::string prologue(kMagic, sizeof(kMagic));
  uint16_t major = kFormatMajor, minor = kFormatMinor;
  prologue.append(reinterpret_cast<const char*>(&major), 2);
  prologue.append(reinterpret_cast<const char*>(&minor), 2);
  prologue.append(4, '\0');
  std::string payload = EncodeHeader(header);
  std::string chunk(kChunkHeaderBytes, '\0');
  chunk += payload;
  FillChunkHeader(reinterpret_cast<uint8_t*>(chunk.data()), static_cast<uint32_t>(payload.size()), 0, kChunkHeader, 0,
                  0, 0);
  {
    std::lock_guard<std::mutex> l(w->file_mu_);
    if (!w->WriteAllLocked(prologue.data(), prologue.size()) || !w->WriteAllLocked(chunk.data(), chunk.size())) {
      int err = errno;
      ::close(w->fd_);
      w->fd_ = -1;
      ::unlink(w->tmp_path_.c_str());
      return absl::ErrnoToStatus(err, absl::StrCat("cannot write trace ", w->tmp_path_));
    }
    w->modules_ = header.modules;
    w->refresh_modules_ = header.pid == getpid();
    w->pending_meta_.assign(kChunkHeaderBytes, 0);
    w->pending_meta_.reserve(64 * 1024 + 4096);
  }
  // Lock order: registry before file_mu_ (thread exit releases streams).
  Registry& r = GetRegistry();
  {
    std::lock_guard<std::mutex> rl(r.mu);
    w->gen_ = r.next_gen.fetch_add(1);
    r.live.emplace_back(w->gen_, w.get());
  }
  return w;
}

TraceWriter::~TraceWriter() {
  (void)Close();
  for (size_t i = 0; i < num_slots_.load(); ++i) delete slots_[i].load();
  for (auto& seg : stack_bits_) delete[] seg.load();
}

bool TraceWriter::WriteAllLocked(const char* p, size_t n) {
  if (write_failed_.load(std::memory_order_relaxed) || fd_ < 0) return false;
  while (n > 0) {
    ssize_t r = ::write(fd_, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      write_failed_.store(true, std::memory_order_relaxed);
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    bytes_.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
  }
  return true;
}

void TraceWriter::WritePendingMetaLocked() {
  if (pending_meta_records_ == 0) return;
  auto* h = reinterpret_cast<uint8_t*>(pending_meta_.data());
  uint32_t len = static_cast<uint32_t>(pending_meta_.size() - kChunkHeaderBytes);
  FillChunkHeader(h, len, pending_meta_records_, kChunkMeta, 0, 0, 0);
  if (WriteAllLocked(pending_meta_.data(), pending_meta_.size())) chunks_.fetch_add(1, std::memory_order_relaxed);
  pending_meta_.resize(kChunkHeaderBytes);  // never frees
  pending_meta_records_ = 0;
}

void TraceWriter::WriteStreamChunkLocked(Stream* s) {
  WritePendingMetaLocked();
  if (s->records == 0) return;
  FillChunkHeader(s->buf, static_cast<uint32_t>(s->used), s->records, kChunkEvents, s->sorted ? kFlagSorted : 0, s->id,
                  s->min_seq);
  if (WriteAllLocked(reinterpret_cast<const char*>(s->buf), kChunkHeaderBytes + s->used)) {
    chunks_.fetch_add(1, std::memory_order_relaxed);
    written_events_.fetch_add(s->records, std::memory_order_relaxed);
  } else {
    dropped_.fetch_add(s->records, std::memory_order_relaxed);
  }
  s->StartChunk();
}

void TraceWriter::WriteModulesLocked(bool all) {
  if (!refresh_modules_) return;
  std::vector<Module> now = CurrentModules();
  for (const Module& m : now) {
    bool known = false;
    for (const Module& k : modules_) known |= (k.path == m.path && k.bias == m.bias && k.start == m.start);
    if (known && !all) continue;
    std::string body;
    EncodeModuleBody(&body, m);
    std::string rec;
    AppendVarint(&rec, kCodeModule);
    AppendBytes(&rec, body);
    pending_meta_.insert(pending_meta_.end(), rec.begin(), rec.end());
    ++pending_meta_records_;
    if (!known) modules_.push_back(m);
  }
}

bool TraceWriter::StackDefined(core::StackId id) const {
  size_t seg = id >> kStackSegBits;
  if (seg >= 1024) return true;  // beyond the depot: cannot happen
  std::atomic<uint64_t>* bits = stack_bits_[seg].load(std::memory_order_acquire);
  if (!bits) return false;
  size_t i = id & ((size_t{1} << kStackSegBits) - 1);
  return bits[i >> 6].load(std::memory_order_acquire) >> (i & 63) & 1;
}

void TraceWriter::DefineStack(core::StackId id) {
  std::vector<uintptr_t> pcs = core::StackPcs(id);  // allocates: once per stack
  std::lock_guard<std::mutex> l(file_mu_);
  if (StackDefined(id)) return;
  size_t seg = id >> kStackSegBits;
  std::atomic<uint64_t>* bits = stack_bits_[seg].load(std::memory_order_relaxed);
  if (!bits) {
    bits = new std::atomic<uint64_t>[(size_t{1} << kStackSegBits) / 64]();
    stack_bits_[seg].store(bits, std::memory_order_release);
  }
  uint8_t rec[16 + 10 * core::kMaxStackFrames + 10];
  uint8_t* p = PutVarint(rec, kCodeStack);
  p = PutVarint(p, id);
  p = PutVarint(p, pcs.size());
  uint64_t prev = 0;
  for (uintptr_t pc : pcs) {
    p = PutVarint(p, Zig(static_cast<int64_t>(pc - prev)));
    prev = pc;
  }
  pending_meta_.insert(pending_meta_.end(), reinterpret_cast<char*>(rec), reinterpret_cast<char*>(p));
  ++pending_meta_records_;
  stacks_.fetch_add(1, std::memory_order_relaxed);
  if (pending_meta_.size() > 64 * 1024) WritePendingMetaLocked();
  size_t i = id & ((size_t{1} << kStackSegBits) - 1);
  // Published after the definition is queued: whoever sees the bit writes
  // its chunks after the queue is written (both under file_mu_).
  bits[i >> 6].fetch_or(uint64_t{1} << (i & 63), std::memory_order_release);
}

TraceWriter::Stream* TraceWriter::NewStreamLocked() {
  Stream* s = nullptr;
  if (!free_streams_.empty()) {
    s = free_streams_.back();
    free_streams_.pop_back();
  } else if (num_slots_.load(std::memory_order_relaxed) < kMaxStreams) {
    s = new Stream;
    slots_[num_slots_.load(std::memory_order_relaxed)].store(s, std::memory_order_release);
    num_slots_.fetch_add(1, std::memory_order_release);
  } else {
    if (!overflow_) {
      overflow_ = new Stream;
      overflow_->overflow = true;
      overflow_->id = next_stream_id_++;
      slots_[kMaxStreams].store(overflow_, std::memory_order_release);
    }
    return overflow_;
  }
  s->id = next_stream_id_++;
  return s;
}

TraceWriter::Stream* TraceWriter::StreamForThisThread() {
  ThreadStreams& ts = t_streams;
  for (int i = 0; i < ts.n; ++i)
    if (ts.e[i].gen == gen_) return ts.e[i].s;
  Stream* s;
  {
    std::lock_guard<std::mutex> l(file_mu_);
    if (closed_.load()) return nullptr;
    s = NewStreamLocked();
  }
  if (ts.n == 4) {  // forget the oldest writer (normally a closed one)
    std::memmove(&ts.e[0], &ts.e[1], 3 * sizeof(ts.e[0]));
    ts.n = 3;
  }
  ts.e[ts.n++] = {gen_, s};
  return s;
}

bool TraceWriter::TakeStream(Stream* s, int spins) {
  for (int i = 0;; ++i) {
    int expected = kIdle;
    if (s->state.compare_exchange_weak(expected, kTaken, std::memory_order_acquire)) return true;
    if (expected == kClosed || (spins >= 0 && i >= spins)) return false;
    if (i > 64) sched_yield();
  }
}

void TraceWriter::ReleaseStream(Stream* s) {
  if (s->overflow) return;
  if (!TakeStream(s, 1 << 20)) return;
  std::lock_guard<std::mutex> l(file_mu_);
  WriteStreamChunkLocked(s);
  free_streams_.push_back(s);
  s->state.store(kIdle, std::memory_order_release);
}

void TraceWriter::Append(const Event& e) {
  if (closed_.load(std::memory_order_relaxed) || static_cast<int>(e.kind) >= kNumEventKinds) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (e.stack && !StackDefined(e.stack)) DefineStack(e.stack);
  for (const auto& w : e.send_wrs)
    if (w.posted_at && !StackDefined(w.posted_at)) DefineStack(w.posted_at);
  Stream* s = StreamForThisThread();
  if (!s) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (s->overflow) {
    std::lock_guard<std::mutex> l(overflow_mu_);
    AppendTo(s, e);
  } else {
    AppendTo(s, e);
  }
}

void TraceWriter::AppendTo(Stream* s, const Event& e) {
  for (int i = 0;; ++i) {
    int expected = kIdle;
    if (s->state.compare_exchange_weak(expected, kBusy, std::memory_order_acquire)) break;
    if (expected == kClosed) {
      dropped_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    if (i > 64) sched_yield();  // a Flush is writing this stream
  }
  size_t bound = EncodedBound(e);
  if (bound > kStreamPayload) {
    s->state.store(kIdle, std::memory_order_release);
    AppendLarge(s, e);
    return;
  }
  if (s->used + bound > kStreamPayload) {
    std::lock_guard<std::mutex> l(file_mu_);
    WriteStreamChunkLocked(s);
  }
  uint8_t* start = s->buf + kChunkHeaderBytes + s->used;
  uint8_t* end = EncodeEvent(start, e, s->tpl);
  s->used += static_cast<size_t>(end - start);
  ++s->records;
  if (e.seq < s->min_seq) s->min_seq = e.seq;
  if (s->records > 1 && e.seq < s->last_seq) s->sorted = false;
  s->last_seq = e.seq;
  events_.fetch_add(1, std::memory_order_relaxed);
  s->state.store(kIdle, std::memory_order_release);
}

// An event too large for a stream buffer (a chain of thousands of WRs):
// its own chunk, from a one-off allocation.
void TraceWriter::AppendLarge(Stream* s, const Event& e) {
  size_t bound = EncodedBound(e);
  if (bound > kMaxLargePayload) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::vector<uint8_t> buf(kChunkHeaderBytes + bound);
  auto tpl = std::make_unique<Templates>();
  tpl->Reset();
  uint8_t* end = EncodeEvent(buf.data() + kChunkHeaderBytes, e, *tpl);
  uint32_t len = static_cast<uint32_t>(end - buf.data() - kChunkHeaderBytes);
  FillChunkHeader(buf.data(), len, 1, kChunkEvents, kFlagSorted, s->id, e.seq);
  events_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(file_mu_);
  WritePendingMetaLocked();
  if (WriteAllLocked(reinterpret_cast<const char*>(buf.data()), kChunkHeaderBytes + len)) {
    chunks_.fetch_add(1, std::memory_order_relaxed);
    written_events_.fetch_add(1, std::memory_order_relaxed);
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

absl::Status TraceWriter::Flush() {
  if (closed_.load()) return close_status_;
  {
    std::lock_guard<std::mutex> l(file_mu_);
    WriteModulesLocked(false);
    WritePendingMetaLocked();
  }
  size_t n = num_slots_.load(std::memory_order_acquire);
  for (size_t i = 0; i <= kMaxStreams; ++i) {
    if (i >= n && i != kMaxStreams) continue;
    Stream* s = slots_[i].load(std::memory_order_acquire);
    if (!s) continue;
    std::unique_lock<std::mutex> ol(overflow_mu_, std::defer_lock);
    if (s->overflow) ol.lock();
    if (!TakeStream(s, 1 << 20)) continue;
    {
      std::lock_guard<std::mutex> l(file_mu_);
      WriteStreamChunkLocked(s);
    }
    s->state.store(kIdle, std::memory_order_release);
  }
  if (write_failed_.load()) return absl::DataLossError(absl::StrCat("write to ", tmp_path_, " failed"));
  return absl::OkStatus();
}

void TraceWriter::CloseStreams() {
  for (size_t i = 0; i <= kMaxStreams; ++i) {
    Stream* s = slots_[i].load(std::memory_order_acquire);
    if (!s) continue;
    std::unique_lock<std::mutex> ol(overflow_mu_, std::defer_lock);
    if (s->overflow) ol.lock();
    // Wait up to ~1 s for an Append in progress.
    bool taken = false;
    for (int k = 0; k < 1000 && !(taken = TakeStream(s, 4096)); ++k) {
      if (s->state.load() == kClosed) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!taken) continue;  // abandoned: its events are lost (counted by the reader's end check)
    {
      std::lock_guard<std::mutex> l(file_mu_);
      WriteStreamChunkLocked(s);
    }
    s->state.store(kClosed, std::memory_order_release);
  }
}

absl::Status TraceWriter::Close() {
  {
    std::lock_guard<std::mutex> l(file_mu_);
    if (closed_.exchange(true)) return close_status_;
  }
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> rl(r.mu);
    std::erase_if(r.live, [&](const auto& p) { return p.first == gen_; });
  }
  if (fd_ < 0) return close_status_;  // abandoned after fork
  CloseStreams();
  std::lock_guard<std::mutex> l(file_mu_);
  WriteModulesLocked(false);
  WritePendingMetaLocked();
  std::string end(kChunkHeaderBytes, '\0');
  AppendVarint(&end, written_events_.load());
  AppendVarint(&end, stacks_.load());
  AppendVarint(&end, dropped_.load());
  FillChunkHeader(reinterpret_cast<uint8_t*>(end.data()), static_cast<uint32_t>(end.size() - kChunkHeaderBytes), 3,
                  kChunkEnd, 0, 0, 0);
  bool ok = WriteAllLocked(end.data(), end.size());
  if (ok) chunks_.fetch_add(1);
  if (ok && ::fsync(fd_) != 0) ok = false;
  int err = errno;
  ::close(fd_);
  fd_ = -1;
  if (!ok) {
    close_status_ = absl::ErrnoToStatus(err ? err : EIO, absl::StrCat("cannot complete trace ", tmp_path_));
  } else if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    close_status_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", tmp_path_, " to ", path_));
  }
  return close_status_;
}

void TraceWriter::AbandonAfterFork() {
  closed_.store(true);
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> rl(r.mu);
    std::erase_if(r.live, [&](const auto& p) { return p.first == gen_; });
  }
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void TraceWriter::FlushFromSignalHandler() {
  if (fd_ < 0 || !file_mu_.try_lock()) return;
  WritePendingMetaLocked();
  for (size_t i = 0; i <= kMaxStreams; ++i) {
    Stream* s = slots_[i].load(std::memory_order_acquire);
    if (!s) continue;
    int spins = 0;
    int expected = kIdle;
    while (!s->state.compare_exchange_weak(expected, kTaken, std::memory_order_acquire)) {
      if (expected == kClosed || ++spins > 100000) break;
      expected = kIdle;
    }
    if (expected != kIdle) continue;
    WriteStreamChunkLocked(s);
    s->state.store(kIdle, std::memory_order_release);
  }
  if (fd_ >= 0) ::fdatasync(fd_);
  file_mu_.unlock();
}

WriterStats TraceWriter::stats() const {
  WriterStats s;
  s.events = events_.load();
  s.dropped = dropped_.load();
  s.chunks = chunks_.load();
  s.stacks = stacks_.load();
  s.bytes = bytes_.load();
  return s;
}

// ============================================================== reader ==

struct TraceReader::Cursor {
  const TraceReader* reader = nullptr;
  uint64_t payload_off = 0;  // file offset of the payload
  const uint8_t* base = nullptr;
  Dec d{nullptr, nullptr};
  uint32_t remaining = 0;  // records not yet peeked
  Templates tpl;
  core::StackId stack_local[kNumCodes] = {};
  core::StackId posted_local = 0;
  uint32_t chunk_index = 0;
  // The peeked record: its kind code and seq are read, the body is next.
  bool has_head = false;
  uint32_t head_code = 0;
  uint64_t head_seq = 0;
  uint64_t head_off = 0;
  // Unsorted chunks are decoded whole and sorted.
  std::vector<Event> all;
  size_t all_i = 0;
  bool whole = false;

  uint64_t Off() const { return payload_off + static_cast<uint64_t>(d.p - base); }

  absl::Status Err(uint64_t off, std::string_view what) const {
    return absl::DataLossError(absl::StrFormat("trace record at offset %d: %s", off, what));
  }

  absl::Status Peek() {
    has_head = false;
    while (remaining > 0) {
      head_off = Off();
      uint64_t code = d.Varint();
      if (!d.ok) return Err(head_off, "truncated record kind");
      --remaining;
      if (code >= kFirstSkippableCode) {
        uint64_t len = d.Varint();
        if (!d.ok || !d.Skip(len)) return Err(head_off, absl::StrCat("record of kind ", code, " overruns its chunk"));
        continue;
      }
      if (code < kFirstEventCode || code >= kFirstEventCode + kNumEventKinds)
        return Err(head_off, absl::StrCat("record kind ", code, " is not valid in an event chunk"));
      uint64_t delta = d.Varint();
      if (!d.ok) return Err(head_off, "truncated sequence number");
      tpl.prev_seq += static_cast<uint64_t>(Unzig(delta));
      head_code = static_cast<uint32_t>(code);
      head_seq = tpl.prev_seq;
      has_head = true;
      return absl::OkStatus();
    }
    if (d.p != d.end) return Err(Off(), "bytes after the chunk's last record");
    return absl::OkStatus();
  }

  bool MapStack(uint64_t trace_id, core::StackId* out) {
    if (trace_id == 0) {
      *out = 0;
      return true;
    }
    auto it = reader->stacks_.find(trace_id);
    if (it == reader->stacks_.end()) return false;
    *out = it->second;
    return true;
  }

  absl::Status DecodeSge(core::Sge* g, uint64_t* t) {
    if (d.left() < 1) return Err(Off(), "truncated SGE");
    uint8_t m = *d.p++;
    if (m & ~0x1fu) return Err(Off() - 1, "bad SGE mask");
    g->addr = (m & 1) ? GetField<kDelta>(d, t[0]) : t[0];
    t[0] = g->addr;
#define X(bit, f, C)                                            \
  Assign(&g->f, (m >> bit & 1) ? GetField<C>(d, t[bit]) : t[bit]); \
  t[bit] = Canon(g->f);
    RDMASAN_TRACE_SGE_FIELDS(X)
#undef X
    g->hash = (m & 8) ? d.Varint() : 0;
    g->hash_now = (m & 16) ? d.Varint() : g->hash;
    return absl::OkStatus();
  }

  // The body of the peeked record into *e, then peeks the next.
  absl::Status DecodeBody(Event* e) {
    e->kind = static_cast<EventKind>(head_code - kFirstEventCode);
    e->seq = head_seq;
    uint64_t* tp = tpl.ev[head_code];
    tpl.prev_ts += static_cast<uint64_t>(Unzig(d.Varint()));
    e->time = tpl.prev_ts;
    uint64_t mask = d.Varint();
    if (!d.ok) return Err(head_off, "truncated field mask");
    const uint64_t old_stack = tp[5];
#define X(bit, f, C)                                                    \
  if constexpr (C == kStack) {                                          \
    if (mask >> bit & 1) tp[bit] = GetField<C>(d, tp[bit]);             \
  } else {                                                              \
    Assign(&e->f, (mask >> bit & 1) ? GetField<C>(d, tp[bit]) : tp[bit]); \
    tp[bit] = Canon(e->f);                                              \
  }
    RDMASAN_TRACE_EVENT_FIELDS(X)
#undef X
    if (!d.ok) return Err(head_off, "truncated fields");
    if (tp[5] != old_stack && !MapStack(tp[5], &stack_local[head_code]))
      return Err(head_off, absl::StrCat("stack ", tp[5], " is not defined before its use"));
    e->stack = stack_local[head_code];
    e->send_wrs.clear();
    e->recv_wrs.clear();
    e->wcs.clear();
    if (mask & 1) {
      uint64_t n = d.Varint();
      if (!d.ok || n > d.left()) return Err(head_off, "bad send WR count");
      for (uint64_t i = 0; i < n; ++i) {
        core::SendWr& w = e->send_wrs.emplace_back();
        uint64_t* s = tpl.swr;
        uint64_t m = d.Varint();
        w.wr_id = (m & 1) ? s[0] + 1 + static_cast<uint64_t>(Unzig(d.Varint())) : s[0] + 1;
        s[0] = w.wr_id;
        if (m & 2) s[1] = d.Varint();
        uint64_t nsge = s[1];
        const uint64_t old_posted = s[12];
#define X(bit, f, C)                                                   \
  if constexpr (C == kStack) {                                         \
    if (m >> bit & 1) s[bit] = GetField<C>(d, s[bit]);                 \
  } else {                                                             \
    Assign(&w.f, (m >> bit & 1) ? GetField<C>(d, s[bit]) : s[bit]);    \
    s[bit] = Canon(w.f);                                               \
  }
        RDMASAN_TRACE_SENDWR_FIELDS(X)
#undef X
        if (!d.ok || nsge > d.left()) return Err(head_off, "bad send WR");
        if (s[12] != old_posted && !MapStack(s[12], &posted_local))
          return Err(head_off, absl::StrCat("stack ", s[12], " is not defined before its use"));
        w.posted_at = posted_local;
        w.sges.resize(nsge);
        for (auto& g : w.sges)
          if (auto st = DecodeSge(&g, tpl.ssge); !st.ok()) return st;
      }
    }
    if (mask & 2) {
      uint64_t n = d.Varint();
      if (!d.ok || n > d.left()) return Err(head_off, "bad receive WR count");
      for (uint64_t i = 0; i < n; ++i) {
        core::RecvWr& w = e->recv_wrs.emplace_back();
        uint64_t* s = tpl.rwr;
        uint64_t m = d.Varint();
        w.wr_id = (m & 1) ? s[0] + 1 + static_cast<uint64_t>(Unzig(d.Varint())) : s[0] + 1;
        s[0] = w.wr_id;
        if (m & 2) s[1] = d.Varint();
        uint64_t nsge = s[1];
#define X(bit, f, C)                                                \
  Assign(&w.f, (m >> bit & 1) ? GetField<C>(d, s[bit]) : s[bit]);   \
  s[bit] = Canon(w.f);
        RDMASAN_TRACE_RECVWR_FIELDS(X)
#undef X
        if (!d.ok || nsge > d.left()) return Err(head_off, "bad receive WR");
        w.sges.resize(nsge);
        for (auto& g : w.sges)
          if (auto st = DecodeSge(&g, tpl.rsge); !st.ok()) return st;
      }
    }
    if (mask & 4) {
      uint64_t n = d.Varint();
      if (!d.ok || n > d.left()) return Err(head_off, "bad completion count");
      e->wcs.resize(n);
      for (core::Completion& c : e->wcs) {
        uint64_t* s = tpl.wc;
        uint64_t m = d.Varint();
        c.wr_id = (m & 1) ? s[0] + 1 + static_cast<uint64_t>(Unzig(d.Varint())) : s[0] + 1;
        s[0] = c.wr_id;
#define X(bit, f, C)                                                \
  Assign(&c.f, (m >> bit & 1) ? GetField<C>(d, s[bit]) : s[bit]);   \
  s[bit] = Canon(c.f);
        RDMASAN_TRACE_WC_FIELDS(X)
#undef X
      }
    }
    if (!d.ok) return Err(head_off, "record overruns its chunk");
    return Peek();
  }

  uint64_t seq() const { return whole ? all[all_i].seq : head_seq; }
  bool done() const { return whole ? all_i >= all.size() : !has_head; }
};

TraceReader::~TraceReader() {
  if (data_) munmap(const_cast<uint8_t*>(data_), size_);
}

absl::StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  std::unique_ptr<TraceReader> r(new TraceReader);
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open trace ", path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot stat trace ", path));
  }
  r->size_ = static_cast<uint64_t>(st.st_size);
  if (r->size_ < kPrologueBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: offset 0: not an rdmasan trace (file is %d bytes)", path, r->size_));
  }
  void* m = mmap(nullptr, r->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return absl::ErrnoToStatus(errno, absl::StrCat("cannot map trace ", path));
  r->data_ = static_cast<const uint8_t*>(m);
  if (absl::Status s = r->Scan(); !s.ok()) return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return r;
}

absl::Status TraceReader::Scan() {
  if (std::memcmp(data_, kMagic, sizeof(kMagic)) != 0)
    return absl::InvalidArgumentError("offset 0: not an rdmasan trace (bad magic)");
  std::memcpy(&header_.format_major, data_ + 8, 2);
  std::memcpy(&header_.format_minor, data_ + 10, 2);
  if (header_.format_major > kFormatMajor || header_.format_major == 0)
    return absl::FailedPreconditionError(absl::StrFormat(
        "offset 8: trace format %d.%d is not readable by this rdmasan (reads format %d.x, up to %d.%d); use a newer "
        "rdmasan",
        header_.format_major, header_.format_minor, kFormatMajor, kFormatMajor, kFormatMinor));
  uint64_t pos = kPrologueBytes;
  bool first = true;
  while (true) {
    if (pos == size_) {
      truncated_ = true;
      warning_ = absl::StrFormat("trace ends at offset %d without an end record (the writer did not finish)", pos);
      break;
    }
    if (size_ - pos < kChunkHeaderBytes) {
      truncated_ = true;
      warning_ = absl::StrFormat("trace stops at offset %d inside a chunk header (%d of %d bytes): writer killed?", pos,
                                 size_ - pos, kChunkHeaderBytes);
      break;
    }
    const uint8_t* h = data_ + pos;
    uint32_t len, count, stream, stored_crc;
    uint64_t min_seq;
    std::memcpy(&len, h, 4);
    std::memcpy(&count, h + 4, 4);
    std::memcpy(&stream, h + 12, 4);
    std::memcpy(&min_seq, h + 16, 8);
    std::memcpy(&stored_crc, h + 28, 4);
    uint8_t kind = h[8], flags = h[9];
    if (len > kMaxChunkPayload) {
      if (pos + kChunkHeaderBytes + len > size_) {
        // Could be a torn header at the very end too; a length this large
        // is corrupt either way.
      }
      return absl::DataLossError(absl::StrFormat("chunk at offset %d: length %d exceeds the limit %d", pos, len,
                                                 kMaxChunkPayload));
    }
    if (pos + kChunkHeaderBytes + len > size_) {
      truncated_ = true;
      warning_ = absl::StrFormat("trace stops at offset %d inside a chunk (needs %d bytes, %d remain): writer killed?",
                                 pos, kChunkHeaderBytes + len, size_ - pos);
      break;
    }
    const uint8_t* payload = h + kChunkHeaderBytes;
    uint32_t crc = ChunkCrc(h, payload, len);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
    crc = stored_crc;  // let mutations reach the decoders behind the checksum
#endif
    if (crc != stored_crc) {
      if (pos + kChunkHeaderBytes + len == size_ && kind != kChunkEnd && !first) {
        truncated_ = true;
        warning_ = absl::StrFormat("last chunk at offset %d fails its checksum (torn write); trace stops there", pos);
        break;
      }
      return absl::DataLossError(absl::StrFormat("chunk at offset %d: checksum mismatch (stored %08x, computed %08x)",
                                                 pos, stored_crc, crc));
    }
    if (first && kind != kChunkHeader)
      return absl::DataLossError(absl::StrFormat("chunk at offset %d: the first chunk must be the header", pos));
    first = false;
    switch (kind) {
      case kChunkHeader:
        if (absl::Status s = ParseHeaderChunk(payload, len, pos + kChunkHeaderBytes); !s.ok()) return s;
        break;
      case kChunkEvents:
        if (count > len) return absl::DataLossError(absl::StrFormat("chunk at offset %d: record count %d > length %d", pos, count, len));
        if (count > 0) chunks_.push_back({pos, len, count, stream, flags, min_seq});
        break;
      case kChunkMeta:
        if (absl::Status s = ParseMetaChunk(payload, len, pos + kChunkHeaderBytes, count); !s.ok()) return s;
        break;
      case kChunkEnd: {
        Dec d{payload, payload + len};
        end_events_ = d.Varint();
        if (!d.ok) return absl::DataLossError(absl::StrFormat("chunk at offset %d: malformed end record", pos));
        have_end_ = true;
        break;
      }
      default:
        break;  // a chunk kind of a newer minor version: skipped
    }
    pos += kChunkHeaderBytes + len;
    if (have_end_) {
      if (pos != size_)
        return absl::DataLossError(absl::StrFormat("offset %d: %d bytes after the end record", pos, size_ - pos));
      break;
    }
  }
  std::stable_sort(chunks_.begin(), chunks_.end(),
                   [](const ChunkRef& a, const ChunkRef& b) { return a.min_seq < b.min_seq; });
  return absl::OkStatus();
}

absl::Status TraceReader::ParseHeaderChunk(const uint8_t* p, size_t n, uint64_t off) {
  Dec d{p, p + n};
  while (d.ok && d.p < d.end) {
    uint64_t tag_off = off + static_cast<uint64_t>(d.p - p);
    uint64_t tag = d.Varint();
    std::string v;
    if (!d.Bytes(&v)) return absl::DataLossError(absl::StrFormat("header field at offset %d: truncated", tag_off));
    Dec f{reinterpret_cast<const uint8_t*>(v.data()), reinterpret_cast<const uint8_t*>(v.data()) + v.size()};
    switch (tag) {
      case kTagToolVersion: header_.tool_version = v; break;
      case kTagPid: header_.pid = static_cast<int64_t>(f.Varint()); break;
      case kTagExecutable: header_.executable = v; break;
      case kTagArgc: header_.argc = f.Varint(); break;
      case kTagArg: header_.argv.push_back(v); break;
      case kTagStartTime: header_.start_time_ns = static_cast<int64_t>(f.Varint()); break;
      case kTagDeviceAttr:
      case kTagProperty: {
        std::pair<std::string, std::string> kv;
        f.Bytes(&kv.first);
        f.Bytes(&kv.second);
        (tag == kTagDeviceAttr ? header_.device_attrs : header_.properties).push_back(std::move(kv));
        break;
      }
      case kTagModule: {
        Module m;
        if (DecodeModuleBody(f, &m)) header_.modules.push_back(std::move(m));
        break;
      }
      default: break;  // a newer minor version's field
    }
    if (!f.ok) return absl::DataLossError(absl::StrFormat("header field %d at offset %d: malformed", tag, tag_off));
  }
  return absl::OkStatus();
}

absl::Status TraceReader::ParseMetaChunk(const uint8_t* p, size_t n, uint64_t off, uint32_t count) {
  Dec d{p, p + n};
  uint32_t records = 0;
  while (d.p < d.end) {
    uint64_t rec_off = off + static_cast<uint64_t>(d.p - p);
    auto bad = [&](std::string_view what) {
      return absl::DataLossError(absl::StrFormat("trace record at offset %d: %s", rec_off, what));
    };
    uint64_t code = d.Varint();
    ++records;
    if (code == kCodeStack) {
      uint64_t id = d.Varint();
      uint64_t npcs = d.Varint();
      if (!d.ok || npcs > d.left()) return bad("malformed stack record");
      uintptr_t pcs[core::kMaxStackFrames];
      uint64_t pc = 0;
      size_t kept = 0;
      for (uint64_t i = 0; i < npcs; ++i) {
        pc += static_cast<uint64_t>(Unzig(d.Varint()));
        if (kept < core::kMaxStackFrames) pcs[kept++] = pc;
      }
      if (!d.ok) return bad("malformed stack record");
      if (id == 0 || id > UINT32_MAX) return bad(absl::StrCat("stack id ", id, " is out of range"));
      stacks_[id] = core::InternStack(pcs, kept);
    } else if (code == kCodeModule) {
      std::string body;
      if (!d.Bytes(&body)) return bad("malformed module record");
      Dec f{reinterpret_cast<const uint8_t*>(body.data()), reinterpret_cast<const uint8_t*>(body.data()) + body.size()};
      Module m;
      if (!DecodeModuleBody(f, &m)) return bad("malformed module record");
      header_.modules.push_back(std::move(m));
    } else if (code >= kFirstSkippableCode) {
      uint64_t len = d.Varint();
      if (!d.ok || !d.Skip(len)) return bad("record overruns its chunk");
    } else {
      return bad(absl::StrCat("record kind ", code, " is not valid in a meta chunk"));
    }
  }
  if (records != count)
    return absl::DataLossError(
        absl::StrFormat("chunk at offset %d: %d records, the header says %d", off - kChunkHeaderBytes, records, count));
  return absl::OkStatus();
}

absl::Status TraceReader::OpenCursor(size_t i) {
  const ChunkRef& c = chunks_[i];
  auto cur = std::make_unique<Cursor>();
  cur->reader = this;
  cur->payload_off = c.offset + kChunkHeaderBytes;
  cur->base = data_ + cur->payload_off;
  cur->d = Dec{cur->base, cur->base + c.len};
  cur->remaining = c.count;
  cur->chunk_index = static_cast<uint32_t>(i);
  cur->tpl.Reset();
  if (absl::Status s = cur->Peek(); !s.ok()) return s;
  if (!(c.flags & kFlagSorted)) {
    cur->whole = true;
    while (cur->has_head) {
      Event& e = cur->all.emplace_back();
      if (absl::Status s = cur->DecodeBody(&e); !s.ok()) return s;
    }
    std::stable_sort(cur->all.begin(), cur->all.end(), [](const Event& a, const Event& b) { return a.seq < b.seq; });
  }
  if (cur->done()) return absl::OkStatus();
  cursors_.push_back(std::move(cur));
  std::push_heap(cursors_.begin(), cursors_.end(), [](const auto& a, const auto& b) { return a->seq() > b->seq(); });
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
    if (have_end_ && events_read_ != end_events_)
      return absl::DataLossError(
          absl::StrFormat("the end record counts %d events, the chunks hold %d", end_events_, events_read_));
    return false;
  }
  Cursor* c = cursors_.front().get();
  if (c->whole) {
    *out = std::move(c->all[c->all_i++]);
  } else if (absl::Status s = c->DecodeBody(out); !s.ok()) {
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

std::vector<std::pair<std::string, uintptr_t>> TraceReader::ModuleOffsets(core::StackId id) const {
  std::vector<std::pair<std::string, uintptr_t>> out;
  for (uintptr_t pc : core::StackPcs(id)) {
    const Module* best = nullptr;
    for (const Module& m : header_.modules)
      if (pc - 1 >= m.start && pc - 1 < m.end) best = &m;
    if (best) {
      out.emplace_back(best->path, pc - best->bias);
    } else {
      out.emplace_back("", pc);
    }
  }
  return out;
}

std::vector<core::Frame> TraceReader::Symbolize(core::StackId id) const {
  return core::SymbolizeOffline(ModuleOffsets(id));
}

}  // namespace rdmasan::traces
