// destroy-in-use: no object is destroyed while another references it: a CQ
// by QPs, a PD by its MRs/QPs/SRQs/AHs/memory windows, an SRQ by QPs, an AH
// by outstanding UD WRs, an MR by valid memory windows bound to it (a NIC
// refuses that dereg with EBUSY; the program meant to drop memory a peer
// can still reach).
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckDestroyInUse(CheckContext& c) {
  const auto& e = c.e;
  switch (e.kind) {
    case core::EventKind::kDestroyCq: {
      const CqState* cq = c.s.Cq(e.obj);
      if (!cq || cq->qps.empty()) return;
      core::ObjId qp = LowestId(cq->qps);
      const QpState* q = c.s.Qp(qp);
      c.Emit(core::CheckId::kDestroyInUse,
             absl::StrFormat("CQ 0x%x destroyed while %d QP(s) still use it, e.g. %s", e.obj, cq->qps.size(),
                             QpName(c.s, qp)),
             {{core::StackKind::kCreated, "that QP created at", q ? q->stack : 0},
              {core::StackKind::kCreated, "CQ created at", cq->stack}});
      return;
    }
    case core::EventKind::kDeallocPd: {
      if (!c.s.Pd(e.obj)) return;
      auto of_pd = [&](const auto& v) { return v.pd == e.obj; };
      if (core::ObjId id = LowestIdWhere(c.s.mrs(), of_pd)) {
        const MrState& m = *c.s.Mr(id);
        c.Emit(core::CheckId::kDestroyInUse,
               absl::StrFormat("PD 0x%x deallocated while MR 0x%x (lkey 0x%x) still belongs to it", e.obj, id,
                               m.lkey),
               {{core::StackKind::kRegistered, "MR registered at", m.stack}});
        return;
      }
      if (core::ObjId id = LowestIdWhere(c.s.qps(), of_pd)) {
        c.Emit(core::CheckId::kDestroyInUse,
               absl::StrFormat("PD 0x%x deallocated while %s still belongs to it", e.obj, QpName(c.s, id)),
               {{core::StackKind::kCreated, "QP created at", c.s.Qp(id)->stack}});
        return;
      }
      if (core::ObjId id = LowestIdWhere(c.s.srqs(), of_pd)) {
        c.Emit(core::CheckId::kDestroyInUse,
               absl::StrFormat("PD 0x%x deallocated while SRQ 0x%x still belongs to it", e.obj, id),
               {{core::StackKind::kCreated, "SRQ created at", c.s.Srq(id)->stack}});
        return;
      }
      if (core::ObjId id = LowestIdWhere(c.s.ahs(), of_pd)) {
        c.Emit(core::CheckId::kDestroyInUse,
               absl::StrFormat("PD 0x%x deallocated while AH 0x%x still belongs to it", e.obj, id),
               {{core::StackKind::kCreated, "AH created at", c.s.Ah(id)->stack}});
        return;
      }
      if (core::ObjId id = LowestIdWhere(c.s.mws(), of_pd)) {
        const MwState& m = *c.s.Mw(id);
        c.Emit(
            core::CheckId::kDestroyInUse,
            absl::StrFormat("PD 0x%x deallocated while memory window MW 0x%x (rkey 0x%x) still belongs to it",
                            e.obj, id, m.rkey),
            {{core::StackKind::kAllocated, "MW allocated at", m.stack}});
      }
      return;
    }
    case core::EventKind::kDeregMr: {
      const MrState* mr = c.s.Mr(e.obj);
      if (!mr || c.s.mws().empty()) return;
      core::ObjId id = LowestIdWhere(c.s.mws(), [&](const MwState& m) { return m.valid && m.mr == e.obj; });
      if (!id) return;
      const MwState& m = *c.s.Mw(id);
      c.Emit(
          core::CheckId::kDestroyInUse,
          absl::StrFormat("MR 0x%x (lkey 0x%x) deregistered while memory window MW 0x%x bound to it is valid "
                          "(rkey 0x%x grants remote access to [0x%x, +%d)); invalidate the window first",
                          e.obj, mr->lkey, id, m.rkey, m.addr, m.length),
          {{core::StackKind::kBound, "window bound at", m.bound_at},
           {core::StackKind::kAllocated, absl::StrFormat("MW 0x%x allocated at", id), m.stack},
           {core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", e.obj), mr->stack}});
      return;
    }
    case core::EventKind::kDestroySrq: {
      const SrqState* s = c.s.Srq(e.obj);
      if (!s || s->qps.empty()) return;
      core::ObjId qp = LowestId(s->qps);
      c.Emit(core::CheckId::kDestroyInUse,
             absl::StrFormat("SRQ 0x%x destroyed while %s still uses it", e.obj, QpName(c.s, qp)),
             {{core::StackKind::kCreated, "SRQ created at", s->stack}});
      return;
    }
    case core::EventKind::kDestroyAh: {
      const AhState* a = c.s.Ah(e.obj);
      if (!a) return;
      auto uses = [&](const QpState& q) {
        for (const auto& w : q.sq)
          if (w.ah == e.obj) return true;
        return false;
      };
      core::ObjId id = LowestIdWhere(c.s.qps(), uses);
      if (!id) return;
      for (const auto& w : c.s.Qp(id)->sq)
        if (w.ah == e.obj) {
          c.Emit(
              core::CheckId::kDestroyInUse,
              absl::StrFormat("AH 0x%x destroyed while a UD WR on %s still uses it", e.obj, QpName(c.s, id)),
              {{core::StackKind::kPosted, WrLabel(w, "outstanding"), w.stack},
               {core::StackKind::kCreated, "AH created at", a->stack}});
          return;
        }
      return;
    }
    default:
      return;
  }
}

}  // namespace rdmasan::checkers
