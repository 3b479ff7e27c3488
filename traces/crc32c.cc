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
