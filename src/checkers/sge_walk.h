// checkers/sge_walk: the scatter lists of a posted chain, as the SGE checks
// (sge-count, invalid-lkey, sge-out-of-bounds, mr-access) see them.
#ifndef RDMASAN_CHECKERS_SGE_WALK_H_
#define RDMASAN_CHECKERS_SGE_WALK_H_

#include <string>

#include "checkers/check.h"

namespace rdmasan::checkers {

// One WR's scatter list and what governs it.
struct SgeList {
  const absl::InlinedVector<core::Sge, 2>* sges;
  int32_t num_sge;
  uint32_t max_sge;   // the returned limit (QP or SRQ)
  core::ObjId pd;     // the PD its MRs must belong to
  bool nic_writes;    // receives, RDMA READ and atomic destinations
  uint64_t wr_id;
};

// Calls fn(list, where) for every non-inline WR of a post event; `where()`
// names the call, formatted only if a finding needs it.
template <typename Fn>
void ForEachSgeList(CheckContext& c, Fn fn) {
  const auto& e = c.e;
  if (e.kind == core::EventKind::kPostSend) {
    const QpState* q = c.qp;
    if (!q) return;
    auto where = [&] { return "post_send to " + QpName(c.s, e.obj); };
    for (const auto& w : e.send_wrs) {
      if (w.send_flags & IBV_SEND_INLINE) continue;  // lkeys unused
      fn(SgeList{&w.sges, w.num_sge, q->caps.max_send_sge, q->pd, WritesLocal(w.opcode), w.wr_id}, where);
    }
  } else if (e.kind == core::EventKind::kPostRecv) {
    const QpState* q = c.qp;
    if (!q) return;
    auto where = [&] { return "post_recv to " + QpName(c.s, e.obj); };
    for (const auto& w : e.recv_wrs) fn(SgeList{&w.sges, w.num_sge, q->caps.max_recv_sge, q->pd, true, w.wr_id}, where);
  } else if (e.kind == core::EventKind::kPostSrqRecv) {
    const SrqState* s = c.s.Srq(e.obj);
    if (!s) return;
    auto where = [&] { return absl::StrFormat("post_srq_recv to SRQ 0x%x", e.obj); };
    for (const auto& w : e.recv_wrs) fn(SgeList{&w.sges, w.num_sge, s->max_sge, s->pd, true, w.wr_id}, where);
  }
}

// The MR an SGE names if it is live and of the right PD, else null.
inline const MrState* SgeMr(CheckContext& c, const core::Sge& g, core::ObjId pd) {
  const MrState* mr = c.MrByLkey(g.lkey);
  return mr && mr->pd == pd ? mr : nullptr;
}

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_SGE_WALK_H_
