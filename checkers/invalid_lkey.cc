// invalid-lkey: every non-inline SGE names a live MR of the QP's PD.
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportInvalidLkey(CheckContext& c, const SgeList& l, size_t i) {
  const core::Sge& g = (*l.sges)[i];
  const MrState* other = c.MrByLkey(g.lkey);
  c.Emit(core::CheckId::kInvalidLkey,
         absl::StrFormat("%s: WR wr_id=0x%x SGE %d has lkey 0x%x, which names %s", c.PostWhere(), l.wr_id, i,
                         g.lkey, other ? "an MR of another PD" : "no live MR"),
         other ? std::vector<core::RelatedStack>{{core::StackKind::kRegistered, "that MR registered at",
                                                  other->stack}}
               : std::vector<core::RelatedStack>{});
}

}  // namespace

void CheckInvalidLkey(CheckContext& c) {
  const PostLists& p = c.Lists();
  for (const SgeList& l : p.lists)
    for (size_t i = 0; i < l.sges->size(); ++i) {
      const core::Sge& g = (*l.sges)[i];
      if (g.length == 0 || SgeMr(c, g, p.pd)) continue;
      ReportInvalidLkey(c, l, i);
    }
}

}  // namespace rdmasan::checkers
