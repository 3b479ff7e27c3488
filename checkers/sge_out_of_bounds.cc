// sge-out-of-bounds: every SGE lies inside the MR its lkey names.
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportSgeOutOfBounds(CheckContext& c, const SgeList& l, size_t i,
                                                       const MrState& mr) {
  const core::Sge& g = (*l.sges)[i];
  c.Emit(core::CheckId::kSgeOutOfBounds,
         absl::StrFormat("%s: WR wr_id=0x%x SGE %d [0x%x, +%d) lies outside MR [0x%x, +%d) (lkey 0x%x)",
                         c.PostWhere(), l.wr_id, i, g.addr, g.length, mr.iova, mr.length, g.lkey),
         {{core::StackKind::kRegistered, "MR registered at", mr.stack}});
}

}  // namespace

void CheckSgeOutOfBounds(CheckContext& c) {
  const PostLists& p = c.Lists();
  for (const SgeList& l : p.lists)
    for (size_t i = 0; i < l.sges->size(); ++i) {
      const core::Sge& g = (*l.sges)[i];
      if (g.length == 0) continue;
      const MrState* mr = SgeMr(c, g, p.pd);
      if (!mr) continue;  // invalid-lkey's case
      if (g.addr >= mr->iova && g.addr + g.length <= mr->iova + mr->length && g.addr + g.length >= g.addr)
        continue;
      ReportSgeOutOfBounds(c, l, i, *mr);
    }
}

}  // namespace rdmasan::checkers
