// traces/crc32c: see crc32c.h.
#include "traces/crc32c.h"

#include <cstring>

namespace rdmasan::traces {
namespace {

// Filled during static initialization, so the signal path never builds it.
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

}  // namespace

uint32_t Crc32c(uint32_t crc, const uint8_t* p, size_t n) {
  crc = ~crc;
#if defined(__x86_64__)
  if (g_have_sse42) return ~Crc32cHw(crc, p, n);
#endif
  while (n--) crc = g_crc_table[(crc ^ *p++) & 0xff] ^ (crc >> 8);
  return ~crc;
}

}  // namespace rdmasan::traces
