// mr-access: the MR grants what the WR needs: LOCAL_WRITE where the NIC
// writes (receive buffers, RDMA READ and atomic destinations).  (Remote
// access rights are the responder's and show as REM_ACCESS_ERR completions.)
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportMrAccess(CheckContext& c, const SgeList& l, size_t i,
                                                 const MrState& mr) {
  c.Emit(core::CheckId::kMrAccess,
         absl::StrFormat("%s: WR wr_id=0x%x SGE %d: the NIC writes into MR lkey 0x%x, which lacks "
                         "IBV_ACCESS_LOCAL_WRITE",
                         c.PostWhere(), l.wr_id, i, (*l.sges)[i].lkey),
         {{core::StackKind::kRegistered, "MR registered at", mr.stack}});
}

}  // namespace

void CheckMrAccess(CheckContext& c) {
  const PostLists& p = c.Lists();
  for (const SgeList& l : p.lists) {
    if (!l.nic_writes) continue;
    for (size_t i = 0; i < l.sges->size(); ++i) {
      const core::Sge& g = (*l.sges)[i];
      if (g.length == 0) continue;
      const MrState* mr = SgeMr(c, g, p.pd);
      if (!mr || (mr->access & IBV_ACCESS_LOCAL_WRITE)) continue;
      ReportMrAccess(c, l, i, *mr);
    }
  }
}

}  // namespace rdmasan::checkers
