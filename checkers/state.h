// checkers/state: the books the verbs rules require, kept from Events alone.
//
// Objects by id (PDs, MRs, CQs, SRQs, QPs, AHs), each with the stack that
// made it; per QP the exact send-queue model (a WR occupies its slot from
// post until a completion retires it; a signaled completion retires it and
// every earlier WR of that SQ; an error or flush completion retires one),
// the receive-queue occupancy and the shadow QP state; per CQ the bound
// QPs, arming and event counts.  Limits are the values the provider
// returned.
//
// May not: look at anything but Events (no clock, no I/O, no verbs), or
// report: checks read this state and decide.
#ifndef RDMASAN_CHECKERS_STATE_H_
#define RDMASAN_CHECKERS_STATE_H_

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <infiniband/verbs.h>

#include "absl/container/btree_map.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/container/inlined_vector.h"
#include "absl/container/node_hash_map.h"
#include "checkers/destinations.h"
#include "checkers/keyed_ring.h"
#include "checkers/ring.h"
#include "core/event.h"

namespace rdmasan::checkers {

using core::ObjId;
using core::StackId;

struct PdState {
  StackId stack = 0;
};

struct MrState {
  ObjId id = 0;
  ObjId pd = 0;
  uint64_t addr = 0, length = 0, iova = 0;
  uint32_t access = 0, lkey = 0, rkey = 0;
  StackId stack = 0;
};

// An MR of device memory (ibv_reg_dm_mr): zero-based, with no address in
// the program's memory (addr 0).  Its SGEs are offsets into the device's
// memory: no free or unmap of the program's touches it.
inline bool IsDeviceMemory(const MrState& m) { return (m.access & IBV_ACCESS_ZERO_BASED) && m.addr == 0; }

// Whether an ibv_rereg_mr that returned `ret` left its MR re-registered: on
// success, and after IBV_REREG_MR_ERR_DO_FORK_OLD ("New MR is valid": only
// restoring fork on the old range failed).
inline bool ReregApplied(int32_t ret) { return ret == 0 || ret == IBV_REREG_MR_ERR_DO_FORK_OLD; }

// The SGEs of an outstanding WR, contiguous: one in place (nearly every WR
// has one, and copying it is a few stores), more on the heap, whose block
// a reused queue slot keeps.
class WrSges {
 public:
  WrSges() = default;
  WrSges(const WrSges& o) { assign(o.begin(), o.end()); }
  WrSges& operator=(const WrSges& o) {
    if (this != &o) assign(o.begin(), o.end());
    return *this;
  }
  WrSges(WrSges&& o) noexcept { *this = std::move(o); }
  WrSges& operator=(WrSges&& o) noexcept {
    if (this == &o) return *this;
    n_ = o.n_;
    one_ = o.one_;
    more_ = std::move(o.more_);
    cap_ = o.cap_;
    o.n_ = o.cap_ = 0;
    return *this;
  }
  // Field by field: a whole Sge copied with wide moves right after the
  // interposer's narrow stores would stall on store forwarding.
  static void Copy(const core::Sge& from, core::Sge* to) {
    to->addr = from.addr;
    to->length = from.length;
    to->lkey = from.lkey;
    to->hash = from.hash;
    to->hash_now = from.hash_now;
  }
  void assign(const core::Sge* b, const core::Sge* e) {
    n_ = static_cast<uint32_t>(e - b);
    if (n_ > 1 && cap_ < n_) {
      more_.reset(new core::Sge[n_]);
      cap_ = n_;
    }
    core::Sge* d = data();
    for (uint32_t i = 0; i < n_; ++i) Copy(b[i], d + i);
  }
  // One SGE (g), or none (null): assign() without its loop.
  void assign_one(const core::Sge* g) {
    n_ = g ? 1 : 0;
    if (g) Copy(*g, &one_);
  }
  size_t size() const { return n_; }
  bool empty() const { return n_ == 0; }
  core::Sge* data() { return n_ <= 1 ? &one_ : more_.get(); }
  const core::Sge* data() const { return n_ <= 1 ? &one_ : more_.get(); }
  core::Sge& operator[](size_t i) { return data()[i]; }
  const core::Sge& operator[](size_t i) const { return data()[i]; }
  core::Sge* begin() { return data(); }
  core::Sge* end() { return data() + n_; }
  const core::Sge* begin() const { return data(); }
  const core::Sge* end() const { return data() + n_; }

 private:
  uint32_t n_ = 0;
  uint32_t cap_ = 0;  // of more_
  core::Sge one_;
  std::unique_ptr<core::Sge[]> more_;
};

struct OutstandingWr {
  uint64_t wr_id = 0;
  uint32_t opcode = 0;
  bool signaled = false;
  bool is_inline = false;
  bool is_recv = false;
  bool hashed = false;  // some SGE's payload was hashed at the post
  bool is_tag = false;  // a TM SRQ's tagged buffer (TAG_ADD): wr_id is its recv_wr_id
  StackId stack = 0;
  uint32_t rkey = 0;  // the WR's imm_data: LOCAL_INV's invalidate_rkey
  ObjId ah = 0;
  uint64_t dest_key = 0;  // its destinations in State::dests() (0: none)
  WrSges sges;            // their lkeys name the MRs used
};

// A post_send of one WR with at most one SGE that the provider accepted,
// as the data path hands it to the engine (Engine::PostOneSend) instead of
// a core::Event: the fields the books and the quiet filter read, meaning
// what the event's do.  Only the opcodes and flags OneSendable takes.
struct OneSend {
  ObjId qp = 0;
  StackId stack = 0;
  uint32_t opcode = 0;      // ibv_wr_opcode
  uint32_t send_flags = 0;  // ibv_send_flags
  uint32_t imm_data = 0;
  int32_t num_sge = 0;   // as given
  bool has_sge = false;  // sge was read: num_sge 1, within the QP's limit
  uint64_t wr_id = 0;
  core::Sge sge;  // hash: the payload's at the post, 0 if not taken
};

// Whether a WR of this opcode and these flags may go as a OneSend: a SEND
// or RDMA WRITE (with immediate or invalidation) without a fence, whose
// books are its queue slot alone (a READ or atomic, a fence or a window WR
// also changes the destinations index or the windows, from the event).
inline bool OneSendable(uint32_t opcode, uint32_t send_flags) {
  return (opcode == IBV_WR_SEND || opcode == IBV_WR_RDMA_WRITE || opcode == IBV_WR_SEND_WITH_IMM ||
          opcode == IBV_WR_RDMA_WRITE_WITH_IMM || opcode == IBV_WR_SEND_WITH_INV) &&
         !(send_flags & IBV_SEND_FENCE);
}

// A post_recv of one WR with at most one SGE that the provider accepted,
// to a QP, as the data path hands it to the engine (Engine::PostOneRecv)
// instead of a core::Event: the fields of the event's one RecvWr.
struct OneRecv {
  ObjId qp = 0;
  StackId stack = 0;
  int32_t num_sge = 0;   // as given
  bool has_sge = false;  // sge was read: num_sge 1, within the QP's limit
  uint64_t wr_id = 0;
  core::Sge sge;  // hash 0: a receive's buffer is not hashed at the post
};

// The compact record of an event, for a replay and tests: a post_recv
// the live run's compact entry takes (Engine::PostOneRecv: one WR with at
// most one SGE, accepted), as the data path fills it from the WR whose
// event this is; false for any other event.
inline bool OneRecvOf(const core::Event& e, OneRecv* p) {
  if (e.kind != core::EventKind::kPostRecv || e.ret != 0 || e.bad_index != UINT32_MAX ||
      e.recv_wrs.size() != 1)
    return false;
  const core::RecvWr& w = e.recv_wrs[0];
  if (w.num_sge > 1 || w.sges.size() > 1) return false;
  p->qp = e.obj;
  p->stack = e.stack;
  p->num_sge = w.num_sge;
  p->wr_id = w.wr_id;
  p->has_sge = !w.sges.empty();
  p->sge = p->has_sge ? w.sges[0] : core::Sge{};
  return true;
}

// A post_send the live run's compact entry takes (Engine::PostOneSend:
// one WR of a OneSendable opcode with at most one SGE, accepted, no AH),
// with the payload hash its event recorded; false for any other event.
inline bool OneSendOf(const core::Event& e, OneSend* p) {
  if (e.kind != core::EventKind::kPostSend || e.ret != 0 || e.bad_index != UINT32_MAX ||
      e.send_wrs.size() != 1)
    return false;
  const core::SendWr& w = e.send_wrs[0];
  if (!OneSendable(w.opcode, w.send_flags) || w.num_sge > 1 || w.sges.size() > 1 || w.ah != 0) return false;
  p->qp = e.obj;
  p->stack = e.stack;
  p->opcode = w.opcode;
  p->send_flags = w.send_flags;
  p->imm_data = w.imm_data;
  p->num_sge = w.num_sge;
  p->wr_id = w.wr_id;
  p->has_sge = !w.sges.empty();
  p->sge = p->has_sge ? w.sges[0] : core::Sge{};
  return true;
}

// A memory window (ibv_alloc_mw) and its binding.  The binding fields
// describe the last binding, valid or not: an invalidation in flight still
// names the memory it covered.
struct MwState {
  ObjId id = 0, pd = 0;
  uint32_t type = 0;              // ibv_mw_type (0: unknown)
  StackId stack = 0;              // allocated at
  uint32_t rkey = 0;              // the key now: as allocated, or of the last binding
  bool valid = false;             // bound, and no invalidation posted or seen since
  bool bound_before = false;      // some binding was posted (rkey is its key)
  ObjId mr = 0;                   // the last binding's
  uint64_t addr = 0, length = 0;  // in the MR's iova space
  uint64_t va = 0;                // addr as a virtual address (through the MR)
  uint32_t access = 0;
  ObjId qp = 0;  // the QP that posted the last binding
  StackId bound_at = 0;
  // The last invalidation: what did it (a string literal: "LOCAL_INV",
  // "SEND_WITH_INV", "a zero-length bind", "ibv_dereg_mr") and where.
  const char* invalidated_by = "";
  StackId invalidated_at = 0;
};

// The reason the device gave for an error completion (kWcReason), kept
// for the error-completion report of the poll that returns it.
struct WcReason {
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
  uint32_t status = 0;
  std::string text;
};

struct CqState;

// A successful completion (or an error completion on an empty SQ) polled
// before the books had its WR: a second thread polled between the
// provider's post and the posting thread's books.  Kept until that post's
// books arrive (State::MatchEarly), for `ttl` more posts to the QP.
struct EarlyWc {
  uint64_t wr_id = 0;
  uint8_t ttl = 0;     // posts to the QP it still waits
  bool send = false;   // it may be a send's
  bool recv = false;   // it may be a receive's (retires the RQ's next WR)
  bool error = false;  // an error or flush completion (any WR with its wr_id)
};
struct EarlyWcs {
  static constexpr uint8_t kMax = 8;    // at most this many at once, oldest dropped
  static constexpr uint8_t kPosts = 8;  // each waits this many posts
  uint8_t n = 0;
  EarlyWc at[kMax];
};

struct QpState {
  ObjId pd = 0, send_cq = 0, recv_cq = 0, srq = 0;
  // The books of send_cq and recv_cq while those CQs live (null after
  // their destruction): the data path reaches them without a lookup.
  CqState* scq = nullptr;
  CqState* rcq = nullptr;
  uint32_t type = 0, qpn = 0, state = 0;  // ibv_qp_state (shadow)
  bool sq_sig_all = false;
  core::QpCaps caps;
  StackId stack = 0;
  Ring<OutstandingWr> sq;       // oldest first
  Ring<OutstandingWr> rq;       // oldest first (not used with an SRQ)
  uint32_t unsignaled_run = 0;  // unsignaled WRs since the last signaled one
  uint32_t sq_signaled = 0;     // signaled WRs among sq
  bool error_reported = false;
  bool known_error = false;  // an error completion was seen
  // Completions polled ahead of their post's books (its count, which every
  // post reads, beside the fields the post's checks read).
  EarlyWcs early;
  uint32_t fence_epoch = 0;  // IBV_SEND_FENCE WRs posted (kept with State::dests())
};

struct CqState {
  ObjId channel = 0;
  int32_t cqe = 0;
  StackId stack = 0;
  uint64_t events_got = 0, events_acked = 0;
  bool armed = false;
  bool armed_with_pending = false;  // completions could be pending when armed
  bool polled_since_arm = true;
  absl::flat_hash_set<ObjId> qps;   // bound as send or recv CQ
  absl::flat_hash_set<ObjId> srqs;  // SRQs whose receives complete here
  uint64_t pending = 0;             // outstanding signaled sends + QP receives
  // The QP of the last completion retired from this CQ (consecutive
  // completions mostly name the same QP); cleared when that QP goes.
  uint32_t last_qpn = 0;
  ObjId last_qp_id = 0;
  QpState* last_qp = nullptr;
};

// A tagged buffer of a TM SRQ (TAG_ADD), from its post until the
// completion that ends the device's use of it: the TM_RECV with
// TM_DATA_VALID (or TM_RNDV_INCOMPLETE) of a match, or the successful
// TM_DEL that removed it unmatched.
struct TmTag {
  OutstandingWr wr;      // is_tag; wr_id = recv_wr_id, sges = the buffer
  uint64_t tag = 0;      // tm.add.tag
  uint64_t seq = 0;      // post order (handles are reused)
  bool matched = false;  // a TM_RECV with TM_MATCH came, its data has not
};

// A TM SRQ's list operation waiting for its completion (a signaled one,
// or a TAG_DEL: a removal that fails always completes).
struct TmOp {
  uint64_t wr_id = 0;
  uint32_t opcode = 0;  // ibv_ops_wr_opcode
  uint32_t handle = 0;
  bool signaled = false;
};

struct SrqState {
  ObjId pd = 0;
  ObjId cq = 0;  // an XRC SRQ's CQ: its receives complete there, whichever QP took them
  uint32_t max_wr = 0;
  uint32_t max_sge = 0;
  StackId stack = 0;
  KeyedRing<OutstandingWr> rq;  // oldest first; retired by wr_id in any order
  absl::flat_hash_set<ObjId> qps;
  // Tag matching (an IBV_SRQT_TM SRQ): the CQ its list operations complete
  // on, its tagged buffers by handle, its operations awaiting completion.
  bool tm = false;
  ObjId tm_cq = 0;
  absl::btree_map<uint32_t, TmTag> tags;
  std::deque<TmOp> tm_ops;
  uint64_t tm_seq = 0;
  EarlyWcs early;  // receives polled ahead of their post's books
};

// An SRQ's tagged buffers as a range of OutstandingWr (what the checks
// that walk queues take).
class TagWrs {
 public:
  using Map = absl::btree_map<uint32_t, TmTag>;
  explicit TagWrs(const SrqState& s) : m_(s.tags) {}
  class Iter {
   public:
    explicit Iter(Map::const_iterator it) : it_(it) {}
    const OutstandingWr& operator*() const { return it_->second.wr; }
    Iter& operator++() {
      ++it_;
      return *this;
    }
    bool operator!=(const Iter& o) const { return it_ != o.it_; }

   private:
    Map::const_iterator it_;
  };
  Iter begin() const { return Iter(m_.begin()); }
  Iter end() const { return Iter(m_.end()); }

 private:
  const Map& m_;
};

// Whether a completion is one of tag matching (core::EventKind::kTmWc):
// a list operation's, a TM SRQ's receive, or a tag-matching error.
inline bool IsTmCompletion(uint32_t status, uint32_t opcode) {
  if (status == IBV_WC_SUCCESS) return opcode >= IBV_WC_TM_ADD && opcode <= IBV_WC_TM_NO_TAG;
  return status == IBV_WC_TM_ERR || status == IBV_WC_TM_RNDV_INCOMPLETE;
}
// kTmWc's count when the provider gave no wc_flags (an ibv_cq_ex without
// read_wc_flags): the books match a TM_RECV by its wr_id alone.
inline constexpr uint32_t kTmFlagsUnknown = 1u << 31;

struct AhState {
  ObjId pd = 0;
  StackId stack = 0;
};

struct RetiredWr {
  ObjId qp = 0;
  OutstandingWr wr;
};

// An object the program destroyed (a successful destroy, dealloc, dereg or
// close): what it was, where it was made and where it went.  The interposer
// keeps using its id for later calls on the stale handle (use-after-destroy).
struct DestroyedObj {
  const char* what = "";  // "QP", "CQ", "SRQ", "AH", "PD", "MR", "device context"
  StackId created = 0, destroyed = 0;
};

// The books of one CQ as a hang report tells them: the work outstanding on
// the queues whose completions land on it (read-only, see
// State::Outstanding).
struct CqOutstanding {
  struct Queue {
    ObjId qp = 0;        // the QP, or 0 for an SRQ
    ObjId srq = 0;       // the SRQ, for an SRQ's receives
    uint32_t qpn = 0;    // of the QP
    uint32_t state = 0;  // the QP's shadow ibv_qp_state
    // Outstanding sends whose completions land here (a QP whose send CQ
    // this is), and posted receives (its receive CQ, or an SRQ's).
    uint32_t signaled_sends = 0, unsignaled_sends = 0, recvs = 0;
  };
  ObjId cq = 0;
  ObjId channel = 0;  // its completion channel, 0 if none
  bool armed = false;
  uint64_t events_unacked = 0;
  StackId stack = 0;          // where it was made
  std::vector<Queue> queues;  // in QP (then SRQ) id order, the idle ones too
  // Completions that can still land here without the peer's help or the
  // program's: signaled sends and posted receives; in a QP in ERR every
  // outstanding WR is flushed, its unsignaled sends too.
  uint64_t CouldComplete() const;
};

class State {
 public:
  // Applies an event to the books (after the checks of that event ran).
  // Send WRs with payload hashes that the event retired are appended to
  // `retired` (if not null), for the interposer to hash again
  // (buffer-modified-in-flight).
  //
  // Concurrency (see engine.h): events on the data path (posts, polls,
  // arming and CQ events) change only the books of their lock domain (a
  // QP, its CQs and SRQ) and read the rest; every other event runs alone.
  //
  // `books`, if not null, is the event's object's own books (the QpState,
  // SrqState or CqState the engine reached it by), sparing a lookup.
  void Apply(const core::Event& e, std::vector<RetiredWr>* retired = nullptr, void* books = nullptr);
  // Apply of a post_send to the QP whose books are `qp`, and of a poll of
  // the CQ whose books are `cq` (null: none), for the data path.
  void ApplyPostSend(const core::Event& e, QpState* qp);
  void ApplyPollCq(const core::Event& e, CqState* cq, std::vector<RetiredWr>* retired) {
    ApplyPollCq(e.obj, e.wcs.data(), e.wcs.size(), cq, retired);
  }
  // The same from a poll's completions: `n` of them polled from CQ `cq_id`.
  void ApplyPollCq(ObjId cq_id, const core::Completion* wcs, size_t n, CqState* cq,
                   std::vector<RetiredWr>* retired);
  // ApplyPollCq of one completion `wc` polled from CQ `cq_id`, whose books
  // are `cq` (the engine's one-completion poll: in line).
  void ApplyPollOne(ObjId cq_id, const core::Completion& wc, CqState& cq, std::vector<RetiredWr>* retired) {
    if (!RetireInLine(wc, cq, retired)) Retire(wc, cq_id, &cq, retired);
    cq.polled_since_arm = true;
  }
  // ApplyPostSend of a OneSend (OneSendable) to the QP whose books are
  // `qp`, writing its queue slot directly; false, with nothing changed,
  // when the destinations index must see the post (a hashed payload while
  // a READ or atomic is outstanding): apply its event then.
  bool ApplyOneSend(const OneSend& p, QpState* qp);
  // ApplyPostRecv of a OneRecv to the QP whose books are `qp`; false, with
  // nothing changed, when the destinations index keeps receives (the
  // overlapping-destinations check is on): apply its event then.
  bool ApplyOneRecv(const OneRecv& p, QpState* qp);

  // The books of one object, for the engine to hand back to Apply.  Their
  // addresses are stable until the object's destruction.
  QpState* MutableQp(ObjId id) { return FindMutable(qps_, id); }
  CqState* MutableCq(ObjId id) { return FindMutable(cqs_, id); }
  SrqState* MutableSrq(ObjId id) { return FindMutable(srqs_, id); }

  const PdState* Pd(ObjId id) const { return Find(pds_, id); }
  const MrState* Mr(ObjId id) const { return Find(mrs_, id); }
  const CqState* Cq(ObjId id) const { return Find(cqs_, id); }
  const QpState* Qp(ObjId id) const { return Find(qps_, id); }
  const SrqState* Srq(ObjId id) const { return Find(srqs_, id); }
  const AhState* Ah(ObjId id) const { return Find(ahs_, id); }
  const MwState* Mw(ObjId id) const { return Find(mws_, id); }
  // The live window whose key is now `rkey`, or null.
  const MwState* MwByRkey(uint32_t rkey) const;
  const absl::node_hash_map<ObjId, MwState>& mws() const { return mws_; }
  // The outstanding LOCAL_INV WR (of any QP) that invalidates `rkey`, or
  // null; *qp its QP.  The lowest QP id's, oldest first (replays agree).
  const OutstandingWr* PendingLocalInv(uint32_t rkey, ObjId* qp) const;
  // The reason the device gave for this error completion, or null.
  const WcReason* Reason(uint32_t qp_num, uint64_t wr_id, uint32_t status) const;
  // The live MR with this lkey, or 0.
  ObjId MrByLkey(uint32_t lkey) const;
  const MrState* MrStateByLkey(uint32_t lkey) const;
  // Changes with every registration and deregistration: caches of MR
  // lookups (checkers/check.h) are good while it holds.
  uint64_t mr_generation() const { return mr_generation_; }
  ObjId QpByNum(uint32_t qpn) const;
  // The QP with this number if it is bound to `cq` (as send or receive CQ):
  // a completion polled from `cq` can only be about such a QP.
  const QpState* QpOnCq(uint32_t qpn, ObjId cq, ObjId* id) const;

  const absl::node_hash_map<ObjId, MrState>& mrs() const { return mrs_; }
  const absl::node_hash_map<ObjId, QpState>& qps() const { return qps_; }
  const absl::node_hash_map<ObjId, SrqState>& srqs() const { return srqs_; }
  const absl::flat_hash_map<ObjId, AhState>& ahs() const { return ahs_; }
  template <typename Pred>
  ObjId LowestCqWhere(Pred pred) const {
    ObjId best = 0;
    for (const auto& [id, cq] : cqs_)
      if ((best == 0 || id < best) && pred(cq)) best = id;
    return best;
  }
  bool fork_initialized() const { return fork_init_; }
  // A destroyed object (the last kMaxDestroyed of them), or null.
  static constexpr size_t kMaxDestroyed = 4096;
  const DestroyedObj* Destroyed(ObjId id) const { return Find(destroyed_, id); }

  // The outstanding destinations of READs, atomics and receives
  // (checkers/destinations.h), kept for the checks that are on.
  const DestIndex& dests() const { return dests_; }
  void TrackDestinations(bool local_writes, bool receives) { dests_.Track(local_writes, receives); }

  // True if an outstanding WR (of any QP or SRQ) has a non-empty SGE with
  // this lkey.
  bool LkeyInFlight(uint32_t lkey) const;

  // Every live CQ's outstanding work, in CQ id order.
  std::vector<CqOutstanding> Outstanding() const;

  // Completions that can still land on `cq`: outstanding signaled sends and
  // posted receives of every QP (and SRQ) bound to it.
  uint64_t PendingOn(ObjId cq) const;
  // In line where no SRQ completes on the CQ (every post's cq-overrun test).
  uint64_t PendingOn(const CqState& cq) const { return cq.srqs.empty() ? cq.pending : PendingWithSrqs(cq); }

  // Which queue a completion retires: kNone if it matches nothing.  (A
  // plain enum, not an optional: returned in a register.)
  enum class Queue : uint32_t { kNone, kSend, kRecv, kSrq };
  Queue Classify(const core::Completion& wc, const QpState& qp, ObjId polled_cq) const {
    // A successful completion says: receive opcodes have bit 7 set
    // (IBV_WC_RECV and later).
    if (wc.status == IBV_WC_SUCCESS)
      return (wc.opcode & IBV_WC_RECV) ? (qp.srq ? Queue::kSrq : Queue::kRecv) : Queue::kSend;
    return ClassifyError(wc, qp, polled_cq);
  }

 private:
  template <typename M>
  static typename M::mapped_type* FindMutable(M& m, ObjId id) {
    auto it = m.find(id);
    return it == m.end() ? nullptr : &it->second;
  }
  template <typename M>
  static const typename M::mapped_type* Find(const M& m, ObjId id) {
    auto it = m.find(id);
    return it == m.end() ? nullptr : &it->second;
  }
  // Apply, one event kind each (those Apply does in a line are not here).
  // Defined in state.cc, which is in the engine's translation unit
  // (checkers/ is one unity build): the data-path ones (posts, CQ arming
  // and events) inline into Apply and the engine's dispatch as before.
  void ApplyPostRecv(const core::Event& e, QpState* qp);
  void ApplyPostSrqRecv(const core::Event& e, SrqState* srq);
  void ApplyReqNotifyCq(const core::Event& e);
  void ApplyGetCqEvent(const core::Event& e);
  void ApplyAckCqEvents(const core::Event& e);
  void ApplyRegMr(const core::Event& e);
  void ApplyDeregMr(const core::Event& e);
  void ApplyCreateCq(const core::Event& e);
  void ApplyDestroyCq(const core::Event& e);
  void ApplyCreateSrq(const core::Event& e);
  void ApplyCreateQp(const core::Event& e);
  void ApplyModifyQp(const core::Event& e);
  void ApplyDestroyQp(const core::Event& e);
  void ApplyAsyncEvent(const core::Event& e);
  void ApplyAllocMw(const core::Event& e);
  void ApplyDeallocMw(const core::Event& e);
  void ApplyReregMr(const core::Event& e);
  void ApplyRemoteInv(const core::Event& e);
  void ApplyWcReason(const core::Event& e);
  void ApplyPostSrqOps(const core::Event& e);
  void ApplyTmWc(const core::Event& e);
  // The window effects of a post's accepted send WRs (BIND_MW, LOCAL_INV).
  void ApplyWindowWrs(const core::Event& e, size_t accepted);
  MwState* MutableMwByRkey(uint32_t rkey);
  // Remembers the object a successful destroy event removes (before the
  // books of the object go).
  void NoteDestroyed(const core::Event& e);
  // The destinations index (destinations.cc): a post's last `accepted` WRs
  // of q's SQ (READ and atomic results in; payload hashes of the bytes a
  // READ or atomic still writes dropped), one receive, and retirements.
  void AddSendDests(const core::Event& e, ObjId qp, QpState& q, size_t accepted);
  void AddRecvDest(const core::RecvWr& w, ObjId queue, bool srq, StackId stack, OutstandingWr* o);
  void DropDests(const OutstandingWr& w) {
    if (w.dest_key) dests_.Remove(w.dest_key);
  }
  void DropQpDests(const QpState& q);

  void Retire(const core::Completion& wc, ObjId cq, CqState* cq_state, std::vector<RetiredWr>* retired);
  // Retires q's SQ up to and including its WR `i` (a completion of it and
  // the unsignaled WRs before it); those with payload hashes go to
  // `retired` (if not null) as QP `qid`'s.
  void RetireSends(QpState& q, ObjId qid, size_t i, std::vector<RetiredWr>* retired);
  // The early completions (EarlyWc, state_early.cc): one Retire matched no
  // WR with, kept on its QP or SRQ (`send`, `recv`: which queue's it may
  // be; an error completion on a CQ both share, both empty: either); and,
  // after a post's books (early.n != 0), those the post's WRs match
  // retired, the rest a post older.
  static void NoteEarly(EarlyWcs& early, const core::Completion& wc, bool send, bool recv);
  void MatchEarly(QpState& q);
  void MatchEarly(SrqState& srq);
  // Retire's work in line for the common completion, true when done: a
  // successful one of the CQ's last QP (MutableQpOnCq's cache) that is a
  // send retiring the head of the SQ alone, or a receive (not tag
  // matching's) of a QP with no SRQ; false, nothing done, for the rest.
  bool RetireInLine(const core::Completion& wc, CqState& cq, std::vector<RetiredWr>* retired) {
    if (wc.status != IBV_WC_SUCCESS || !cq.last_qp || cq.last_qpn != wc.qp_num) return false;
    QpState& qp = *cq.last_qp;
    if (!(wc.opcode & IBV_WC_RECV)) {
      if (qp.sq.empty()) return false;
      OutstandingWr& w = qp.sq.front();
      if (!w.signaled || w.wr_id != wc.wr_id) return false;
      DropDests(w);
      if (retired && w.hashed) {  // built in the list (clang 14: no parenthesized aggregate init)
        RetiredWr& r = retired->emplace_back();
        r.qp = cq.last_qp_id;
        r.wr = std::move(w);
      }
      AdjustPending(qp.scq, -1);
      qp.sq_signaled -= 1;
      qp.sq.pop_front(1);
      return true;
    }
    if ((wc.opcode != IBV_WC_RECV && wc.opcode != IBV_WC_RECV_RDMA_WITH_IMM) || qp.srq || qp.rq.empty())
      return false;
    DropDests(qp.rq.front());
    qp.rq.pop_front();
    AdjustPending(qp.rcq, -1);
    return true;
  }
  // A completion on `cq` of no QP bound to it: an XRC receive, retired from
  // the XRC SRQs completing there.
  void RetireXrc(const core::Completion& wc, ObjId cq, CqState* cq_state);
  uint64_t PendingWithSrqs(const CqState& cq) const;
  Queue ClassifyError(const core::Completion& wc, const QpState& qp, ObjId polled_cq) const;
  static void AdjustPending(CqState* cq, int64_t delta) {
    if (!cq) return;
    uint64_t& p = cq->pending;
    p = (delta < 0 && static_cast<uint64_t>(-delta) > p) ? 0 : p + delta;
  }
  // QpOnCq for the books' own updates.
  QpState* MutableQpOnCq(uint32_t qpn, ObjId cq_id, CqState* cq, ObjId* id);
  // Drops a QP's outstanding work from its CQs' pending counts.
  void ForgetOutstanding(QpState& qp);

  absl::flat_hash_map<ObjId, PdState> pds_;
  absl::node_hash_map<ObjId, MrState> mrs_;
  absl::node_hash_map<ObjId, CqState> cqs_;
  absl::node_hash_map<ObjId, QpState> qps_;
  absl::node_hash_map<ObjId, SrqState> srqs_;
  absl::flat_hash_map<ObjId, AhState> ahs_;
  absl::node_hash_map<ObjId, MwState> mws_;
  absl::flat_hash_map<uint32_t, ObjId> mw_by_rkey_;
  std::deque<WcReason> reasons_;  // the latest kMaxReasons, oldest first
  static constexpr size_t kMaxReasons = 256;
  absl::flat_hash_map<uint32_t, const MrState*> mr_by_lkey_;  // into mrs_ (stable)
  uint64_t mr_generation_ = 1;
  absl::flat_hash_map<uint32_t, ObjId> qp_by_num_;
  bool fork_init_ = false;
  absl::flat_hash_map<ObjId, DestroyedObj> destroyed_;
  std::deque<ObjId> destroyed_order_;  // oldest first, at most kMaxDestroyed
  DestIndex dests_;
};

// How many WRs of a post's chain (`chain` of them in the event) the queue
// took: those before *bad_wr, and, when the post failed, never more than
// the room the queue had: a provider places WRs until the queue is full and
// refuses the next, so a cyclic chain (a WR's next pointing back, whose
// bad_wr the interposer cannot place) is counted as what fit.
inline size_t AcceptedWrs(const core::Event& e, size_t chain, size_t outstanding, uint32_t capacity) {
  size_t n = std::min<size_t>(chain, e.bad_index);
  if (e.ret != 0) n = std::min<size_t>(n, capacity > outstanding ? capacity - outstanding : 0);
  return n;
}

// Whether a post's chain has WRs that act on memory windows (BIND_MW,
// LOCAL_INV): such a post changes books outside its QP's lock domain.
inline bool HasWindowWrs(const core::Event& e) {
  for (const auto& w : e.send_wrs)
    if (w.opcode == IBV_WR_BIND_MW || w.opcode == IBV_WR_LOCAL_INV) return true;
  return false;
}

// WR opcodes that write into the local SGEs (RDMA READ and atomics).
bool WritesLocal(uint32_t wr_opcode);
bool IsAtomic(uint32_t wr_opcode);
// atomic-misaligned: an atomic (compare-and-swap, fetch-and-add, atomic
// write) whose remote address is not 8-aligned or whose value is not 8
// bytes; *total is the value's length.
bool AtomicMisaligned(const core::SendWr& w, uint64_t* total);
const char* WrOpcodeName(uint32_t wr_opcode);
const char* QpStateName(uint32_t state);

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_STATE_H_
