// softnic/fingerprint: fingerprints of posted destinations, and the marks
// of completions whose destination the program wrote into before the
// placement (fingerprint.h says what for).
//
// May not: fault (reads go through Move into a buffer on the stack), or
// allocate.
#include "softnic/fingerprint.h"

#include <cstring>
#include <mutex>

namespace rdmasan::softnic {
namespace {

// A 64-bit hash of a byte stream, the same however the stream is cut.
struct Hasher {
  uint64_t h = 0x9e3779b97f4a7c15ull;
  uint64_t word = 0;
  uint32_t fill = 0;
  uint64_t total = 0;
  void Mix(uint64_t w) {
    h = (h ^ w) * 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  void Add(const uint8_t* p, size_t n) {
    total += n;
    while (n && fill) {
      word |= uint64_t(*p++) << (8 * fill);
      --n;
      if (++fill == 8) Mix(word), word = 0, fill = 0;
    }
    for (; n >= 8; p += 8, n -= 8) {
      uint64_t w;
      memcpy(&w, p, 8);
      Mix(w);
    }
    for (; n; --n) word |= uint64_t(*p++) << (8 * fill++);
  }
  uint32_t Done() {
    Mix(word ^ (total << 3));
    const uint32_t v = static_cast<uint32_t>(h ^ (h >> 29));
    return v ? v : 1;
  }
};

struct Marks {
  std::mutex mu;
  DestModified ring[32];
  uint32_t n = 0;
};
Marks& TheMarks() {
  static Marks m;  // constant-initialized: usable before any constructor ran
  return m;
}

}  // namespace

uint32_t FingerprintSegs(pid_t self, pid_t pid, const Seg* s, uint32_t n) {
  constexpr uint32_t kChunk = 4096;
  alignas(64) uint8_t buf[kChunk];
  Hasher hs;
  for (uint32_t i = 0; i < n; ++i)
    for (uint64_t off = 0; off < s[i].len; off += kChunk) {
      const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(kChunk, s[i].len - off));
      const Seg dst{reinterpret_cast<uint64_t>(buf), len};
      const Seg src{s[i].va + off, len};
      if (Move(self, self, &dst, 1, pid, &src, 1)) return 0;
      hs.Add(buf, len);
    }
  return hs.Done();
}

void NoteModified(const ibv_cq* cq, uint32_t qp_num, uint64_t wr_id, bool recv) {
  Marks& m = TheMarks();
  std::lock_guard<std::mutex> l(m.mu);
  if (m.n == sizeof(m.ring) / sizeof(m.ring[0])) return;  // the shim is behind: the oldest marks stay
  m.ring[m.n++] = {cq, qp_num, wr_id, recv};
  g_modified_pending.fetch_add(1, std::memory_order_relaxed);
}

size_t TakeModifiedSlow(const ibv_cq* cq, DestModified* out, size_t max) {
  Marks& m = TheMarks();
  std::lock_guard<std::mutex> l(m.mu);
  size_t got = 0;
  uint32_t keep = 0;
  for (uint32_t i = 0; i < m.n; ++i) {
    if (m.ring[i].cq == cq && got < max)
      out[got++] = m.ring[i];
    else
      m.ring[keep++] = m.ring[i];
  }
  m.n = keep;
  g_modified_pending.fetch_sub(static_cast<uint32_t>(got), std::memory_order_relaxed);
  return got;
}

}  // namespace rdmasan::softnic
