// free-registered: no memory inside a live MR, or a valid memory window, is
// freed or unmapped: the registration still lets the NIC (and a peer,
// through the rkey) write it.  A valid window is named first, with its
// key: that is the key a peer can still use.
//
// An implicit ODP MR (ibv_reg_mr(pd, NULL, SIZE_MAX, ON_DEMAND)) registers
// the whole address space by design and pins nothing: freeing memory under
// it is what every program does, and is never reported.  An explicit ODP
// MR is reported as any other: it pins nothing either, but its keys still
// name those addresses, so a peer's access lands in whatever memory the
// allocator puts there next.  A device-memory MR (IsDeviceMemory) holds
// none of the program's memory, so no free is under it.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

bool OverlapsRegistered(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return a < b + blen && b < a + alen;
}

bool ImplicitOdp(const MrState& m) { return (m.access & IBV_ACCESS_ON_DEMAND) && m.length == SIZE_MAX; }

}  // namespace

void CheckFreeRegistered(CheckContext& c) {
  if (c.e.length == 0) return;
  const uint64_t addr = c.e.addr, len = c.e.length;
  if (!c.s.mws().empty())
    if (core::ObjId id = LowestIdWhere(c.s.mws(), [&](const MwState& m) {
          const MrState* mr = c.s.Mr(m.mr);
          return m.valid && !(mr && IsDeviceMemory(*mr)) && OverlapsRegistered(m.va, m.length, addr, len);
        })) {
      const MwState& m = *c.s.Mw(id);
      const MrState* mr = c.s.Mr(m.mr);
      std::vector<core::RelatedStack> rel = {
          {core::StackKind::kBound, "window bound at", m.bound_at},
          {core::StackKind::kAllocated, absl::StrFormat("MW 0x%x allocated at", id), m.stack}};
      if (mr)
        rel.push_back(
            {core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", m.mr), mr->stack});
      c.Emit(
          core::CheckId::kFreeRegistered,
          absl::StrFormat("[0x%x, +%d) freed while memory window MW 0x%x (rkey 0x%x, [0x%x, +%d) of MR 0x%x) "
                          "still grants remote access to it",
                          addr, len, id, m.rkey, m.va, m.length, m.mr),
          std::move(rel));
      return;
    }
  // Registered ranges are in virtual addresses (addr), not the iova.
  if (core::ObjId id = LowestIdWhere(c.s.mrs(), [&](const MrState& m) {
        return !ImplicitOdp(m) && !IsDeviceMemory(m) && OverlapsRegistered(m.addr, m.length, addr, len);
      })) {
    const MrState& m = *c.s.Mr(id);
    c.Emit(core::CheckId::kFreeRegistered,
           absl::StrFormat("[0x%x, +%d) freed while MR 0x%x (lkey 0x%x, [0x%x, +%d)) still registers it",
                           addr, len, id, m.lkey, m.addr, m.length),
           {{core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", id), m.stack}});
  }
}

}  // namespace rdmasan::checkers
