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

// Reads [p, end).  The first failure sets ok = false and moves p to end, so
// callers may read a whole record and check ok once.
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
