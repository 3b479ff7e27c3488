// traces/crc32c: see crc32c.h.
#include "traces/crc32c.h"

#include <atomic>
#include <cstring>

namespace rdmasan::traces {
namespace {

// Built by the compiler: valid from the first instruction (a trace can be
// written from another library's constructor, before this one's ran) and
// never built on the signal path.
struct CrcTable {
  uint32_t v[256];
};
constexpr CrcTable MakeCrcTable() {
  CrcTable t{};
  for (uint32_t i = 0; i < 256; ++i) {
    uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1)));
    t.v[i] = c;
  }
  return t;
}
constexpr CrcTable kCrcTable = MakeCrcTable();

#if defined(__x86_64__)
// Three lanes at once: the crc32 instruction takes three cycles to give its
// result but starts one a cycle, so a single chain of 8-byte steps used a
// third of it.  A block of 3 x n bytes runs as three independent chains
// (the second and third from 0), joined by linearity: the register after
// A ++ B ++ C is reg(A) * x^(16n) + reg(B) * x^(8n) + reg(C) (mod P).  The
// powers of x are constants, computed by the compiler.
//
// Multiplication mod P in the reflected bit order of the CRC (bit 31 is
// x^0), one bit of a at a time: 32 steps, only at a block's end.
constexpr uint32_t MulModP(uint32_t a, uint32_t b) {
  uint32_t prod = 0;
  for (int i = 0; i < 32; ++i) {
    if (a & (0x80000000u >> i)) prod ^= b;
    b = (b >> 1) ^ (0x82F63B78u & (0u - (b & 1)));
  }
  return prod;
}
// x^(8 * bytes) mod P: squarings of x, so a lane of any length is cheap to
// compute here.
constexpr uint32_t XPow8n(uint64_t bytes) {
  uint32_t result = 0x80000000u;  // x^0
  uint32_t sq = 0x00800000u;      // x^8: one byte
  for (; bytes; bytes >>= 1) {
    if (bytes & 1) result = MulModP(result, sq);
    sq = MulModP(sq, sq);
  }
  return result;
}

__attribute__((target("sse4.2"))) inline uint64_t Lane(uint64_t c, const uint8_t* p, size_t words) {
  for (size_t i = 0; i < words; ++i) {
    uint64_t v;
    std::memcpy(&v, p + 8 * i, 8);
    c = __builtin_ia32_crc32di(c, v);
  }
  return c;
}

// Runs of 3 x kLane bytes, three lanes each, then shorter runs of 3 x
// kShortLane, then a single chain.
template <size_t kLane>
__attribute__((target("sse4.2"))) inline uint64_t Lanes3(uint64_t c, const uint8_t*& p, size_t& n) {
  constexpr uint32_t k1 = XPow8n(kLane), k2 = XPow8n(2 * kLane);
  while (n >= 3 * kLane) {
    uint64_t c0 = c, c1 = 0, c2 = 0;
    for (size_t i = 0; i < kLane; i += 8) {
      uint64_t v0, v1, v2;
      std::memcpy(&v0, p + i, 8);
      std::memcpy(&v1, p + kLane + i, 8);
      std::memcpy(&v2, p + 2 * kLane + i, 8);
      c0 = __builtin_ia32_crc32di(c0, v0);
      c1 = __builtin_ia32_crc32di(c1, v1);
      c2 = __builtin_ia32_crc32di(c2, v2);
    }
    c = MulModP(k2, static_cast<uint32_t>(c0)) ^ MulModP(k1, static_cast<uint32_t>(c1)) ^ c2;
    p += 3 * kLane;
    n -= 3 * kLane;
  }
  return c;
}

__attribute__((target("sse4.2"))) uint32_t Crc32cHw(uint32_t crc, const uint8_t* p, size_t n) {
  uint64_t c = crc;
  c = Lanes3<4096>(c, p, n);
  c = Lanes3<256>(c, p, n);
  c = Lane(c, p, n / 8);
  p += n / 8 * 8;
  n %= 8;
  uint32_t c32 = static_cast<uint32_t>(c);
  while (n--) c32 = __builtin_ia32_crc32qi(c32, *p++);
  return c32;
}
// Asked on use (libgcc's CPU model is set up by a constructor of its own):
// before that, or without SSE4.2, the table gives the same sums.
// A relaxed atomic, not a guarded static: safe on the signal path.
std::atomic<int> g_sse42{0};  // 0: not asked yet, 1: yes, 2: no
bool HaveSse42() {
  int v = g_sse42.load(std::memory_order_relaxed);
  if (__builtin_expect(v == 0, 0)) {
    __builtin_cpu_init();
    v = __builtin_cpu_supports("sse4.2") ? 1 : 2;
    g_sse42.store(v, std::memory_order_relaxed);
  }
  return v == 1;
}
#endif

}  // namespace

uint32_t Crc32c(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (HaveSse42()) return ~Crc32cHw(crc, p, n);
#endif
  while (n--) crc = kCrcTable.v[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace rdmasan::traces
