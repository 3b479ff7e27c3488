// unfenced-read-use: no WR gathers from, or LOCAL_INVs the MR of, local
// memory that an outstanding RDMA READ or atomic still writes, unless
// IBV_SEND_FENCE orders it behind that READ on the same QP
// (docs/checks.md#unfenced-read-use).  A READ or atomic is outstanding from
// its post until the completion that retires it is polled.  A WR posted
// after it on the same QP may start before its result lands (IBTA vol. 1's
// ordering rules; ibv_post_send(3): IBV_SEND_FENCE waits for prior READs
// and atomics); a fenced WR waits, and so does every WR behind a fenced one
// (the send queue starts WRs in order).  Nothing orders two QPs: on any
// other QP a fence does not help.  An inline WR copies its payload at the
// post, before any READ could be known to have landed: fenced or not.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

// A WR whose send-side SGEs the NIC (or, inline, the post) reads.
bool Gathers(uint32_t op) { return !WritesLocal(op) && op != IBV_WR_LOCAL_INV && op != IBV_WR_BIND_MW; }

struct Hit {
  Dest d;
  bool same_qp = false;
};

}  // namespace

void CheckUnfencedReadUse(CheckContext& c) {
  constexpr core::CheckId kId = core::CheckId::kUnfencedReadUse;
  if (!c.qp || c.Repeated(kId)) return;
  const DestIndex& dests = c.s.dests();
  const auto posted = c.Posted();
  // The fence epoch each WR of the chain sees (the QP's count of fenced
  // WRs, its own included): a READ stamped with an older epoch is fenced
  // off from it.
  absl::InlinedVector<uint32_t, 4> epoch(posted.size());
  uint32_t ep = c.qp->fence_epoch;
  bool chain_writes = false;  // an earlier WR of this chain is a READ or atomic
  for (size_t i = 0; i < posted.size(); ++i) {
    const core::SendWr& w = posted[i];
    if (w.send_flags & IBV_SEND_FENCE) ++ep;
    epoch[i] = ep;
    const bool is_inline = (w.send_flags & IBV_SEND_INLINE) != 0;
    // Whether a READ or atomic (of this QP, with the epoch after its post)
    // is still unordered with this WR.
    auto unordered = [&](bool same_qp, uint32_t read_epoch) {
      return is_inline || !same_qp || read_epoch >= ep;
    };
    if (WritesLocal(w.opcode)) {
      chain_writes = true;
      continue;
    }
    std::optional<Hit> hit;
    uint64_t lo = 0, hi = 0;
    size_t sge = 0;
    if (w.opcode == IBV_WR_LOCAL_INV) {
      // The MR whose key it invalidates, under a READ's result.
      auto names_it = [&](uint32_t lkey) {
        const MrState* m = c.MrByLkey(lkey);
        return m && (m->rkey == w.imm_data || m->lkey == w.imm_data);
      };
      Dest d;
      if (dests.FindAny(
              [&](const Dest& x) {
                return x.local_write && unordered(x.queue == c.e.obj, x.fence_epoch) && names_it(x.lkey);
              },
              &d))
        hit = Hit{d, d.queue == c.e.obj};
      for (size_t j = 0; !hit && j < i; ++j)
        if (WritesLocal(posted[j].opcode) && unordered(true, epoch[j]))
          for (const core::Sge& g : posted[j].sges)
            if (names_it(g.lkey) && SgeRange(c.MrByLkey(g.lkey), g, false, &d.lo, &d.hi)) {
              d.queue = c.e.obj, d.opcode = posted[j].opcode, d.wr_id = posted[j].wr_id;
              d.lkey = g.lkey, d.stack = c.e.stack;
              hit = Hit{d, true};
              break;
            }
    } else if (Gathers(w.opcode) && (chain_writes || dests.AnyLocalWrite())) {
      for (sge = 0; !hit && sge < w.sges.size(); ++sge) {
        const core::Sge& g = w.sges[sge];
        if (!SgeRange(is_inline ? nullptr : c.MrByLkey(g.lkey), g, is_inline, &lo, &hi)) continue;
        Dest d;
        if (dests.FindOverlap(
                lo, hi,
                [&](const Dest& x) { return x.local_write && unordered(x.queue == c.e.obj, x.fence_epoch); },
                &d))
          hit = Hit{d, d.queue == c.e.obj};
        for (size_t j = 0; !hit && j < i; ++j) {
          if (!WritesLocal(posted[j].opcode) || !unordered(true, epoch[j])) continue;
          for (const core::Sge& r : posted[j].sges)
            if (SgeRange(c.MrByLkey(r.lkey), r, false, &d.lo, &d.hi) && d.lo < hi && d.hi > lo) {
              d.queue = c.e.obj, d.opcode = posted[j].opcode, d.wr_id = posted[j].wr_id;
              d.lkey = r.lkey, d.stack = c.e.stack;
              hit = Hit{d, true};
              break;
            }
        }
      }
      --sge;
    }
    if (!hit) continue;
    const Dest& d = hit->d;
    const std::string read = absl::StrFormat("%s wr_id=0x%x %s", WrOpcodeName(d.opcode), d.wr_id,
                                             hit->same_qp ? "on the same QP" : "on " + QpName(c.s, d.queue));
    const char* why = !hit->same_qp ? "IBV_SEND_FENCE orders only the WRs of one QP"
                      : is_inline   ? "an inline WR copies its payload at the post, fenced or not"
                                    : "without IBV_SEND_FENCE it may start before that result lands";
    std::string what;
    if (w.opcode == IBV_WR_LOCAL_INV)
      what = absl::StrFormat(
          "LOCAL_INV wr_id=0x%x invalidates key 0x%x, the MR that %s still writes [0x%x, +%d) "
          "through",
          w.wr_id, w.imm_data, read, d.lo, d.hi - d.lo);
    else
      what = absl::StrFormat(
          "%s wr_id=0x%x gathers SGE %d [0x%x, +%d) from memory that %s still writes "
          "([0x%x, +%d))",
          WrOpcodeName(w.opcode), w.wr_id, sge, lo, hi - lo, read, d.lo, d.hi - d.lo);
    std::vector<core::RelatedStack> rel = {
        {core::StackKind::kPosted,
         absl::StrFormat("outstanding WR wr_id=0x%x %s posted at", d.wr_id, WrOpcodeName(d.opcode)),
         d.stack}};
    if (const MrState* m = c.MrByLkey(d.lkey))
      rel.push_back(
          {core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", m->id), m->stack});
    c.Emit(kId,
           absl::StrFormat("%s: %s: its completion has not been polled, and %s", c.PostWhere(), what, why),
           std::move(rel));
    return;
  }
}

}  // namespace rdmasan::checkers
