// Each condition below names the check whose silence it proves; see that
// check's file for the rule and its wording.  use-after-destroy needs no
// condition: its events name a destroyed queue, which has no books, and
// the filters only ever see posts and polls of live queues.
#include "checkers/quiet.h"

#include <infiniband/verbs.h>

namespace rdmasan::checkers {
namespace {

// sge-count, invalid-lkey, sge-out-of-bounds and mr-access on one WR's
// scatter list.
[[gnu::always_inline]] inline bool SgesQuiet(const core::Sge* g, size_t n, int32_t num_sge, uint32_t max_sge,
                                             core::ObjId pd, bool nic_writes, const State& s, MrCache& mrs) {
  if (num_sge < 0 || static_cast<uint32_t>(num_sge) > max_sge) return false;
  for (size_t i = 0; i < n; ++i) {
    if (g[i].length == 0) continue;
    const MrState* mr = LookupMr(mrs, s, g[i].lkey);
    if (!mr || mr->pd != pd) return false;
    const uint64_t end = g[i].addr + g[i].length;
    if (g[i].addr < mr->iova || end > mr->iova + mr->length || end < g[i].addr) return false;
    if (nic_writes && !(mr->access & IBV_ACCESS_LOCAL_WRITE)) return false;
  }
  return true;
}

inline uint64_t TotalLength(const core::Sge* g, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) total += g[i].length;
  return total;
}

// overlapping-destinations on one WR's scatter list (earlier: a READ,
// atomic or receive of the same post came before).
inline bool DestsQuiet(const core::Sge* g, size_t n, bool earlier, const State& s, MrCache& mrs) {
  const DestIndex& d = s.dests();
  if (!d.receives()) return true;
  if (earlier) return false;
  for (size_t i = 0; i < n; ++i) {
    uint64_t lo, hi;
    Dest x;
    if (SgeRange(LookupMr(mrs, s, g[i].lkey), g[i], false, &lo, &hi) &&
        d.FindOverlap(
            lo, hi, [](const Dest&) { return true; }, &x))
      return false;
  }
  return true;
}

// unfenced-read-use on a gathering WR (earlier: a READ or atomic of the
// same post came before), while a READ or atomic is outstanding.
bool GatherOverlapQuiet(const core::Sge* g, size_t n, bool is_inline, bool earlier, const State& s,
                        MrCache& mrs) {
  if (earlier) return false;
  const DestIndex& d = s.dests();
  for (size_t i = 0; i < n; ++i) {
    uint64_t lo, hi;
    Dest x;
    if (SgeRange(is_inline ? nullptr : LookupMr(mrs, s, g[i].lkey), g[i], is_inline, &lo, &hi) &&
        d.FindOverlap(
            lo, hi, [](const Dest& y) { return y.local_write; }, &x))
      return false;
  }
  return true;
}
// The same, none outstanding in line.
[[gnu::always_inline]] inline bool GatherQuiet(const core::Sge* g, size_t n, bool is_inline, bool earlier,
                                               const State& s, MrCache& mrs) {
  if (__builtin_expect(!s.dests().AnyLocalWrite(), 1)) return !earlier;
  return GatherOverlapQuiet(g, n, is_inline, earlier, s, mrs);
}
inline bool GatherQuiet(const core::SendWr& w, bool earlier, const State& s, MrCache& mrs) {
  return GatherQuiet(w.sges.data(), w.sges.size(), (w.send_flags & IBV_SEND_INLINE) != 0, earlier, s, mrs);
}

}  // namespace

inline bool PostSendQuiet(const core::Event& e, const QpState& q, const State& s, MrCache& mrs,
                          const absl::flat_hash_set<uint64_t>& emitted, uint64_t enabled) {
  // A failed post: the checks tell the accepted WRs from the rest.
  if (e.bad_index != UINT32_MAX) return false;
  // post-bad-qp-state, post-after-error.
  if (q.state != IBV_QPS_RTS && q.state != IBV_QPS_SQD) return false;
  const uint32_t max_wr = q.caps.max_send_wr;
  const size_t n = e.send_wrs.size();
  const core::SendWr* wrs = e.send_wrs.data();
  // sq-overflow.
  if (q.sq.size() + n > max_wr) return false;
  uint64_t occupancy = q.sq.size();
  bool any_signaled = q.sq_signaled > 0;
  uint32_t run = q.unsignaled_run;
  bool run_reported = false;  // unsignaled-run spoke from this stack before
  const bool run_applies = !q.sq_sig_all && max_wr >= 2;
  uint64_t signaled = 0;
  bool local_writes = false;  // a READ or atomic came earlier in the chain
  // wr-id-duplicate (off by default) walks the queue's signaled WRs.
  const bool wr_ids = enabled >> static_cast<size_t>(core::CheckId::kWrIdDuplicate) & 1;
  for (size_t i = 0; i < n; ++i) {
    const core::SendWr& w = wrs[i];
    // rkey-not-bumped, invalidate-in-flight (such posts take every lock
    // and skip the filters anyway).
    if (w.opcode == IBV_WR_BIND_MW || w.opcode == IBV_WR_LOCAL_INV) return false;
    const core::Sge* g = w.sges.data();
    const size_t ng = w.sges.size();
    const bool sig = q.sq_sig_all || (w.send_flags & IBV_SEND_SIGNALED);
    // unsignaled-deadlock.
    any_signaled |= sig;
    if (++occupancy == max_wr && !any_signaled) return false;
    // unsignaled-run, which reports a run once per stack: a program that
    // signals every 100th of 128 WRs passes the mark in a third of its
    // posts, after its first report from that stack.
    if (run_applies) {
      run = (w.send_flags & IBV_SEND_SIGNALED) ? 0 : run + 1;
      if (run > max_wr / 2 && !run_reported) {
        if (!e.stack || !emitted.contains(EmittedKey(core::CheckId::kUnsignaledRun, e.stack))) return false;
        run_reported = true;
      }
    }
    signaled += sig;
    // atomic-misaligned (only an atomic's opcode can be, and a post of
    // anything else need not sum its SGEs for it).
    uint64_t atomic_len;
    if ((IsAtomic(w.opcode) || w.opcode == IBV_WR_ATOMIC_WRITE) && AtomicMisaligned(w, &atomic_len))
      return false;
    if (w.send_flags & IBV_SEND_INLINE) {
      // inline-too-large (an inline WR's lkeys are not used).
      if (TotalLength(g, ng) > q.caps.max_inline_data) return false;
    } else if (!SgesQuiet(g, ng, w.num_sge, q.caps.max_send_sge, q.pd, WritesLocal(w.opcode), s, mrs)) {
      return false;
    }
    // unfenced-read-use, overlapping-destinations (only while the books
    // keep destinations: a check that is off keeps none).
    if (__builtin_expect(s.dests().local_writes(), 0)) {
      if (WritesLocal(w.opcode)) {
        if (!DestsQuiet(g, ng, local_writes, s, mrs)) return false;
        local_writes = true;
      } else if (!GatherQuiet(w, local_writes, s, mrs)) {
        return false;
      }
    }
    // wr-id-duplicate.
    if (sig && wr_ids) {
      if (q.sq_signaled)
        for (const auto& o : q.sq)
          if (o.signaled && o.wr_id == w.wr_id) return false;
      for (size_t j = 0; j < i; ++j)
        if ((q.sq_sig_all || (wrs[j].send_flags & IBV_SEND_SIGNALED)) && wrs[j].wr_id == w.wr_id)
          return false;
    }
  }
  // cq-overrun.
  if (signaled && q.scq && s.PendingOn(*q.scq) + signaled > static_cast<uint64_t>(q.scq->cqe)) return false;
  return true;
}

inline bool OneSendQuiet(const OneSend& p, const QpState& q, const State& s, MrCache& mrs,
                         const absl::flat_hash_set<uint64_t>& emitted, uint64_t enabled) {
  // PostSendQuiet's tests for a chain of this one WR, in its order; a
  // OneSendable opcode is no window WR, no atomic (atomic-misaligned) and
  // no READ (its SGE is gathered, never written).
  // post-bad-qp-state, post-after-error.
  if (q.state != IBV_QPS_RTS && q.state != IBV_QPS_SQD) return false;
  const uint32_t max_wr = q.caps.max_send_wr;
  const size_t occupancy = q.sq.size() + 1;
  // sq-overflow.
  if (occupancy > max_wr) return false;
  const bool sig = q.sq_sig_all || (p.send_flags & IBV_SEND_SIGNALED);
  // unsignaled-deadlock.
  if (occupancy == max_wr && !(q.sq_signaled > 0 || sig)) return false;
  // unsignaled-run.
  if (!q.sq_sig_all && max_wr >= 2) {
    const uint32_t run = (p.send_flags & IBV_SEND_SIGNALED) ? 0 : q.unsignaled_run + 1;
    if (run > max_wr / 2 &&
        (!p.stack || !emitted.contains(EmittedKey(core::CheckId::kUnsignaledRun, p.stack))))
      return false;
  }
  const core::Sge* g = &p.sge;
  const size_t ng = p.has_sge ? 1 : 0;
  const bool is_inline = p.send_flags & IBV_SEND_INLINE;
  if (is_inline) {
    // inline-too-large.
    if (TotalLength(g, ng) > q.caps.max_inline_data) return false;
  } else if (!SgesQuiet(g, ng, p.num_sge, q.caps.max_send_sge, q.pd, false, s, mrs)) {
    return false;
  }
  // unfenced-read-use (overlapping-destinations reads only destinations).
  if (__builtin_expect(s.dests().local_writes(), 0) && !GatherQuiet(g, ng, is_inline, false, s, mrs))
    return false;
  // wr-id-duplicate.
  if (sig && (enabled >> static_cast<size_t>(core::CheckId::kWrIdDuplicate) & 1) && q.sq_signaled)
    for (const auto& o : q.sq)
      if (o.signaled && o.wr_id == p.wr_id) return false;
  // cq-overrun.
  if (sig && q.scq && s.PendingOn(*q.scq) + 1 > static_cast<uint64_t>(q.scq->cqe)) return false;
  return true;
}

bool OneRecvQuiet(const OneRecv& p, const QpState& q, const State& s, MrCache& mrs) {
  // PostRecvQuiet's tests for a chain of this one WR, in its order; the
  // caller declines when overlapping-destinations keeps receives.
  // post-bad-qp-state, post-after-error.
  if (q.state == IBV_QPS_RESET || q.state == IBV_QPS_ERR) return false;
  // rq-overflow.
  if (!q.srq && q.rq.size() + 1 > q.caps.max_recv_wr) return false;
  // cq-overrun.
  if (q.rcq && s.PendingOn(*q.rcq) + 1 > static_cast<uint64_t>(q.rcq->cqe)) return false;
  return SgesQuiet(&p.sge, p.has_sge ? 1 : 0, p.num_sge, q.caps.max_recv_sge, q.pd, true, s, mrs);
}

bool PostRecvQuiet(const core::Event& e, const QpState& q, const State& s, MrCache& mrs) {
  if (e.bad_index != UINT32_MAX) return false;
  // post-bad-qp-state, post-after-error.
  if (q.state == IBV_QPS_RESET || q.state == IBV_QPS_ERR) return false;
  const size_t n = e.recv_wrs.size();
  // rq-overflow.
  if (!q.srq && q.rq.size() + n > q.caps.max_recv_wr) return false;
  // cq-overrun.
  if (n && q.rcq && s.PendingOn(*q.rcq) + n > static_cast<uint64_t>(q.rcq->cqe)) return false;
  for (size_t i = 0; i < n; ++i) {
    const core::RecvWr& w = e.recv_wrs[i];
    if (!SgesQuiet(w.sges.data(), w.sges.size(), w.num_sge, q.caps.max_recv_sge, q.pd, true, s, mrs))
      return false;
    // overlapping-destinations.
    if (__builtin_expect(s.dests().receives(), 0) && !DestsQuiet(w.sges.data(), w.sges.size(), i > 0, s, mrs))
      return false;
  }
  return true;
}

bool PollQuiet(const core::Event& e) {
  // error-completion: only a completion in error (other than a flush).
  const core::Completion* wc = e.wcs.data();
  for (size_t i = 0, n = e.wcs.size(); i < n; ++i)
    if (wc[i].status != IBV_WC_SUCCESS && wc[i].status != IBV_WC_WR_FLUSH_ERR) return false;
  return true;
}

}  // namespace rdmasan::checkers
