// invalidate-in-flight: between the post of a LOCAL_INV and the poll of its
// completion the window is still valid at the NIC: the peer may still
// read or write through its key.  Until then the window may not be bound
// again or deallocated, and the memory it covered may not be deregistered,
// re-registered (ibv_rereg_mr) or freed (seed 000: "the INVALIDATE should
// be signaled and processing should resume from its completion").  A
// remote invalidation (SEND_WITH_INV) is complete when its receive
// completion is polled, so it never leaves one in flight.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

bool OverlapsWindow(uint64_t a, uint64_t alen, uint64_t b, uint64_t blen) {
  return a < b + blen && b < a + alen;
}

// The window whose invalidation is in flight, its LOCAL_INV and its QP, for
// the windows `pick` selects; the lowest window id (replays agree).
struct InvalidationInFlight {
  const MwState* mw = nullptr;
  const OutstandingWr* inv = nullptr;
  core::ObjId qp = 0;
};

template <typename Pick>
InvalidationInFlight FindInvalidationInFlight(const State& s, Pick pick) {
  InvalidationInFlight best;
  if (s.mws().empty()) return best;
  for (const auto& [id, m] : s.mws()) {
    if (m.valid || !m.bound_before || (best.mw && id > best.mw->id) || !pick(m)) continue;
    core::ObjId qp = 0;
    if (const OutstandingWr* inv = s.PendingLocalInv(m.rkey, &qp)) best = {&m, inv, qp};
  }
  return best;
}

// `what` happened to the window itself (its LOCAL_INV) or to its memory
// (the LOCAL_INV of the window over it).
void ReportInvalidateInFlight(CheckContext& c, const InvalidationInFlight& f, const std::string& what,
                              bool to_window) {
  const std::string inv =
      absl::StrFormat("(rkey 0x%x, wr_id=0x%x on %s)", f.mw->rkey, f.inv->wr_id, QpName(c.s, f.qp));
  c.Emit(core::CheckId::kInvalidateInFlight,
         absl::StrFormat(
             "%s while %s %s has not completed: the window is valid at the NIC, and the peer may still "
             "use its key, until that completion is polled",
             what, to_window ? "its LOCAL_INV" : absl::StrFormat("the LOCAL_INV of MW 0x%x", f.mw->id), inv),
         {{core::StackKind::kPosted, WrLabel(*f.inv, "outstanding"), f.inv->stack},
          {core::StackKind::kBound, "window bound at", f.mw->bound_at},
          {core::StackKind::kAllocated, absl::StrFormat("MW 0x%x allocated at", f.mw->id), f.mw->stack}});
}

}  // namespace

void CheckInvalidateInFlight(CheckContext& c) {
  const auto& e = c.e;
  if (c.s.mws().empty() || c.Repeated(core::CheckId::kInvalidateInFlight)) return;
  switch (e.kind) {
    case core::EventKind::kPostSend:
    case core::EventKind::kBindMw: {
      auto posted = c.Posted();
      for (size_t i = 0; i < posted.size(); ++i) {
        const core::SendWr& w = posted[i];
        if (w.opcode != IBV_WR_BIND_MW) continue;
        const MwState* m = c.s.Mw(w.bind.mw);
        if (!m) continue;
        InvalidationInFlight f;
        f.mw = m;
        f.inv = c.s.PendingLocalInv(m->rkey, &f.qp);
        if (!f.inv) continue;
        ReportInvalidateInFlight(
            c, f, absl::StrFormat("MW 0x%x bound again (wr_id=0x%x, %s)", m->id, w.wr_id, c.PostWhere()),
            true);
        return;
      }
      return;
    }
    case core::EventKind::kDeallocMw: {
      const MwState* m = c.s.Mw(e.obj);
      if (!m) return;
      InvalidationInFlight f;
      f.mw = m;
      f.inv = c.s.PendingLocalInv(m->rkey, &f.qp);
      if (f.inv) ReportInvalidateInFlight(c, f, absl::StrFormat("MW 0x%x deallocated", m->id), true);
      return;
    }
    case core::EventKind::kDeregMr:
    case core::EventKind::kReregMr: {  // a rereg is a dereg and a reg (ibv_rereg_mr(3))
      const MrState* mr = c.s.Mr(e.obj);
      if (!mr || (e.kind == core::EventKind::kReregMr && !ReregTouchesMr(e))) return;
      InvalidationInFlight f = FindInvalidationInFlight(c.s, [&](const MwState& m) { return m.mr == e.obj; });
      if (f.mw)
        ReportInvalidateInFlight(
            c, f,
            absl::StrFormat("MR 0x%x (lkey 0x%x) %s", e.obj, mr->lkey,
                            e.kind == core::EventKind::kDeregMr ? "deregistered" : "re-registered"),
            false);
      return;
    }
    case core::EventKind::kFreeRange: {
      if (e.length == 0) return;
      InvalidationInFlight f = FindInvalidationInFlight(
          c.s, [&](const MwState& m) { return OverlapsWindow(m.va, m.length, e.addr, e.length); });
      if (f.mw) ReportInvalidateInFlight(c, f, absl::StrFormat("[0x%x, +%d) freed", e.addr, e.length), false);
      return;
    }
    default:
      return;
  }
}

}  // namespace rdmasan::checkers
