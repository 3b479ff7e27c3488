// free-registered and free-in-flight: memory inside a live MR is not freed or
// unmapped (the registration still lets the NIC, and the peer through an
// rkey, write it), and no memory of an outstanding WR is (the NIC may still
// read or write it until the retiring completion).
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

bool Overlaps(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) { return a < b + blen && b < a + alen; }

const OutstandingWr* InFlight(const std::deque<OutstandingWr>& q, uint64_t addr, uint64_t len) {
  for (const auto& w : q) {
    if (w.is_inline) continue;
    for (const auto& g : w.sges)
      if (g.length && Overlaps(g.addr, g.length, addr, len)) return &w;
  }
  return nullptr;
}

}  // namespace

void CheckFreeRange(CheckContext& c) {
  if (c.e.kind != core::EventKind::kFreeRange || c.e.length == 0) return;
  const uint64_t addr = c.e.addr, len = c.e.length;
  for (const auto& [id, q] : c.s.qps()) {
    const OutstandingWr* w = InFlight(q.sq, addr, len);
    if (!w) w = InFlight(q.rq, addr, len);
    if (w) {
      c.Emit(core::CheckId::kFreeInFlight,
             absl::StrFormat("[0x%x, +%d) freed while WR wr_id=0x%x on %s still uses it", addr, len, w->wr_id,
                             QpName(c.s, id)),
             {{WrLabel(*w, "outstanding"), w->stack}});
      break;
    }
  }
  for (const auto& [id, m] : c.s.mrs()) {
    // Registered ranges are in virtual addresses (addr), not the iova.
    if (Overlaps(m.addr, m.length, addr, len)) {
      c.Emit(core::CheckId::kFreeRegistered,
             absl::StrFormat("[0x%x, +%d) freed while MR 0x%x (lkey 0x%x, [0x%x, +%d)) still registers it", addr, len,
                             id, m.lkey, m.addr, m.length),
             {{absl::StrFormat("MR 0x%x registered at", id), m.stack}});
      return;
    }
  }
}

}  // namespace rdmasan::checkers
