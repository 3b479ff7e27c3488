// dereg-in-flight: no MR is deregistered while an outstanding WR references
// it — the NIC may still read or write it until the retiring completion.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

// The WRs of a queue that use the MR with this lkey.
// (A Ring, or an SRQ's KeyedRing.)
template <typename Queue>
const OutstandingWr* Using(const Queue& q, uint32_t lkey, uint64_t* count) {
  const OutstandingWr* first = nullptr;
  for (const auto& w : q) {
    if (w.is_inline) continue;
    for (const auto& g : w.sges)
      if (g.lkey == lkey && g.length) {
        ++*count;
        if (!first) first = &w;
        break;
      }
  }
  return first;
}

}  // namespace

const OutstandingWr* OldestUseOfLkey(const State& s, uint32_t lkey, uint64_t* count, core::ObjId* on) {
  const OutstandingWr* first = nullptr;
  *on = 0;
  auto consider = [&](core::ObjId id, const auto& q) {
    const OutstandingWr* w = Using(q, lkey, count);
    if (w && (!first || id < *on)) first = w, *on = id;
  };
  for (const auto& [id, q] : s.qps()) {
    consider(id, q.sq);
    consider(id, q.rq);
  }
  for (const auto& [id, srq] : s.srqs()) {
    consider(id, srq.rq);
    consider(id, TagWrs(srq));
  }
  return first;
}

void CheckDeregInFlight(CheckContext& c) {
  const MrState* mr = c.s.Mr(c.e.obj);
  if (!mr) return;
  // Count every use; name the oldest one on the object with the lowest id.
  uint64_t count = 0;
  core::ObjId on = 0;
  const OutstandingWr* first = OldestUseOfLkey(c.s, mr->lkey, &count, &on);
  if (!count) return;
  c.Emit(core::CheckId::kDeregInFlight,
         absl::StrFormat("MR 0x%x (lkey 0x%x) deregistered with %d outstanding WR(s), e.g. on %s", c.e.obj,
                         mr->lkey, count, c.s.Qp(on) ? QpName(c.s, on) : absl::StrFormat("SRQ 0x%x", on)),
         {{core::StackKind::kPosted, WrLabel(*first, "outstanding"), first->stack},
          {core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", c.e.obj), mr->stack}});
}

}  // namespace rdmasan::checkers
