// dereg-in-flight: no MR is deregistered while an outstanding WR references
// it — the NIC may still read or write it until the retiring completion.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

const OutstandingWr* Using(const std::deque<OutstandingWr>& q, core::ObjId mr, uint64_t* count) {
  const OutstandingWr* first = nullptr;
  for (const auto& w : q)
    for (core::ObjId m : w.mrs)
      if (m == mr) {
        ++*count;
        if (!first) first = &w;
        break;
      }
  return first;
}

}  // namespace

void CheckDeregInFlight(CheckContext& c) {
  if (c.e.kind != core::EventKind::kDeregMr) return;
  const MrState* mr = c.s.Mr(c.e.obj);
  if (!mr) return;
  uint64_t count = 0;
  const OutstandingWr* first = nullptr;
  core::ObjId on = 0;
  for (const auto& [id, q] : c.s.qps()) {
    uint64_t before = count;
    const OutstandingWr* w = Using(q.sq, c.e.obj, &count);
    if (!w) w = Using(q.rq, c.e.obj, &count);
    if (w && !first) first = w, on = id;
    (void)before;
  }
  for (const auto& [id, s] : c.s.srqs()) {
    const OutstandingWr* w = Using(s.rq, c.e.obj, &count);
    if (w && !first) first = w, on = id;
  }
  if (!count) return;
  c.Emit(core::CheckId::kDeregInFlight,
         absl::StrFormat("MR 0x%x (lkey 0x%x) deregistered with %d outstanding WR(s), e.g. on %s", c.e.obj, mr->lkey,
                         count, c.s.Qp(on) ? QpName(c.s, on) : absl::StrFormat("SRQ 0x%x", on)),
         {{WrLabel(*first, "outstanding"), first->stack}, {absl::StrFormat("MR 0x%x registered at", c.e.obj), mr->stack}});
}

}  // namespace rdmasan::checkers
