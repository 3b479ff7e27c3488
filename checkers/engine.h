// checkers: pure checkers of the verbs rules (docs/checks.md).
//
// The Engine takes Events and returns the Findings they raise: every check
// looks at the event against the books as they stood before it, then the
// event is applied.  Events in, Findings out; nothing else.
//
// Concurrency: the books are split into lock domains.  Each CQ, SRQ and QP
// belongs to one; creating a QP merges the domains of its CQs and SRQ, so a
// domain is a connected group of queues that completions can cross.  An
// event of the data path (post to a QP or SRQ, poll, arm, CQ event, ack,
// retirement) locks only the domain of its object: it changes nothing
// outside it and only reads the rest (MRs, PDs, AHs), which change under
// every lock.  A domain's lock is biased to the thread that uses it
// (core/biased_lock.h).  Every other event (creation, destruction, registration,
// modify, async events, frees, fork, and any event on an unknown object)
// takes all domain locks.  Threads posting to QPs that share no CQ or SRQ
// therefore never wait for each other.  With `assign_seq`, each event gets
// its sequence number while it holds its locks, so the numbers order every
// two events that touch the same books: replaying a trace in seq order on
// one thread reproduces the live findings.
//
// Decisions of the harness (kDecision events) run no check: the engine
// numbers them (1-based, in the order it sees them, so a live run and the
// replay of its trace agree) and keeps the latest injected fault (a fault
// point's decision) per QP number and overall.  A finding raised by a later
// event on that QP, or by an event about no QP after any injected fault,
// gets Finding::context naming it.  They take their own small lock, none of
// the domains'.
//
// May not: depend on anything but core/, read clocks, do I/O, call verbs,
// or look at application memory (payload hashes arrive inside Events).
#ifndef RDMASAN_CHECKERS_ENGINE_H_
#define RDMASAN_CHECKERS_ENGINE_H_

#include <atomic>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "checkers/check.h"
#include "checkers/state.h"
#include "core/biased_lock.h"
#include "core/checks.h"
#include "core/event.h"
#include "core/id_table.h"
#include "core/report.h"

namespace rdmasan::checkers {

class Engine {
 public:
  // `assign_seq`: the engine numbers events (live runs); otherwise events
  // keep the seq they carry (replay, tests).  Only the `enabled` checks run.
  // `one_thread`: events come from one thread only (replay): no domain is
  // ever locked; the findings are the same.
  explicit Engine(bool assign_seq = false, const core::CheckSet& enabled = core::CheckSet::All(),
                  bool one_thread = false);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Thread-safe.  Findings raised by `e` (in check order) are appended to
  // `findings`; send WRs with payload hashes that `e` retired to `retired`
  // (if not null).  Sets e.seq when the engine numbers events.
  void OnEvent(core::Event& e, std::vector<core::Finding>* findings, std::vector<RetiredWr>* retired);

  // The data path's compact events, thread-safe, for a live run whose
  // events go nowhere else (no trace): each does what OnEvent does with
  // the event it stands for when that event is quiet (checkers/quiet.h),
  // and returns true; otherwise it does nothing and returns false, and the
  // caller hands the event to OnEvent.  With the quiet filters disabled
  // (tests) they always return false.
  //
  // post_send of one WR, accepted (ret 0): p.
  bool PostOneSend(const OneSend& p);
  // post_recv of one WR to a QP, accepted (ret 0): p.
  bool PostOneRecv(const OneRecv& p);
  // poll_cq of CQ `cq` that returned `n` completions, all successful;
  // `retired` as for OnEvent.
  bool PollSucceeded(core::ObjId cq, const core::Completion* wcs, size_t n, std::vector<RetiredWr>* retired);

  // For one caller at a time (replay, tests): the findings of `e`; the
  // retired WRs are kept for TakeRetired().
  std::vector<core::Finding> OnEvent(const core::Event& e);
  std::vector<RetiredWr> TakeRetired() { return std::move(retired_); }

  // Tests: run every check of every event, without the quiet filters
  // (checkers/quiet.h); the findings must be the same.
  void DisableQuietFiltersForTest() { quiet_filters_ = false; }

  // Thread-safe (takes every lock, like a control event): whether an
  // outstanding WR still uses the MR with this lkey.  The interposer asks at
  // ibv_dereg_mr, to keep watching the memory of WRs still in flight.
  bool LkeyInFlight(uint32_t lkey);

  // Thread-safe (takes every lock, like LkeyInFlight): every live CQ's
  // outstanding work, for the hang report (interpose/watchdog.h).
  std::vector<CqOutstanding> Outstanding();

  // The books; only while no event is in flight.
  const State& state() const { return state_; }

  // Tests: an opaque name of the lock domain of a CQ, SRQ or QP (0: none,
  // its events take every lock), and holding that domain's lock.
  uintptr_t DomainOf(core::ObjId id) const;
  std::unique_lock<core::BiasedLock> LockDomainForTest(core::ObjId id);

 private:
  struct Domain;
  // What the data path needs of a CQ, SRQ or QP, reached with one
  // lock-free lookup of its id: its domain (changed only under every
  // lock: when domains merge, or to null when the object goes) and its
  // books.
  struct Node {
    enum class Kind : uint8_t { kCq, kSrq, kQp };
    std::atomic<Domain*> domain{nullptr};
    void* books = nullptr;  // CqState*, SrqState* or QpState*, by kind; null once destroyed
    Kind kind = Kind::kCq;
  };
  void Run(const core::Event& e, uint64_t* seq, std::vector<core::Finding>* findings,
           std::vector<RetiredWr>* retired);
  Node* NodeOf(core::ObjId id) const;
  Domain* LockDomainOf(Node* n);
  // A data-path event of kind K on a queue with a node, under its domain's
  // lock; false (nothing done) if the queue has none.
  template <core::EventKind K>
  bool RunData(const core::Event& e, uint64_t* seq, std::vector<core::Finding>* findings,
               std::vector<RetiredWr>* retired);
  void RunChecks(const core::Event& e, absl::flat_hash_set<uint64_t>* emitted, MrCache* mrs,
                 std::vector<core::Finding>* findings, const QpState* qp);
  void Check(const core::Event& e, absl::flat_hash_set<uint64_t>* emitted, MrCache* mrs,
             std::vector<core::Finding>* findings, const QpState* qp);
  // Under every lock:
  void UpdateDomains(const core::Event& e);
  // kDecision events; and the context of the findings from `first` on,
  // raised by `e` (qp: its QP's books, when known).
  void OnDecision(const core::Event& e, uint64_t* seq);
  void NameInjected(const core::Event& e, const QpState* qp, std::vector<core::Finding>* findings,
                    size_t first);
  Domain* NewDomain();
  void Track(core::ObjId id, Node::Kind kind, void* books, Domain* d);
  void Join(Domain* d, core::ObjId id);
  void Leave(core::ObjId id);

  const bool assign_seq_;
  const bool one_thread_;
  bool quiet_filters_ = true;
  uint64_t enabled_ = 0;  // bit i: the check with CheckId i runs
  bool any_by_kind_[static_cast<size_t>(core::EventKind::kCount)] = {};
  State state_;
  std::unique_ptr<core::DenseIdTable> domain_of_;  // CQ, SRQ or QP id -> Node*
  std::deque<Node> nodes_;                         // never freed: a racing event may hold one
  std::mutex control_mu_;                          // one event that takes every lock at a time
  std::vector<std::unique_ptr<Domain>> all_;       // never freed: a racing event may hold one
  std::vector<Domain*> live_;                      // locked in this order
  absl::flat_hash_set<uint64_t> control_emitted_;  // (check, stack) already reported
  MrCache control_mrs_;
  std::atomic<uint64_t> next_seq_{0};
  std::vector<RetiredWr> retired_;

  // The latest injected faults: "wc.error RETRY_EXC_ERR on QP 0x5
  // wr_id=0x12 (decision #3)".
  struct Injected {
    uint64_t number = 0;  // the decision's #
    uint64_t seq = 0;     // its event's
    std::string what;
  };
  std::mutex decisions_mu_;
  std::atomic<uint64_t> decisions_seen_{0};  // taken with the seq under decisions_mu_ when numbered
  Injected last_fault_;                      // under decisions_mu_
  absl::flat_hash_map<uint32_t, Injected> last_fault_on_qpn_;  // under decisions_mu_
  std::atomic<bool> any_fault_{false};                         // set once: the findings path looks only then
};

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_ENGINE_H_
