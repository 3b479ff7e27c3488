// rkey-not-bumped: a type-2 memory window is bound again with the key of its
// previous binding.  The peer that held the old key (seed 001: while an
// rkey is valid the peer may write at any time) can then reach the new
// binding's memory with it: a late or replayed access from the last I/O
// lands in this one.  The 8-bit tag exists to prevent exactly that:
// ibv_inc_rkey(mw->rkey) before every bind.  Type-1 windows are not
// checked: ibv_bind_mw picks their new key itself.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckRkeyNotBumped(CheckContext& c) {
  const auto& e = c.e;
  if (e.send_wrs.empty() || c.Repeated(core::CheckId::kRkeyNotBumped)) return;
  for (const core::SendWr& w : c.Posted()) {
    if (w.opcode != IBV_WR_BIND_MW) continue;
    const MwState* m = c.s.Mw(w.bind.mw);
    if (!m || m->type != IBV_MW_TYPE_2 || !m->bound_before || w.rkey != m->rkey) continue;
    std::vector<core::RelatedStack> rel;
    if (m->invalidated_at)
      rel.push_back({core::StackKind::kInvalidated,
                     absl::StrFormat("previous binding invalidated (%s) at", m->invalidated_by),
                     m->invalidated_at});
    rel.push_back({core::StackKind::kBound, "previous binding posted at", m->bound_at});
    rel.push_back({core::StackKind::kAllocated, absl::StrFormat("MW 0x%x allocated at", m->id), m->stack});
    c.Emit(core::CheckId::kRkeyNotBumped,
           absl::StrFormat(
               "MW 0x%x (type 2) bound again with rkey 0x%x, the key of its previous binding (wr_id=0x%x, "
               "%s): a peer still holding that key reaches the new binding's memory; bump it with "
               "ibv_inc_rkey() before every bind",
               m->id, w.rkey, w.wr_id, c.PostWhere()),
           std::move(rel));
    return;
  }
}

}  // namespace rdmasan::checkers
