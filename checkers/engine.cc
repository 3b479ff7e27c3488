#include "checkers/engine.h"

#include "checkers/check.h"
#include "checkers/quiet.h"
#include "core/decision.h"

#include <algorithm>
#include <array>
#include <deque>
#include <utility>

namespace rdmasan::checkers {
namespace {

using core::EventKind;

// The dispatch, generated from the table of checks (core/checks.inc): for
// each event kind, the checks whose row names it, in report order.

// The EventKinds of a row's events column, as a mask.
template <typename... Kinds>
constexpr uint64_t KindMask(Kinds... kinds) {
  return (uint64_t{0} | ... | (uint64_t{1} << static_cast<unsigned>(kinds)));
}
static_assert(static_cast<size_t>(EventKind::kCount) <= 64, "an events column is one word (KindMask)");
static_assert(core::kNumChecks <= 64, "the enabled checks are one word (Engine::enabled_)");

constexpr std::array<uint64_t, core::kNumChecks> kKindsOfCheck = [] {
  using enum EventKind;
  return std::array<uint64_t, core::kNumChecks>{
#define RDMASAN_CHECK_ROW(name, id, severity, on, order, events, invariant) KindMask events,
#include "core/checks.inc"
#undef RDMASAN_CHECK_ROW
  };
}();

constexpr bool Handles(core::CheckId id, EventKind k) {
  return kKindsOfCheck[static_cast<size_t>(id)] >> static_cast<unsigned>(k) & 1;
}

// Every check id, by the table's order column (ties in row order).
constexpr std::array<core::CheckId, core::kNumChecks> kReportOrder = [] {
  constexpr int kOrder[] = {
#define RDMASAN_CHECK_ROW(name, id, severity, on, order, events, invariant) order,
#include "core/checks.inc"
#undef RDMASAN_CHECK_ROW
  };
  std::array<core::CheckId, core::kNumChecks> ids{};
  for (size_t i = 0; i < core::kNumChecks; ++i) ids[i] = static_cast<core::CheckId>(i);
  for (size_t i = 1; i < ids.size(); ++i)  // insertion sort: stable, and constexpr
    for (size_t j = i; j > 0 && kOrder[static_cast<size_t>(ids[j])] < kOrder[static_cast<size_t>(ids[j - 1])];
         --j)
      std::swap(ids[j], ids[j - 1]);
  return ids;
}();

// Calls the check's function.  A template on the context's type, so that
// the functions of the rows with no events (declared, never defined) are
// never named outside a discarded branch.
template <core::CheckId Id, typename Context>
inline void CallCheck(Context& c) {
#define RDMASAN_CHECK_ROW(name, id, severity, on, order, events, invariant) \
  if constexpr (Id == core::CheckId::k##name) Check##name(c);
#include "core/checks.inc"
#undef RDMASAN_CHECK_ROW
}

constexpr size_t ChecksOf(EventKind k) {
  size_t n = 0;
  for (size_t i = 0; i < core::kNumChecks; ++i) n += Handles(static_cast<core::CheckId>(i), k);
  return n;
}
// The quiet filters (checkers/quiet.h) test the condition of every check of
// these kinds: a check added here must be added there.
static_assert(ChecksOf(EventKind::kPostSend) == 18,
              "add the new post_send check to checkers/quiet.cc (PostSendQuiet and OneSendQuiet)");
static_assert(ChecksOf(EventKind::kPostRecv) == 10,
              "add the new post_recv check to checkers/quiet.cc (PostRecvQuiet and OneRecvQuiet)");
static_assert(ChecksOf(EventKind::kPollCq) == 2, "add the new poll_cq check to checkers/quiet.cc");

// The checks of one event kind, in report order, as direct calls (the
// checkers library is built as one translation unit, so they can be
// inlined here): an event pays for no indirect call per check, and a check
// that is not enabled costs one bit test.
template <EventKind K, size_t... P>
void RunKind(CheckContext& c, uint64_t enabled, std::index_sequence<P...>) {
  (
      [&] {
        constexpr core::CheckId kId = kReportOrder[P];
        if constexpr (Handles(kId, K))
          if (enabled & (uint64_t{1} << static_cast<size_t>(kId))) CallCheck<kId>(c);
      }(),
      ...);
}

template <size_t K>
void RunKind(CheckContext& c, uint64_t enabled) {
  RunKind<static_cast<EventKind>(K)>(c, enabled, std::make_index_sequence<core::kNumChecks>());
}

using RunFn = void (*)(CheckContext&, uint64_t);
template <size_t... K>
constexpr std::array<RunFn, sizeof...(K)> MakeRunTable(std::index_sequence<K...>) {
  return {&RunKind<K>...};
}
constexpr auto kRunByKind = MakeRunTable(std::make_index_sequence<static_cast<size_t>(EventKind::kCount)>());

}  // namespace

std::string QpName(const State& s, core::ObjId qp) {
  const QpState* q = s.Qp(qp);
  return q ? absl::StrFormat("QP 0x%x (qpn 0x%x)", qp, q->qpn) : absl::StrFormat("QP 0x%x", qp);
}

void CheckContext::ComputeLists() {
  lists_ready_ = true;
  if (e.kind == core::EventKind::kPostSend) {
    if (!qp) return;
    lists_.max_sge = qp->caps.max_send_sge;
    lists_.pd = qp->pd;
    for (const auto& w : e.send_wrs) {
      if (w.send_flags & IBV_SEND_INLINE) continue;  // lkeys unused
      lists_.lists.push_back({&w.sges, w.num_sge, w.wr_id, WritesLocal(w.opcode)});
    }
  } else if (e.kind == core::EventKind::kPostRecv) {
    if (!qp) return;
    lists_.max_sge = qp->caps.max_recv_sge;
    lists_.pd = qp->pd;
    for (const auto& w : e.recv_wrs) lists_.lists.push_back({&w.sges, w.num_sge, w.wr_id, true});
  } else if (e.kind == core::EventKind::kPostSrqRecv) {
    const SrqState* srq = s.Srq(e.obj);
    if (!srq) return;
    lists_.max_sge = srq->max_sge;
    lists_.pd = srq->pd;
    for (const auto& w : e.recv_wrs) lists_.lists.push_back({&w.sges, w.num_sge, w.wr_id, true});
  } else if (e.kind == core::EventKind::kPostSrqOps) {
    const SrqState* srq = s.Srq(e.obj);
    if (!srq) return;
    lists_.max_sge = srq->max_sge;
    lists_.pd = srq->pd;
    for (const core::SendWr& w : Posted())
      if (w.opcode == IBV_WR_TAG_ADD) lists_.lists.push_back({&w.sges, w.num_sge, w.wr_id, true});
  }
}

std::string CheckContext::PostWhere() const {
  switch (e.kind) {
    case core::EventKind::kPostSend:
      return "post_send to " + QpName(s, e.obj);
    case core::EventKind::kPostRecv:
      return "post_recv to " + QpName(s, e.obj);
    case core::EventKind::kBindMw:
      return "ibv_bind_mw on " + QpName(s, e.obj);
    case core::EventKind::kPostSrqOps:
      return absl::StrFormat("post_srq_ops (TAG_ADD) to SRQ 0x%x", e.obj);
    default:
      return absl::StrFormat("post_srq_recv to SRQ 0x%x", e.obj);
  }
}

std::string WrLabel(const OutstandingWr& w, const char* what) {
  if (w.is_tag) return absl::StrFormat("%s tagged buffer recv_wr_id=0x%x TAG_ADD posted at", what, w.wr_id);
  return absl::StrFormat("%s WR wr_id=0x%x %s posted at", what, w.wr_id,
                         w.is_recv ? "RECV" : WrOpcodeName(w.opcode));
}

struct alignas(64) Engine::Domain {  // its own cache lines: no false sharing of locks
  // Biased to the thread that uses the domain's queues (core/biased_lock.h):
  // a program that drives each queue from one thread takes no atomic
  // read-modify-write per event.
  core::BiasedLock mu;
  std::vector<core::ObjId> members;
  absl::flat_hash_set<uint64_t> emitted;  // (check, stack) already reported
  MrCache mrs;
};

Engine::Engine(bool assign_seq, const core::CheckSet& enabled, bool one_thread)
    : assign_seq_(assign_seq), one_thread_(one_thread), domain_of_(std::make_unique<core::DenseIdTable>()) {
  // A disabled check is never reported: it does not run either.
  for (size_t i = 0; i < core::kNumChecks; ++i) {
    if (!enabled.Enabled(static_cast<core::CheckId>(i))) continue;
    enabled_ |= uint64_t{1} << i;
    for (size_t k = 0; k < static_cast<size_t>(EventKind::kCount); ++k)
      if (kKindsOfCheck[i] >> k & 1) any_by_kind_[k] = true;
  }
  // The destinations of READs and atomics (and of receives) are kept only
  // for the checks that read them: off, they cost a post one branch.
  auto on = [&](core::CheckId id) { return enabled_ >> static_cast<size_t>(id) & 1; };
  state_.TrackDestinations(on(core::CheckId::kUnfencedReadUse) || on(core::CheckId::kBufferModifiedInFlight),
                           on(core::CheckId::kOverlappingDestinations));
}

Engine::~Engine() = default;

Engine::Node* Engine::NodeOf(core::ObjId id) const { return reinterpret_cast<Node*>(domain_of_->Get(id)); }

uintptr_t Engine::DomainOf(core::ObjId id) const {
  Node* n = NodeOf(id);
  return n ? reinterpret_cast<uintptr_t>(n->domain.load(std::memory_order_acquire)) : 0;
}

// In line: the data path's every event takes its domain's lock.
[[gnu::always_inline]] inline Engine::Domain* Engine::LockDomainOf(Node* n) {
  for (;;) {
    Domain* d = n->domain.load(std::memory_order_acquire);
    if (!d) return nullptr;
    d->mu.LockAsUser();
    // Domains change only under every live domain's lock: if the object
    // still belongs to d now that d is held, d is live and stays its domain.
    if (n->domain.load(std::memory_order_relaxed) == d) return d;
    d->mu.unlock();  // merged away (or destroyed) meanwhile: look again
  }
}

std::unique_lock<core::BiasedLock> Engine::LockDomainForTest(core::ObjId id) {
  Node* n = NodeOf(id);
  Domain* d = n ? LockDomainOf(n) : nullptr;
  return d ? std::unique_lock<core::BiasedLock>(d->mu, std::adopt_lock)
           : std::unique_lock<core::BiasedLock>();
}

Engine::Domain* Engine::NewDomain() {
  all_.push_back(std::make_unique<Domain>());
  live_.push_back(all_.back().get());
  return all_.back().get();
}

void Engine::Join(Domain* d, core::ObjId id) {
  Node* n = NodeOf(id);
  if (!n) return;
  n->domain.store(d, std::memory_order_release);
  d->members.push_back(id);
}

void Engine::Track(core::ObjId id, Node::Kind kind, void* books, Domain* d) {
  if (!books) return;
  nodes_.emplace_back();
  Node* n = &nodes_.back();
  n->kind = kind;
  n->books = books;
  // A full table leaves the object without a node: its events take every
  // lock, which is slower but as correct.
  if (domain_of_->Put(id, reinterpret_cast<uintptr_t>(n))) Join(d, id);
}

void Engine::Leave(core::ObjId id) {
  Node* n = NodeOf(id);
  if (!n) return;
  Domain* d = n->domain.load(std::memory_order_relaxed);
  domain_of_->Erase(id);
  n->books = nullptr;
  n->domain.store(nullptr, std::memory_order_release);
  if (!d) return;
  auto& m = d->members;
  m.erase(std::remove(m.begin(), m.end(), id), m.end());
  if (m.empty()) {
    // Dead, not freed: an event that read the pointer may still lock it
    // (and then finds that its object belongs elsewhere).
    live_.erase(std::remove(live_.begin(), live_.end(), d), live_.end());
    d->emitted = {};
  }
}

void Engine::UpdateDomains(const core::Event& e) {
  if (e.ret != 0) return;
  switch (e.kind) {
    case EventKind::kCreateCq:
      Track(e.obj, Node::Kind::kCq, state_.MutableCq(e.obj), NewDomain());
      break;
    case EventKind::kCreateSrq: {
      // An XRC SRQ joins the domain of its CQ (a poll there retires its
      // receives).
      Node* cq = e.recv_cq ? NodeOf(e.recv_cq) : nullptr;
      Domain* d = cq ? cq->domain.load(std::memory_order_relaxed) : nullptr;
      Track(e.obj, Node::Kind::kSrq, state_.MutableSrq(e.obj), d ? d : NewDomain());
      break;
    }
    case EventKind::kCreateQp: {
      // The QP joins its CQs and SRQ, whose domains become one (the
      // largest absorbs the others).
      QpState* books = state_.MutableQp(e.obj);
      if (!books) break;
      absl::InlinedVector<Domain*, 3> ds;
      for (core::ObjId o : {e.send_cq, e.recv_cq, e.srq}) {
        Node* n = o ? NodeOf(o) : nullptr;
        Domain* d = n ? n->domain.load(std::memory_order_relaxed) : nullptr;
        if (d && std::find(ds.begin(), ds.end(), d) == ds.end()) ds.push_back(d);
      }
      if (ds.empty()) {
        Track(e.obj, Node::Kind::kQp, books, NewDomain());
        break;
      }
      Domain* into = *std::max_element(
          ds.begin(), ds.end(), [](Domain* a, Domain* b) { return a->members.size() < b->members.size(); });
      for (Domain* d : ds) {
        if (d == into) continue;
        for (core::ObjId m : d->members) Join(into, m);
        into->emitted.insert(d->emitted.begin(), d->emitted.end());
        d->members.clear();
        d->emitted = {};
        live_.erase(std::remove(live_.begin(), live_.end(), d), live_.end());
      }
      Track(e.obj, Node::Kind::kQp, books, into);
      break;
    }
    case EventKind::kDestroyCq:
    case EventKind::kDestroySrq:
    case EventKind::kDestroyQp:
      Leave(e.obj);
      break;
    default:
      break;
  }
}

void Engine::RunChecks(const core::Event& e, absl::flat_hash_set<uint64_t>* emitted, MrCache* mrs,
                       std::vector<core::Finding>* findings, const QpState* qp) {
  CheckContext ctx(e, state_, findings, emitted, qp, mrs);
  kRunByKind[static_cast<size_t>(e.kind)](ctx, enabled_);
}

void Engine::Check(const core::Event& e, absl::flat_hash_set<uint64_t>* emitted, MrCache* mrs,
                   std::vector<core::Finding>* findings, const QpState* qp) {
  const size_t k = static_cast<size_t>(e.kind);
  if (k < static_cast<size_t>(EventKind::kCount) && any_by_kind_[k]) {
    // A post_recv no check can speak about (post_send and poll_cq have
    // their own way, RunData).
    if (quiet_filters_ && e.kind == EventKind::kPostRecv && qp && PostRecvQuiet(e, *qp, state_, *mrs)) return;
    RunChecks(e, emitted, mrs, findings, qp);
  }
}

template <EventKind K>
bool Engine::RunData(const core::Event& e, uint64_t* seq, std::vector<core::Finding>* findings,
                     std::vector<RetiredWr>* retired) {
  constexpr Node::Kind kWant =
      K == EventKind::kPostSend || K == EventKind::kPostRecv || K == EventKind::kRetire ? Node::Kind::kQp
      : K == EventKind::kPostSrqRecv                                                    ? Node::Kind::kSrq
                                                                                        : Node::Kind::kCq;
  Node* n = NodeOf(e.obj);
  if (!n || n->kind != kWant) return false;
  // A post that binds or invalidates a memory window changes books outside
  // its domain (the windows): it takes every lock.
  if constexpr (K == EventKind::kPostSend)
    if (HasWindowWrs(e)) return false;
  Domain* d = one_thread_ ? n->domain.load(std::memory_order_relaxed) : LockDomainOf(n);
  if (!d) return false;
  if (seq) *seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  void* books = n->books;  // live: destruction takes d's lock too
  const size_t first = findings ? findings->size() : 0;
  constexpr size_t k = static_cast<size_t>(K);
  if constexpr (K == EventKind::kPostSend) {
    // The busiest two kinds, straight: a post or poll that no check can
    // speak about (checkers/quiet.h) runs none of them.
    auto* qp = static_cast<QpState*>(books);
    if (any_by_kind_[k] && !(quiet_filters_ && PostSendQuiet(e, *qp, state_, d->mrs, d->emitted, enabled_)))
      RunChecks(e, &d->emitted, &d->mrs, findings, qp);
    state_.ApplyPostSend(e, qp);
  } else if constexpr (K == EventKind::kPollCq) {
    if (any_by_kind_[k] && !(quiet_filters_ && PollQuiet(e)))
      RunChecks(e, &d->emitted, &d->mrs, findings, nullptr);
    state_.ApplyPollCq(e, static_cast<CqState*>(books), retired);
  } else {
    Check(e, &d->emitted, &d->mrs, findings,
          kWant == Node::Kind::kQp ? static_cast<const QpState*>(books) : nullptr);
    state_.Apply(e, retired, books);
  }
  if (any_fault_.load(std::memory_order_acquire))
    NameInjected(e, kWant == Node::Kind::kQp ? static_cast<const QpState*>(books) : nullptr, findings, first);
  if (!one_thread_) d->mu.unlock();
  return true;
}

bool Engine::PostOneSend(const OneSend& p) {
  if (!quiet_filters_ || !OneSendable(p.opcode, p.send_flags)) return false;
  Node* n = NodeOf(p.qp);
  if (!n || n->kind != Node::Kind::kQp) return false;
  Domain* d = one_thread_ ? n->domain.load(std::memory_order_relaxed) : LockDomainOf(n);
  if (!d) return false;
  // RunData<kPostSend>'s work for a quiet post: no check can speak, the
  // books take the WR (ApplyOneSend), no finding to name a fault in.
  auto* qp = static_cast<QpState*>(n->books);
  constexpr size_t k = static_cast<size_t>(EventKind::kPostSend);
  const bool done = qp->type != IBV_QPT_UD &&
                    (!any_by_kind_[k] || OneSendQuiet(p, *qp, state_, d->mrs, d->emitted, enabled_)) &&
                    state_.ApplyOneSend(p, qp);
  // Numbered as its event would have been (a run that asked for a trace
  // and could not open one still numbers its events).
  if (done && assign_seq_) next_seq_.fetch_add(1, std::memory_order_relaxed);
  if (!one_thread_) d->mu.unlock();
  return done;
}

bool Engine::PostOneRecv(const OneRecv& p) {
  if (!quiet_filters_ || state_.dests().receives()) return false;
  Node* n = NodeOf(p.qp);
  if (!n || n->kind != Node::Kind::kQp) return false;
  Domain* d = one_thread_ ? n->domain.load(std::memory_order_relaxed) : LockDomainOf(n);
  if (!d) return false;
  // RunData<kPostRecv>'s work for a quiet post (Check, then Apply).
  auto* qp = static_cast<QpState*>(n->books);
  constexpr size_t k = static_cast<size_t>(EventKind::kPostRecv);
  const bool done = (!any_by_kind_[k] || OneRecvQuiet(p, *qp, state_, d->mrs)) && state_.ApplyOneRecv(p, qp);
  if (done && assign_seq_) next_seq_.fetch_add(1, std::memory_order_relaxed);
  if (!one_thread_) d->mu.unlock();
  return done;
}

bool Engine::PollSucceeded(core::ObjId cq, const core::Completion* wcs, size_t n,
                           std::vector<RetiredWr>* retired) {
  if (!quiet_filters_) return false;
  // PollQuiet: error-completion speaks only of a completion in error.
  for (size_t i = 0; i < n; ++i)
    if (wcs[i].status != IBV_WC_SUCCESS) return false;
  Node* node = NodeOf(cq);
  if (!node || node->kind != Node::Kind::kCq) return false;
  Domain* d = one_thread_ ? node->domain.load(std::memory_order_relaxed) : LockDomainOf(node);
  if (!d) return false;
  if (assign_seq_) next_seq_.fetch_add(1, std::memory_order_relaxed);
  auto* books = static_cast<CqState*>(node->books);  // live: destruction takes d's lock too
  if (n == 1)
    state_.ApplyPollOne(cq, wcs[0], *books, retired);  // a busy poller's poll, in line
  else
    state_.ApplyPollCq(cq, wcs, n, books, retired);
  if (!one_thread_) d->mu.unlock();
  return true;
}

void Engine::Run(const core::Event& e, uint64_t* seq, std::vector<core::Finding>* findings,
                 std::vector<RetiredWr>* retired) {
  // An event of the data path on a queue the engine knows locks only that
  // queue's domain; anything else takes every lock.  Decisions take none.
  switch (e.kind) {
#define RDMASAN_DATA_KIND(K)                           \
  case K:                                              \
    if (RunData<K>(e, seq, findings, retired)) return; \
    break;
    RDMASAN_DATA_KIND(EventKind::kPostSend)
    RDMASAN_DATA_KIND(EventKind::kPollCq)
    RDMASAN_DATA_KIND(EventKind::kPostRecv)
    RDMASAN_DATA_KIND(EventKind::kPostSrqRecv)
    RDMASAN_DATA_KIND(EventKind::kRetire)
    RDMASAN_DATA_KIND(EventKind::kReqNotifyCq)
    RDMASAN_DATA_KIND(EventKind::kGetCqEvent)
    RDMASAN_DATA_KIND(EventKind::kAckCqEvents)
#undef RDMASAN_DATA_KIND
    case EventKind::kDecision:
      OnDecision(e, seq);
      return;
    default:
      break;
  }
  std::lock_guard<std::mutex> control(control_mu_);
  std::vector<Domain*> held;
  if (!one_thread_) held = live_;
  for (Domain* d : held) d->mu.lock();
  if (seq) *seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  const size_t first = findings ? findings->size() : 0;
  const QpState* qp = CheckContext::OnQp(e.kind) ? state_.Qp(e.obj) : nullptr;
  Check(e, &control_emitted_, &control_mrs_, findings, qp);
  if (any_fault_.load(std::memory_order_acquire)) NameInjected(e, qp, findings, first);
  state_.Apply(e, retired, nullptr);
  UpdateDomains(e);
  for (auto it = held.rbegin(); it != held.rend(); ++it) (*it)->mu.unlock();
}

void Engine::OnDecision(const core::Event& e, uint64_t* seq) {
  const auto point = static_cast<core::Point>(e.count);
  const bool named = e.count < static_cast<uint32_t>(core::kNumPoints) &&
                     (core::IsFaultPoint(point) || core::IsChaosPoint(point));
  // A scheduler's decision (sched.hold, sched.pick: most of them) is only
  // counted, and without events numbered (no trace) nothing is taken with
  // its number: no lock.
  if (!seq && !named) {
    decisions_seen_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::lock_guard<std::mutex> l(decisions_mu_);
  // The number and the seq are taken together: in seq order, a replay
  // counts the decisions as this run did.
  if (seq) *seq = next_seq_.fetch_add(1, std::memory_order_relaxed) + 1;
  const uint64_t number = decisions_seen_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (!named) return;
  // A chaos decision is no fault but a legal freedom softnic showed: named
  // the same way, so a report says what the NIC did before it.
  Injected what{number, seq ? *seq : e.seq,
                absl::StrCat(core::IsFaultPoint(point) ? "after injected " : "after softnic's ",
                             core::DescribeDecisionEvent(e), " (decision #", number, ")")};
  if (e.qp_num) last_fault_on_qpn_[e.qp_num] = what;
  last_fault_ = std::move(what);
  any_fault_.store(true, std::memory_order_release);
}

void Engine::NameInjected(const core::Event& e, const QpState* qp, std::vector<core::Finding>* findings,
                          size_t first) {
  if (!findings || findings->size() == first) return;
  // The QPs the event is about: its QP's, the one it names, its
  // completions'.  The latest fault injected on any of them; for an event
  // about no QP, the latest injected anywhere.
  absl::InlinedVector<uint32_t, 4> qpns;
  if (qp) qpns.push_back(qp->qpn);
  if (e.qp_num) qpns.push_back(e.qp_num);
  for (const core::Completion& c : e.wcs)
    if (c.qp_num) qpns.push_back(c.qp_num);
  // A decision another thread made after this event's seq was taken (live
  // runs) is not before it: the replay, in seq order, would not name it.
  auto before = [&](const Injected& i) { return i.seq == 0 || e.seq == 0 || i.seq < e.seq; };
  std::string context;
  {
    std::lock_guard<std::mutex> l(decisions_mu_);
    if (qpns.empty()) {
      if (before(last_fault_)) context = last_fault_.what;
    } else {
      uint64_t latest = 0;
      for (uint32_t qpn : qpns) {
        auto it = last_fault_on_qpn_.find(qpn);
        if (it != last_fault_on_qpn_.end() && it->second.number > latest && before(it->second)) {
          latest = it->second.number;
          context = it->second.what;
        }
      }
    }
  }
  if (context.empty()) return;
  for (size_t i = first; i < findings->size(); ++i) (*findings)[i].context = context;
}

bool Engine::LkeyInFlight(uint32_t lkey) {
  std::lock_guard<std::mutex> control(control_mu_);
  std::vector<Domain*> held;
  if (!one_thread_) held = live_;
  for (Domain* d : held) d->mu.lock();
  const bool r = state_.LkeyInFlight(lkey);
  for (auto it = held.rbegin(); it != held.rend(); ++it) (*it)->mu.unlock();
  return r;
}

std::vector<CqOutstanding> Engine::Outstanding() {
  std::lock_guard<std::mutex> control(control_mu_);
  std::vector<Domain*> held;
  if (!one_thread_) held = live_;
  for (Domain* d : held) d->mu.lock();
  std::vector<CqOutstanding> r = state_.Outstanding();
  for (auto it = held.rbegin(); it != held.rend(); ++it) (*it)->mu.unlock();
  return r;
}

void Engine::OnEvent(core::Event& e, std::vector<core::Finding>* findings, std::vector<RetiredWr>* retired) {
  Run(e, assign_seq_ ? &e.seq : nullptr, findings, retired);
}

std::vector<core::Finding> Engine::OnEvent(const core::Event& e) {
  std::vector<core::Finding> out;
  Run(e, nullptr, &out, &retired_);
  return out;
}

}  // namespace rdmasan::checkers
