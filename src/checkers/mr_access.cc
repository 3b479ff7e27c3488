// mr-access: the MR grants what the WR needs: LOCAL_WRITE where the NIC
// writes (receive buffers, RDMA READ and atomic destinations).  (Remote
// access rights are the responder's and show as REM_ACCESS_ERR completions.)
#include "checkers/sge_walk.h"

namespace rdmasan::checkers {

void CheckMrAccess(CheckContext& c) {
  ForEachSgeList(c, [&](const SgeList& l, const auto& where) {
    if (!l.nic_writes) return;
    for (size_t i = 0; i < l.sges->size(); ++i) {
      const core::Sge& g = (*l.sges)[i];
      if (g.length == 0) continue;
      const MrState* mr = SgeMr(c, g, l.pd);
      if (!mr || (mr->access & IBV_ACCESS_LOCAL_WRITE)) continue;
      c.Emit(core::CheckId::kMrAccess,
             absl::StrFormat("%s: WR wr_id=0x%x SGE %d: the NIC writes into MR lkey 0x%x, which lacks "
                             "IBV_ACCESS_LOCAL_WRITE",
                             where(), l.wr_id, i, g.lkey),
             {{"MR registered at", mr->stack}});
    }
  });
}

}  // namespace rdmasan::checkers
