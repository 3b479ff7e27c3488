// free-registered: no memory inside a live MR is freed or unmapped: the
// registration still lets the NIC (and a peer, through the rkey) write it.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

bool OverlapsRegistered(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return a < b + blen && b < a + alen;
}

}  // namespace

void CheckFreeRegistered(CheckContext& c) {
  if (c.e.kind != core::EventKind::kFreeRange || c.e.length == 0) return;
  const uint64_t addr = c.e.addr, len = c.e.length;
  // Registered ranges are in virtual addresses (addr), not the iova.
  if (core::ObjId id = LowestIdWhere(
          c.s.mrs(), [&](const MrState& m) { return OverlapsRegistered(m.addr, m.length, addr, len); })) {
    const MrState& m = *c.s.Mr(id);
    c.Emit(core::CheckId::kFreeRegistered,
           absl::StrFormat("[0x%x, +%d) freed while MR 0x%x (lkey 0x%x, [0x%x, +%d)) still registers it",
                           addr, len, id, m.lkey, m.addr, m.length),
           {{absl::StrFormat("MR 0x%x registered at", id), m.stack}});
  }
}

}  // namespace rdmasan::checkers
