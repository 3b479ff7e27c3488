// free-in-flight: no memory of an outstanding WR is freed or unmapped (free,
// realloc, munmap): the NIC may still read or write it until the retiring
// completion.  An SGE of a device-memory MR (zero-based offsets into the
// device's memory) names none of the program's memory.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

inline bool OverlapsInFlight(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return a < b + blen && b < a + alen;
}

// (A Ring, or an SRQ's KeyedRing.)
template <typename Queue>
const OutstandingWr* InFlight(const State& s, const Queue& q, uint64_t addr, uint64_t len) {
  for (const auto& w : q) {
    if (w.is_inline) continue;
    for (const auto& g : w.sges) {
      if (!g.length || !OverlapsInFlight(g.addr, g.length, addr, len)) continue;
      const MrState* mr = s.MrStateByLkey(g.lkey);
      if (!(mr && IsDeviceMemory(*mr))) return &w;
    }
  }
  return nullptr;
}

}  // namespace

void CheckFreeInFlight(CheckContext& c) {
  if (c.e.length == 0) return;
  const uint64_t addr = c.e.addr, len = c.e.length;
  // The WR on the object with the lowest id (QPs and SRQs), so a replay
  // names the same one.
  const OutstandingWr* hit = nullptr;
  core::ObjId on = 0;
  auto consider = [&](core::ObjId id, const auto& q) {
    if (hit && id > on) return;
    if (const OutstandingWr* w = InFlight(c.s, q, addr, len)) hit = w, on = id;
  };
  for (const auto& [id, q] : c.s.qps()) {
    consider(id, q.sq);
    consider(id, q.rq);
  }
  for (const auto& [id, s] : c.s.srqs()) {
    consider(id, s.rq);
    consider(id, TagWrs(s));
  }
  if (hit)
    c.Emit(core::CheckId::kFreeInFlight,
           absl::StrFormat("[0x%x, +%d) freed while WR wr_id=0x%x on %s still uses it", addr, len, hit->wr_id,
                           c.s.Qp(on) ? QpName(c.s, on) : absl::StrFormat("SRQ 0x%x", on)),
           {{core::StackKind::kPosted, WrLabel(*hit, "outstanding"), hit->stack}});
}

}  // namespace rdmasan::checkers
