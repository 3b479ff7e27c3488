// traces/varint: the format's integer encodings (FORMAT.md, top): LEB128
// varints, zigzag for signed values, and Dec, the bounds-checked reader of
// a byte range.
//
// Header-only and inline because every field of every record goes through
// these; the writer's Append path calls them per event.
//
// May not: depend on anything but the standard library; allocate on the
// encoding side (PutVarint writes into the caller's buffer); read past a
// Dec's end (a malformed input sets Dec::ok = false instead).
#ifndef RDMASAN_TRACES_VARINT_H_
#define RDMASAN_TRACES_VARINT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>

namespace rdmasan::traces {

inline constexpr size_t kMaxVarintBytes = 10;  // a 64-bit value in LEB128

inline uint64_t Zig(int64_t v) { return (static_cast<uint64_t>(v) << 1) ^ static_cast<uint64_t>(v >> 63); }
inline int64_t Unzig(uint64_t v) { return static_cast<int64_t>(v >> 1) ^ -static_cast<int64_t>(v & 1); }

// A field's value as the 64 bits the codec compares and stores: signed
// values sign-extend, so a template slot means the same whatever the
// member's width.
template <typename T>
inline uint64_t Canon(T v) {
  if constexpr (std::is_signed_v<T>) {
    return static_cast<uint64_t>(static_cast<int64_t>(v));
  } else {
    return static_cast<uint64_t>(v);
  }
}

// At most 10 bytes; the caller sizes the buffer.
inline uint8_t* PutVarint(uint8_t* p, uint64_t v) {
  while (v >= 0x80) {
    *p++ = static_cast<uint8_t>(v) | 0x80;
    v >>= 7;
  }
  *p++ = static_cast<uint8_t>(v);
  return p;
}

inline void AppendVarint(std::string* s, uint64_t v) {
  while (v >= 0x80) {
    s->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  s->push_back(static_cast<char>(v));
}
// A string: varint length, then the bytes.
inline void AppendBytes(std::string* s, std::string_view v) {
  AppendVarint(s, v.size());
  s->append(v);
}

// A varint of two or more bytes read at p (at most end): its value and
// the byte after it, or next == nullptr if it is malformed (unterminated
// within end, or longer than ten bytes).  Out of line, and returning in
// registers: the Dec that calls it stays in registers too.
struct VarintRead {
  uint64_t value;
  const uint8_t* next;
};
[[gnu::noinline]] inline VarintRead ReadVarintSlow(const uint8_t* p, const uint8_t* end) {
  if (end - p >= static_cast<ptrdiff_t>(kMaxVarintBytes)) {
    // Ten bytes are there: no bounds test per byte.  The same values as
    // the loop below (a tenth byte keeps its lowest bit; an eleventh
    // fails).  Two and three bytes (times, deltas) byte by byte; longer
    // ones (hashes) eight bytes at once.
    if (p[0] < 0x80) return {p[0], p + 1};
    uint64_t v = (p[0] & 0x7fu) | static_cast<uint64_t>(p[1] & 0x7f) << 7;
    if (p[1] < 0x80) return {v, p + 2};
    v |= static_cast<uint64_t>(p[2] & 0x7f) << 14;
    if (p[2] < 0x80) return {v, p + 3};
    uint64_t x;
    std::memcpy(&x, p, 8);
    const uint64_t stops = ~x & 0x8080808080808080ull;  // bytes that end the varint
    // The low 7 bits of each byte, packed (LEB128's payload, little-endian).
    auto gather7 = [](uint64_t y) {
      y &= 0x7f7f7f7f7f7f7f7full;
      y = ((y & 0x7f007f007f007f00ull) >> 1) | (y & 0x007f007f007f007full);
      y = ((y & 0x3fff00003fff0000ull) >> 2) | (y & 0x00003fff00003fffull);
      return ((y & 0x0fffffff00000000ull) >> 4) | (y & 0x000000000fffffffull);
    };
    if (stops) return {gather7(x & (stops ^ (stops - 1))), p + (__builtin_ctzll(stops) >> 3) + 1};
    v = gather7(x) | static_cast<uint64_t>(p[8] & 0x7f) << 56;
    if (!(p[8] & 0x80)) return {v, p + 9};
    v |= static_cast<uint64_t>(p[9] & 0x7f) << 63;
    if (p[9] & 0x80) return {0, nullptr};
    return {v, p + 10};
  }
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end) return {0, nullptr};
    uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return {v, p};
  }
  return {0, nullptr};
}

// Reads [p, end).  The first failure sets ok = false and moves p to end, so
// callers may read a whole record and check ok once.
struct Dec {
  const uint8_t* p;
  const uint8_t* end;
  bool ok = true;

  // Inline: every field of every record reads one, most one byte long.
  [[gnu::always_inline]] uint64_t Varint() {
    if (__builtin_expect(p < end && *p < 0x80, 1)) return *p++;
    const VarintRead r = ReadVarintSlow(p, end);
    if (!r.next) return Fail();
    p = r.next;
    return r.value;
  }
  // Varint for a field that is mostly two bytes long (an event's time
  // delta): those are read inline too.
  [[gnu::always_inline]] uint64_t Varint2() {
    if (__builtin_expect(end - p >= 2, 1)) {
      const uint64_t b0 = p[0];
      if (b0 < 0x80) return ++p, b0;
      const uint64_t b1 = p[1];
      if (b1 < 0x80) return p += 2, (b0 & 0x7f) | b1 << 7;
    }
    return Varint();
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

// A Dec over a string's bytes (a header field, a module record's body).
inline Dec DecOf(const std::string& s) {
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  return Dec{p, p + s.size()};
}

}  // namespace rdmasan::traces

#endif  // RDMASAN_TRACES_VARINT_H_
