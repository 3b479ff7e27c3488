// sge-count: num_sge is within the max SGE the provider returned for the QP
// (or the SRQ).
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportSgeCount(CheckContext& c, const SgeList& l, uint32_t max_sge) {
  c.Emit(core::CheckId::kSgeCount, absl::StrFormat("%s: WR wr_id=0x%x has num_sge=%d, the limit is %d",
                                                   c.PostWhere(), l.wr_id, l.num_sge, max_sge));
}

}  // namespace

void CheckSgeCount(CheckContext& c) {
  const PostLists& p = c.Lists();
  for (const SgeList& l : p.lists)
    if (l.num_sge < 0 || static_cast<uint32_t>(l.num_sge) > p.max_sge) ReportSgeCount(c, l, p.max_sge);
}

}  // namespace rdmasan::checkers
