// overlapping-destinations: no two outstanding WRs let the NIC write the
// same local bytes: posted receives (of a QP or an SRQ), RDMA READ and
// atomic results (docs/checks.md#overlapping-destinations).  Nothing
// orders the placement of two messages into one buffer (receives of one
// queue complete in order, but the data of the later one may land first,
// and nothing at all orders two queues, or a READ's response against a
// receive), so what the buffer holds afterwards is undefined.  Off by
// default: programs that never read what they receive (the pingpongs,
// perftest) post every receive into one buffer on purpose.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

// One destination-bearing WR of the event.
struct Destined {
  const absl::InlinedVector<core::Sge, 2>* sges;
  uint64_t wr_id;
  uint32_t opcode;  // 0: a receive
};

std::string Describe(const State& s, const Dest& d, core::ObjId here, bool here_srq) {
  const std::string what = d.local_write ? absl::StrFormat("%s wr_id=0x%x", WrOpcodeName(d.opcode), d.wr_id)
                                         : absl::StrFormat("receive wr_id=0x%x", d.wr_id);
  if (d.queue == here && d.srq == here_srq) return what + (d.srq ? " of the same SRQ" : " on the same QP");
  return what + " of " + (d.srq ? absl::StrFormat("SRQ 0x%x", d.queue) : QpName(s, d.queue));
}

}  // namespace

void CheckOverlappingDestinations(CheckContext& c) {
  constexpr core::CheckId kId = core::CheckId::kOverlappingDestinations;
  const DestIndex& dests = c.s.dests();
  if (!dests.receives() || c.Repeated(kId)) return;
  absl::InlinedVector<Destined, 4> wrs;
  const bool srq = c.e.kind == core::EventKind::kPostSrqRecv;
  if (c.e.kind == core::EventKind::kPostSend) {
    for (const core::SendWr& w : c.Posted())
      if (WritesLocal(w.opcode)) wrs.push_back({&w.sges, w.wr_id, w.opcode});
  } else {
    size_t n = 0;
    if (srq) {
      if (const SrqState* q = c.s.Srq(c.e.obj))
        n = AcceptedWrs(c.e, c.e.recv_wrs.size(), q->rq.size(), q->max_wr);
    } else if (c.qp) {
      n = AcceptedWrs(c.e, c.e.recv_wrs.size(), c.qp->rq.size(), c.qp->caps.max_recv_wr);
    }
    for (size_t i = 0; i < n; ++i) wrs.push_back({&c.e.recv_wrs[i].sges, c.e.recv_wrs[i].wr_id, 0});
  }
  auto name = [](const Destined& w) {
    return w.opcode ? absl::StrFormat("%s wr_id=0x%x", WrOpcodeName(w.opcode), w.wr_id)
                    : absl::StrFormat("receive wr_id=0x%x", w.wr_id);
  };
  for (size_t i = 0; i < wrs.size(); ++i) {
    for (size_t k = 0; k < wrs[i].sges->size(); ++k) {
      const core::Sge& g = (*wrs[i].sges)[k];
      uint64_t lo, hi;
      if (!SgeRange(c.MrByLkey(g.lkey), g, false, &lo, &hi)) continue;
      Dest d;
      std::string other;
      if (dests.FindOverlap(
              lo, hi, [](const Dest&) { return true; }, &d)) {
        other = Describe(c.s, d, c.e.obj, srq);
      } else {
        // An earlier WR of this post (not in the books yet).
        for (size_t j = 0; j < i && other.empty(); ++j)
          for (const core::Sge& r : *wrs[j].sges)
            if (SgeRange(c.MrByLkey(r.lkey), r, false, &d.lo, &d.hi) && d.lo < hi && d.hi > lo) {
              d.wr_id = wrs[j].wr_id, d.opcode = wrs[j].opcode, d.local_write = wrs[j].opcode != 0;
              d.stack = c.e.stack;
              other = name(wrs[j]) + " of the same post";
              break;
            }
        if (other.empty()) continue;
      }
      c.Emit(kId,
             absl::StrFormat("%s: %s would place into [0x%x, +%d), which the outstanding %s may write too "
                             "([0x%x, +%d)): the NIC may place the two in either order",
                             c.PostWhere(), name(wrs[i]), lo, hi - lo, other, d.lo, d.hi - d.lo),
             {{core::StackKind::kPosted,
               absl::StrFormat("outstanding WR wr_id=0x%x %s posted at", d.wr_id,
                               d.local_write ? WrOpcodeName(d.opcode) : "RECV"),
               d.stack}});
      return;
    }
  }
}

}  // namespace rdmasan::checkers
