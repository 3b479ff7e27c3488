// checkers/check: what one check sees and how it speaks.
//
// A check is a function of (event, state before the event) that may emit
// Findings.  It may not change the state, keep state of its own, read a
// clock, do I/O or call verbs: the engine applies the event to the books
// after every check has looked at it, so a live run and a replay agree.
// The engine calls a check only for the event kinds its row of the table
// (core/checks.inc) names.
#ifndef RDMASAN_CHECKERS_CHECK_H_
#define RDMASAN_CHECKERS_CHECK_H_

#include <infiniband/verbs.h>

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "absl/types/span.h"
#include "checkers/state.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/report.h"

namespace rdmasan::checkers {

// The MRs a lock domain's posts named lately (most programs post from a
// few buffers): a lookup by lkey costs a compare while no MR was
// registered or deregistered since.  Owned by one domain, used under its
// lock.
struct MrCache {
  static constexpr int kWays = 4;
  uint64_t generation = 0;
  uint32_t lkey[kWays] = {};
  const MrState* mr[kWays] = {};
  bool valid[kWays] = {};
};

// The live MR with this lkey, or null, through a cache.
[[gnu::always_inline]] inline const MrState* LookupMr(MrCache& c, const State& s, uint32_t lkey) {
  if (c.generation != s.mr_generation()) c = MrCache{s.mr_generation()};
  const int w = lkey & (MrCache::kWays - 1);
  if (!c.valid[w] || c.lkey[w] != lkey) {
    c.lkey[w] = lkey;
    c.mr[w] = s.MrStateByLkey(lkey);
    c.valid[w] = true;
  }
  return c.mr[w];
}

// One WR's scatter list, as the SGE checks (sge-count, invalid-lkey,
// sge-out-of-bounds, mr-access) see it.
struct SgeList {
  const absl::InlinedVector<core::Sge, 2>* sges;
  int32_t num_sge;  // as given
  uint64_t wr_id;
  bool nic_writes;  // receives, RDMA READ and atomic destinations
};

// The scatter lists of a post event: every non-inline WR of a post to a
// known QP, or every WR of a post to a known SRQ.
struct PostLists {
  uint32_t max_sge = 0;  // the returned limit (QP or SRQ)
  core::ObjId pd = 0;    // the PD the MRs must belong to
  absl::InlinedVector<SgeList, 2> lists;
};

// The key of (check, stack) in a domain's set of reported findings.
inline uint64_t EmittedKey(core::CheckId id, core::StackId stack) {
  return (static_cast<uint64_t>(id) << 32) | stack;
}

class CheckContext {
 public:
  // `qp`: the event's object's books if it is a QP (the engine found them).
  CheckContext(const core::Event& e, const State& s, std::vector<core::Finding>* out,
               absl::flat_hash_set<uint64_t>* emitted, const QpState* qp, MrCache* mr_cache)
      : e(e), s(s), qp(qp), out_(out), emitted_(emitted), mr_cache_(mr_cache) {}
  const core::Event& e;
  const State& s;
  // The event's object as a QP (posts, modify, retire), else null.
  const QpState* qp;
  static bool OnQp(core::EventKind k) {
    return k == core::EventKind::kPostSend || k == core::EventKind::kPostRecv ||
           k == core::EventKind::kBindMw || k == core::EventKind::kRetire ||
           k == core::EventKind::kModifyQp || k == core::EventKind::kDestroyQp ||
           k == core::EventKind::kAsyncEvent;
  }
  void Emit(core::CheckId id, std::string message, std::vector<core::RelatedStack> related = {}) {
    if (e.stack) emitted_->insert(EmittedKey(id, e.stack));
    out_->push_back(core::Finding{id, std::move(message), e.stack, std::move(related)});
  }
  // True if this check already spoke from this call stack: reports are
  // deduplicated per (check, stack) anyway, so a check in a loop returns
  // before it formats the same finding again.
  bool Repeated(core::CheckId id) const { return e.stack && emitted_->contains(EmittedKey(id, e.stack)); }
  // The event's scatter lists (empty unless it is a post), worked out once
  // for all the SGE checks.
  const PostLists& Lists() {
    if (!lists_ready_) ComputeLists();
    return lists_;
  }
  // The send WRs the post accepted (those before *bad_wr, within the room
  // the SQ had: AcceptedWrs).
  absl::Span<const core::SendWr> Posted() const {
    const size_t n = qp ? AcceptedWrs(e, e.send_wrs.size(), qp->sq.size(), qp->caps.max_send_wr)
                        : std::min<size_t>(e.send_wrs.size(), e.bad_index);
    return {e.send_wrs.data(), n};
  }
  // "post_send to QP ..." and the like, for messages.
  std::string PostWhere() const;

  // The live MR with this lkey, or null (through the domain's MrCache).
  const MrState* MrByLkey(uint32_t lkey) { return LookupMr(*mr_cache_, s, lkey); }

 private:
  void ComputeLists();
  std::vector<core::Finding>* out_;
  absl::flat_hash_set<uint64_t>* emitted_;
  MrCache* mr_cache_;
  bool lists_ready_ = false;
  PostLists lists_;
};

// One function per check, each in its own file, generated from the table
// (core/checks.inc): Check<name>, which the engine calls only for the event
// kinds of its row.  (The rows with no events, hang and crash, are raised
// outside the engine: their functions are declared here and never defined
// or called.)
#define RDMASAN_CHECK_ROW(name, id, severity, on, order, events, invariant) void Check##name(CheckContext&);
#include "core/checks.inc"
#undef RDMASAN_CHECK_ROW

// Deterministic choice among several candidates: hash-map iteration order
// differs between engines (and so between a live run and its replay), so
// checks that name "one of" several objects name the lowest id.
template <typename Map, typename Pred>
core::ObjId LowestIdWhere(const Map& m, Pred pred) {
  core::ObjId best = 0;
  for (const auto& [id, v] : m)
    if ((best == 0 || id < best) && pred(v)) best = id;
  return best;
}
template <typename Set>
core::ObjId LowestId(const Set& s) {
  core::ObjId best = 0;
  for (core::ObjId id : s)
    if (best == 0 || id < best) best = id;
  return best;
}

// The outstanding work that uses the MR with this lkey (an MR's lkey names
// it while it lives): non-inline send WRs and receives of every QP, an
// SRQ's receives and tagged buffers, each counted once in *count.  Returns
// the oldest one on the queue with the lowest id (*on: a QP or an SRQ; ids
// are unique across both), so a replay names the same one; null if none.
// (dereg-in-flight, rereg-in-flight.)
const OutstandingWr* OldestUseOfLkey(const State& s, uint32_t lkey, uint64_t* count, core::ObjId* on);

// Whether an ibv_rereg_mr event may have changed its MR: its flags ask for
// a change, and the call did not fail before touching the MR.  After
// IBV_REREG_MR_ERR_INPUT and ERR_DONT_FORK_NEW the "old MR is valid"
// (ibv_rereg_mr(3)); after ERR_CMD it "shouldn't be used".
inline bool ReregTouchesMr(const core::Event& e) {
  constexpr uint32_t kChanges =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  return (e.count & kChanges) && e.ret != IBV_REREG_MR_ERR_INPUT && e.ret != IBV_REREG_MR_ERR_DONT_FORK_NEW;
}

// Small formatting helpers shared by the checks.
inline std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }
std::string QpName(const State& s, core::ObjId qp);
std::string WrLabel(const OutstandingWr& w, const char* what);

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_CHECK_H_
