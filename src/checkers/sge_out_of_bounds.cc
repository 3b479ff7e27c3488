// sge-out-of-bounds: every SGE lies inside the MR its lkey names.
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {

void CheckSgeOutOfBounds(CheckContext& c) {
  ForEachSgeList(c, [&](const SgeList& l, const auto& where) {
    for (size_t i = 0; i < l.sges->size(); ++i) {
      const core::Sge& g = (*l.sges)[i];
      if (g.length == 0) continue;
      const MrState* mr = SgeMr(c, g, l.pd);
      if (!mr) continue;  // invalid-lkey's case
      if (g.addr >= mr->iova && g.addr + g.length <= mr->iova + mr->length && g.addr + g.length >= g.addr) continue;
      c.Emit(core::CheckId::kSgeOutOfBounds,
             absl::StrFormat("%s: WR wr_id=0x%x SGE %d [0x%x, +%d) lies outside MR [0x%x, +%d) (lkey 0x%x)", where(),
                             l.wr_id, i, g.addr, g.length, mr->iova, mr->length, g.lkey),
             {{"MR registered at", mr->stack}});
    }
  });
}

}  // namespace rdmasan::checkers
