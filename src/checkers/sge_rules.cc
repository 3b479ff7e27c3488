// invalid-lkey, sge-out-of-bounds, mr-access and sge-count: every SGE of a
// posted WR names a live MR of the QP's PD, lies inside it, the MR grants
// what the WR needs (LOCAL_WRITE where the NIC writes: receives, RDMA READ
// and atomic destinations), and num_sge is within the returned limit.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

// `where` names the call; it is formatted only when something is reported.
template <typename Where>
void CheckSges(CheckContext& c, const absl::InlinedVector<core::Sge, 2>& sges, int32_t num_sge, uint32_t max_sge,
               core::ObjId pd, bool nic_writes, const Where& where_fn, uint64_t wr_id) {
  if (num_sge < 0 || static_cast<uint32_t>(num_sge) > max_sge) {
    const std::string where = where_fn();
    c.Emit(core::CheckId::kSgeCount,
           absl::StrFormat("%s: WR wr_id=0x%x has num_sge=%d, the QP allows %d", where, wr_id, num_sge, max_sge));
  }
  for (size_t i = 0; i < sges.size(); ++i) {
    const core::Sge& g = sges[i];
    if (g.length == 0) continue;
    core::ObjId id = c.s.MrByLkey(g.lkey);
    const MrState* mr = c.s.Mr(id);
    if (!mr || mr->pd != pd) {
      const std::string where = where_fn();
      c.Emit(core::CheckId::kInvalidLkey,
             absl::StrFormat("%s: WR wr_id=0x%x SGE %d has lkey 0x%x, which names %s", where, wr_id, i, g.lkey,
                             mr ? "an MR of another PD" : "no live MR"),
             mr ? std::vector<core::RelatedStack>{{"that MR registered at", mr->stack}}
                : std::vector<core::RelatedStack>{});
      continue;
    }
    if (g.addr < mr->iova || g.addr + g.length > mr->iova + mr->length || g.addr + g.length < g.addr) {
      const std::string where = where_fn();
      c.Emit(core::CheckId::kSgeOutOfBounds,
             absl::StrFormat("%s: WR wr_id=0x%x SGE %d [0x%x, +%d) lies outside MR [0x%x, +%d) (lkey 0x%x)", where,
                             wr_id, i, g.addr, g.length, mr->iova, mr->length, g.lkey),
             {{"MR registered at", mr->stack}});
    }
    if (nic_writes && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) {
      const std::string where = where_fn();
      c.Emit(core::CheckId::kMrAccess,
             absl::StrFormat("%s: WR wr_id=0x%x SGE %d: the NIC writes into MR lkey 0x%x, which lacks "
                             "IBV_ACCESS_LOCAL_WRITE",
                             where, wr_id, i, g.lkey),
             {{"MR registered at", mr->stack}});
    }
  }
}

}  // namespace

void CheckSgeRules(CheckContext& c) {
  const auto& e = c.e;
  if (e.kind == core::EventKind::kPostSend) {
    const QpState* q = c.qp;
    if (!q) return;
    auto where = [&] { return "post_send to " + QpName(c.s, e.obj); };
    for (const auto& w : e.send_wrs) {
      if (w.send_flags & IBV_SEND_INLINE) continue;  // lkeys unused
      CheckSges(c, w.sges, w.num_sge, q->caps.max_send_sge, q->pd, WritesLocal(w.opcode), where, w.wr_id);
    }
  } else if (e.kind == core::EventKind::kPostRecv || e.kind == core::EventKind::kPostSrqRecv) {
    core::ObjId pd;
    uint32_t max_sge;
    const bool qp = e.kind == core::EventKind::kPostRecv;
    if (qp) {
      const QpState* q = c.qp;
      if (!q) return;
      pd = q->pd;
      max_sge = q->caps.max_recv_sge;
    } else {
      const SrqState* s = c.s.Srq(e.obj);
      if (!s) return;
      pd = s->pd;
      max_sge = s->max_sge;
    }
    auto where = [&] {
      return qp ? "post_recv to " + QpName(c.s, e.obj) : absl::StrFormat("post_srq_recv to SRQ 0x%x", e.obj);
    };
    for (const auto& w : e.recv_wrs) CheckSges(c, w.sges, w.num_sge, max_sge, pd, true, where, w.wr_id);
  }
}

}  // namespace rdmasan::checkers
