// sge-count: num_sge is within the max SGE the provider returned for the QP
// (or the SRQ).
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {

void CheckSgeCount(CheckContext& c) {
  ForEachSgeList(c, [&](const SgeList& l, const auto& where) {
    if (l.num_sge >= 0 && static_cast<uint32_t>(l.num_sge) <= l.max_sge) return;
    c.Emit(core::CheckId::kSgeCount, absl::StrFormat("%s: WR wr_id=0x%x has num_sge=%d, the limit is %d", where(),
                                                     l.wr_id, l.num_sge, l.max_sge));
  });
}

}  // namespace rdmasan::checkers
