// invalid-lkey: every non-inline SGE names a live MR of the QP's PD.
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {

void CheckInvalidLkey(CheckContext& c) {
  ForEachSgeList(c, [&](const SgeList& l, const auto& where) {
    for (size_t i = 0; i < l.sges->size(); ++i) {
      const core::Sge& g = (*l.sges)[i];
      if (g.length == 0 || SgeMr(c, g, l.pd)) continue;
      const MrState* other = c.MrByLkey(g.lkey);
      c.Emit(core::CheckId::kInvalidLkey,
             absl::StrFormat("%s: WR wr_id=0x%x SGE %d has lkey 0x%x, which names %s", where(), l.wr_id, i, g.lkey,
                             other ? "an MR of another PD" : "no live MR"),
             other ? std::vector<core::RelatedStack>{{"that MR registered at", other->stack}}
                   : std::vector<core::RelatedStack>{});
    }
  });
}

}  // namespace rdmasan::checkers
