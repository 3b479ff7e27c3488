// interpose/sched: see sched.h.
#include "interpose/sched.h"

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <mutex>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_format.h"
#include "checkers/ring.h"
#include "core/biased_lock.h"
#include "core/decision.h"
#include "core/options.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/ptr_table.h"
#include "interpose/sched_state.h"

namespace rdmasan::interpose::sched {

std::atomic<int> g_on{0};

namespace {

using core::Point;

// random: the share of completions held back (each for 1..reorder_delay
// polls of its CQ, uniformly): a completion held over many polls lets later
// ones of other queues, e.g. the reply to its request, overtake it.
constexpr double kHoldChance = 0.25;

using internal::CqState;
using internal::Eligible;
using internal::Entry;
using internal::ExFns;
using internal::Global;
using internal::HookReaders;
using internal::IsForced;
using internal::Mode;
using internal::PctInit;
using internal::PctPriority;
using internal::ReadEx;
using internal::Side;
using internal::StateOf;

// Made on first use: a verb can be called from another library's
// constructor, before this library's initialisers ran (a constant-initialized
// pointer: every poll reads it in line).  Tests and fuzz targets replace it
// (ResetForTest, ResetForFuzz).
constinit std::atomic<Global*> g_global{nullptr};

[[gnu::noinline]] Global* MakeGlobal() {
  Global* fresh = new Global();
  Global* seen = nullptr;
  if (g_global.compare_exchange_strong(seen, fresh, std::memory_order_acq_rel, std::memory_order_acquire))
    return fresh;
  delete fresh;  // another thread's came first
  return seen;
}

inline Global* G() {
  Global* g = g_global.load(std::memory_order_acquire);
  return __builtin_expect(g != nullptr, 1) ? g : MakeGlobal();
}
std::mutex g_create_mu;
PtrTable g_states;
// Bumped when a CQ's state goes (ForgetCq): each thread remembers the
// state of the CQ it polled last while the generation holds.
constinit std::atomic<uint64_t> g_states_gen{1};
struct LastState {
  uint64_t gen = 0;
  const void* cq = nullptr;
  CqState* st = nullptr;
};
thread_local LastState t_last_state;

[[gnu::noinline]] CqState* GetStateSlow(const void* cq, uint64_t gen) {
  LastState& last = t_last_state;
  CqState* s = StateOf(cq);
  if (!s) {
    std::lock_guard<std::mutex> l(g_create_mu);
    s = StateOf(cq);
    if (!s) {
      s = new CqState();
      if (!g_states.Put(cq, reinterpret_cast<uint64_t>(s))) {
        delete s;
        return nullptr;
      }
    }
  }
  last = {gen, cq, s};
  return s;
}

// The CQ polled last by this thread, in line (every poll asks).
inline CqState* GetState(const void* cq) {
  const LastState& last = t_last_state;
  const uint64_t gen = g_states_gen.load(std::memory_order_acquire);
  if (__builtin_expect(last.cq == cq && last.gen == gen, 1)) return last.st;
  return GetStateSlow(cq, gen);
}

// A completion copied in three 16-byte moves (GCC made the struct's copy
// a `rep movsl`, tens of cycles to start: a tenth of a poll's time here).
[[gnu::always_inline]] inline void CopyWc(ibv_wc* to, const ibv_wc& from) {
  typedef uint64_t Bytes16 __attribute__((vector_size(16), aligned(8), may_alias));
  static_assert(sizeof(ibv_wc) == 3 * sizeof(Bytes16) && alignof(ibv_wc) >= 8, "ibv_wc is 48 bytes");
  const Bytes16* s = reinterpret_cast<const Bytes16*>(&from);
  Bytes16* d = reinterpret_cast<Bytes16*>(to);
  const Bytes16 a = s[0], b = s[1], c = s[2];
  d[0] = a;
  d[1] = b;
  d[2] = c;
}

// Releases a CQ's lock taken before it (std::lock_guard's adopt_lock, whose
// destructor was left out of line).
struct Unlocks {
  core::BiasedLock& mu;
  [[gnu::always_inline]] explicit Unlocks(core::BiasedLock& m) : mu(m) {}
  [[gnu::always_inline]] ~Unlocks() { mu.unlock(); }
};

// A new last entry of the buffer, its fields but wc as a fresh Entry's (a
// reused slot keeps its last completion's).  The ibv_cq_ex extras are read
// only through a hooked ibv_cq_ex (st.ex): another CQ's entries leave them
// as they were.
[[gnu::always_inline]] inline Entry& Append(CqState& st) {
  Entry& e = st.buf.push_back();
  e.hold = 0;
  e.barrier = false;
  if (st.ex) {
    e.ts = e.wallclock = 0;
    e.flow_tag = 0;
    e.cvlan = 0;
    e.tm = {};
  }
  return e;
}

// The CQ's id for its decisions' keys (known from its creation on: an id,
// once given, stays the pointer's until the CQ goes, and its state with it).
uint64_t CqObj(CqState& st, const void* cq) {
  if (!st.obj) st.obj = Id(cq);
  return st.obj;
}

// A new Global (its counts start again) or a CQ's id known since the bases
// were drawn: the bases again.
[[gnu::noinline]] void Rebase(const Global& g, CqState& st, uint64_t obj) {
  if (st.epoch != g.epoch) st.epoch = g.epoch, st.holds = st.picks = 0;
  st.drawn_obj = obj;
  st.prng = g.decider->DrawBase(Point::kSchedHold, obj, &st.hold_base) &&
            g.decider->DrawBase(Point::kSchedPick, obj, &st.pick_base);
}

// A scheduler decision at this CQ: hits counted here (no Decider lock) when
// the CQ has an id of its own, and drawn in line from the seeded PRNG's
// per-CQ bases (the same outcomes as the Decider's draws); with no id (0:
// checking off), every CQ shares (point, 0), counted by the Decider.
template <typename F, typename N>
[[gnu::always_inline]] inline uint64_t Decide(Global& g, CqState& st, const void* cq, Point p, const F& f,
                                              const N& note, uint32_t qp_num, uint64_t wr_id) {
  const uint64_t obj = CqObj(st, cq);
  if (!obj) return g.decider->Schedule(p, obj, f, note, qp_num, wr_id);
  if (__builtin_expect(st.epoch != g.epoch || st.drawn_obj != obj, 0)) Rebase(g, st, obj);
  const bool hold = p == Point::kSchedHold;
  const uint64_t hit = ++(hold ? st.holds : st.picks);
  if (st.prng)
    return g.decider->ScheduleDrawn(hold ? st.hold_base : st.pick_base, p, obj, hit, f, note, qp_num, wr_id);
  return g.decider->ScheduleAt(p, obj, hit, f, note, qp_num, wr_id);
}

// What LookupQp says of the QP numbered qp_num on `ctx` (the CQ's context),
// remembered per CQ: consecutive completions mostly name one QP.  Null if
// unknown; else the CQ's copy, good until its next CachedQp (under mu).
[[gnu::always_inline]] inline const QpInfo* CachedQp(CqState& st, const ibv_context* ctx, uint32_t qp_num) {
  const uint64_t gen = QpTableGeneration();
  if (__builtin_expect(st.qp_gen != gen || st.qp_num != qp_num, 0)) {
    st.qp_known = LookupQp(ctx, qp_num, &st.qp);
    st.qp_may_fail = st.qp_known && (st.qp.type == IBV_QPT_RC || st.qp.type == IBV_QPT_XRC_SEND);
    st.qp_gen = gen;
    st.qp_num = qp_num;
  }
  return st.qp_known ? &st.qp : nullptr;
}

// --------------------------------------------------------------- wc.error --

[[gnu::noinline]] core::Decider::HitCounter* NewWcHits(const Global& g, CqState& st) {
  st.wc_hits = g.decider->NewHitCounter(Point::kWcError);
  st.wc_hits_epoch = g.epoch;
  return st.wc_hits;
}

// The CQ's counter of its hits at wc.error, for the Global's Decider.
[[gnu::always_inline]] inline core::Decider::HitCounter* WcHits(const Global& g, CqState& st) {
  return __builtin_expect(st.wc_hits_epoch == g.epoch, 1) ? st.wc_hits : NewWcHits(g, st);
}

bool IsRdmaOrAtomic(uint32_t opcode) {
  return opcode == IBV_WC_RDMA_WRITE || opcode == IBV_WC_RDMA_READ || opcode == IBV_WC_COMP_SWAP ||
         opcode == IBV_WC_FETCH_ADD || opcode == IBV_WC_ATOMIC_WRITE;
}

uint64_t DrawStatus(const core::FaultRule& r, core::Draws& d, uint32_t opcode) {
  if (!r.statuses.empty()) return r.statuses[d.Below(r.statuses.size())];
  if (opcode == IBV_WC_SEND) {
    static constexpr uint32_t kSend[] = {IBV_WC_RETRY_EXC_ERR, IBV_WC_RNR_RETRY_EXC_ERR};
    return kSend[d.Below(2)];
  }
  if (IsRdmaOrAtomic(opcode)) {
    static constexpr uint32_t kRdma[] = {IBV_WC_RETRY_EXC_ERR, IBV_WC_REM_ACCESS_ERR, IBV_WC_REM_OP_ERR};
    return kRdma[d.Below(3)];
  }
  return IBV_WC_RETRY_EXC_ERR;
}

bool Failing(const CqState& st, uint32_t qp_num) {
  for (auto& f : st.failing)
    if (f.first == qp_num) return true;
  return false;
}

// Classifies a freshly pulled completion (appended to the buffer as `e`,
// its wc and extras filled), injects wc.error and rewrites what a failed
// send queue cannot have completed.
// What Admit does to the completion itself: the wc.error decision, the
// rewrite of a failed send queue's, the poison of an error completion's
// undefined fields.  Returns its QP (CachedQp's), null if unknown.  In
// line: the natural order admits every completion it returns.
[[gnu::always_inline]] inline const QpInfo* AdmitWc(const Global& g, CqState& st, const ibv_context* ctx,
                                                    ibv_wc& wc) {
  const QpInfo* known = CachedQp(st, ctx, wc.qp_num);
  if (wc.status == IBV_WC_SUCCESS && !(wc.opcode & IBV_WC_RECV)) {
    if (!st.failing.empty() && Failing(st, wc.qp_num)) {
      wc.status = IBV_WC_WR_FLUSH_ERR;
    } else if (g.wc_error && st.qp_may_fail) {
      const uint32_t opcode = wc.opcode;
      const uint64_t status = g.decider->FaultCounted(
          WcHits(g, st), Point::kWcError, known->id, wc.qp_num,
          [opcode](const core::FaultRule& r, core::Draws& d) { return DrawStatus(r, d, opcode); }, nullptr,
          wc.wr_id);
      if (status && status <= IBV_WC_TM_RNDV_INCOMPLETE) {
        wc.status = static_cast<ibv_wc_status>(status);
        wc.vendor_err = 0;
        st.failing.emplace_back(wc.qp_num, st.pulls);
        MoveQpToError(known->qp);
      }
    }
  }
  if (wc.status != IBV_WC_SUCCESS) PoisonErrorWc(&wc);
  return known;
}

// An admitted completion's stream, from its QP (AdmitWc's; null: unknown).
[[gnu::always_inline]] inline void Classify(Entry& e, const QpInfo* known) {
  const ibv_wc& wc = e.wc;
  const uint64_t qp_ident = known && known->id ? known->id : wc.qp_num;
  if (wc.status != IBV_WC_SUCCESS) {
    e.barrier = true;
    e.stream = (uint64_t{3} << 62) | wc.qp_num;
    e.ident = qp_ident * 4 + 3;
    e.ts = e.wallclock = UINT64_C(0xdeadbeefdeadbeef);
    e.flow_tag = kPoison32;
    e.cvlan = 0xbeef;
  } else if (!(wc.opcode & IBV_WC_RECV)) {
    e.stream = (uint64_t{0} << 62) | wc.qp_num;
    e.ident = qp_ident * 4;
  } else if (known && known->has_srq) {
    e.stream = (uint64_t{2} << 62) | known->srq;
    e.ident = known->srq * 4 + 2;
  } else {
    e.stream = (uint64_t{1} << 62) | wc.qp_num;
    e.ident = qp_ident * 4 + 1;
  }
}

// Side(e) of the entry Classify would make of `wc` (AdmitWc's, its QP `known`).
const char* SideOf(const ibv_wc& wc, const QpInfo* known) {
  if (wc.status != IBV_WC_SUCCESS) return "error";
  if (!(wc.opcode & IBV_WC_RECV)) return "send";
  return known && known->has_srq ? "srq" : "recv";
}

[[gnu::always_inline]] inline void Admit(const Global& g, CqState& st, const ibv_context* ctx, Entry& e) {
  Classify(e, AdmitWc(g, st, ctx, e.wc));
  e.seq = st.next_seq++;
  e.age = 0;
}

// After a pull that got `got` of `asked`: a drained provider CQ ends the
// flush rewriting of the send queues failed by an earlier pull.
[[gnu::always_inline]] inline void AfterPull(CqState& st, int got, int asked) {
  if (got < asked && !st.failing.empty())
    st.failing.erase(std::remove_if(st.failing.begin(), st.failing.end(),
                                    [&](const auto& f) { return f.second < st.pulls; }),
                     st.failing.end());
  ++st.pulls;
}

// The `got` completions a provider's poll for `asked` put in `tmp`, into
// the buffer, admitted.
[[gnu::always_inline]] inline void TakePulled(const Global& g, CqState& st, const ibv_context* ctx,
                                              const ibv_wc* tmp, int got, int asked) {
  for (int i = 0; i < got; ++i) {
    Entry& e = Append(st);
    CopyWc(&e.wc, tmp[i]);
    Admit(g, st, ctx, e);
  }
  AfterPull(st, got, asked);
}

// Whether a pull failed a send queue (`failing_before`: the failures before
// it): then the provider is pulled again, so that what it completed before
// the QP went to ERR is rewritten now.
inline bool NewFailure(const CqState& st, size_t failing_before) {
  return st.failing.size() != failing_before && !st.failing.empty();
}

[[gnu::noinline]] ibv_wc* NewPulledArray(CqState& st) {
  st.pulled.reset(new ibv_wc[kCapacity]);
  return st.pulled.get();
}

// The CQ's array for a provider's poll of up to kCapacity completions.
[[gnu::always_inline]] inline ibv_wc* PulledArray(CqState& st) {
  ibv_wc* a = st.pulled.get();
  return __builtin_expect(a != nullptr, 1) ? a : NewPulledArray(st);
}

// Pulls what the provider has into the buffer (through `tmp`, kCapacity
// completions), from round `round` of at most four (round 0: the poll's
// first pull); returns how many it pulled (the buffer's last ones).  In
// line in the poll (one frame per poll).
[[gnu::always_inline]] inline int PullPoll(const Global& g, CqState& st, ibv_cq* cq, PollFn provider,
                                           int* err, ibv_wc* tmp, int round = 0) {
  int pulled = 0;
  for (; round < 4; ++round) {
    const int room = kCapacity - static_cast<int>(st.buf.size());
    if (room <= 0) break;
    const size_t failing_before = st.failing.size();
    const int got = provider(cq, room, tmp);
    if (got < 0) {
      *err = got;
      break;
    }
    TakePulled(g, st, cq->context, tmp, got, room);
    pulled += got;
    if (!NewFailure(st, failing_before)) break;
  }
  return pulled;
}

// Pulls through the provider's start/next/end_poll; returns how many it
// pulled (the buffer's last ones).
int PullEx(const Global& g, CqState& st, ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  const ExFns& f = *st.ex;
  int pulled = 0;
  for (int rounds = 0; rounds < 4; ++rounds) {
    const int room = kCapacity - static_cast<int>(st.buf.size());
    if (room <= 0) break;
    const size_t failing_before = st.failing.size();
    int got = 0;
    if (f.start_poll(cq, attr) == 0) {
      do {
        Entry& e = Append(st);
        ReadEx(f, cq, &e);
        Admit(g, st, cq->context, e);
      } while (++got < room && f.next_poll(cq) == 0);
      f.end_poll(cq);
    }
    pulled += got;
    AfterPull(st, got, room);
    if (st.failing.size() == failing_before || st.failing.empty()) break;
  }
  return pulled;
}

// PullPoll out of line, for the natural order's rare pull after an injected
// error.
[[gnu::noinline]] void PullFlushed(const Global& g, CqState& st, ibv_cq* cq, PollFn provider, int* err) {
  PullPoll(g, st, cq, provider, err, PulledArray(st));
}

// ------------------------------------------------------------------ picks --

// Pick's choice among the eligible completions, when there may be a choice
// (the oldest is not forced, and the order is not the natural one).
[[gnu::noinline]] bool PickAmong(Global& g, CqState& st, const void* cq, size_t* out) {
  thread_local std::vector<uint32_t> elig;
  Eligible(g, st, &elig);
  if (elig.empty()) return false;  // every stream head held back
  size_t at = elig[0];
  if (g.mode == Mode::kPct && !g.replaying) {
    std::lock_guard<std::mutex> l(g.pct.mu);
    PctInit(g, g.pct);
    size_t best = 0;
    int64_t best_prio = INT64_MIN;
    for (size_t i = 0; i < elig.size(); ++i) {
      const int64_t p = PctPriority(g, g.pct, st.buf[elig[i]].ident);
      if (p > best_prio) best_prio = p, best = i;
    }
    const uint64_t step = ++g.pct.steps;
    for (size_t i = 0; i < g.pct.change.size(); ++i)
      if (g.pct.change[i] == step)
        g.pct.prio[st.buf[elig[best]].ident] = g.pct.depth - 1 - static_cast<int64_t>(i);
    if (elig.size() >= 2) {
      const Entry& c = st.buf[elig[best]];
      const uint64_t o = Decide(
          g, st, cq, Point::kSchedPick, [best](auto&) -> uint64_t { return best; },
          [&](uint64_t) {
            return absl::StrFormat("sched.pick (pct) QP 0x%x %s wr_id=0x%x released before %u older",
                                   c.wc.qp_num, Side(c), c.wc.wr_id, elig[best]);
          },
          c.wc.qp_num, c.wc.wr_id);
      at = elig[o < elig.size() ? o : 0];
    }
  } else if (elig.size() >= 2) {
    const uint64_t o = Decide(
        g, st, cq, Point::kSchedPick, [&](auto& d) -> uint64_t { return d.Below(elig.size()); },
        [&](uint64_t o) {
          const Entry& c = st.buf[elig[o < elig.size() ? o : 0]];
          return absl::StrFormat("sched.pick QP 0x%x %s wr_id=0x%x released before %u older", c.wc.qp_num,
                                 Side(c), c.wc.wr_id, elig[o < elig.size() ? o : 0]);
        },
        0, 0);
    at = elig[o < elig.size() ? o : 0];
  }
  *out = at;
  return true;
}

// The index in the buffer of the next completion to release (false: none).
// In line: every poll that returns a completion asks.
inline bool Pick(Global& g, CqState& st, const void* cq, size_t* out) {
  if (st.buf.empty()) return false;
  const Entry& e = st.buf.front();
  if (IsForced(g, st, e) || (g.mode == Mode::kNatural && !g.replaying)) {
    *out = 0;
    return true;
  }
  if (st.buf.size() == 1 && g.mode != Mode::kPct) {
    // One completion buffered: eligible unless held back; alone, it is no
    // choice (no sched.pick, as PickAmong).  PCT counts it as a step.
    if (e.age < e.hold) return false;  // not forced (tested above)
    *out = 0;
    return true;
  }
  return PickAmong(g, st, cq, out);
}

// Drops the entry at `at` (Pick's) from the buffer.
void Release(CqState& st, size_t at) {
  // The older ones move up a slot (a pick is mostly near the front).
  for (size_t i = at; i > 0; --i) st.buf[i] = std::move(st.buf[i - 1]);
  st.buf.pop_front();
}

// sched.hold for one completion pulled (not forced): outcome h > 0 holds it
// back until it stayed buffered through h polls of its CQ (at most
// reorder_delay: the forced bound wins); returns that bound (0: none).
// `side`: Side() of its entry, for the note.
template <typename S>
[[gnu::always_inline]] inline uint32_t DrawHold(Global& g, CqState& st, const void* cq, const ibv_wc& wc,
                                                S side) {
  const uint64_t most = std::max<uint32_t>(g.delay, 1);
  const uint64_t h = Decide(
      g, st, cq, Point::kSchedHold,
      [most](auto& d) __attribute__((always_inline))->uint64_t {
        return d.Chance(kHoldChance) ? 1 + d.Below(most) : 0;
      },
      [&](uint64_t h) {
        return absl::StrFormat("sched.hold QP 0x%x %s wr_id=0x%x for %u polls", wc.qp_num, side(), wc.wr_id,
                               static_cast<unsigned>(h));
      },
      wc.qp_num, wc.wr_id);
  return static_cast<uint32_t>(std::min<uint64_t>(h, g.delay));
}

// sched.hold for each completion a poll pulled into the buffer (its last
// `pulled`).  Out of line: a poll that found the buffer empty draws in
// PullIntoEmpty.
[[gnu::noinline]] void AssignHolds(Global& g, CqState& st, const void* cq, int pulled) {
  if (!(g.mode == Mode::kRandom || g.replaying)) return;
  for (size_t i = st.buf.size() - static_cast<size_t>(pulled); i < st.buf.size(); ++i) {
    Entry& e = st.buf[i];
    if (!IsForced(g, st, e)) e.hold = DrawHold(g, st, cq, e.wc, [&e] { return Side(e); });
  }
}

void AgeRest(CqState& st) {
  for (size_t i = 0; i < st.buf.size(); ++i)
    if (st.buf[i].age < UINT32_MAX) ++st.buf[i].age;
}

void StartOfPoll(CqState& st) {
  if (st.arm_pending) {
    st.arm_pending = false;
    st.release_below = UINT64_MAX;  // until the pull below: everything pulled by now
  }
}

void AfterPullOfPoll(CqState& st) {
  if (st.release_below == UINT64_MAX) st.release_below = st.next_seq;
}

// ------------------------------------------------------------ ibv_cq_ex --

ExFns* ExOf(ibv_cq_ex* cq, CqState** st) {
  *st = StateOf(cq);
  return *st ? (*st)->ex : nullptr;
}

bool ServeNextEx(Global& g, CqState& st, ibv_cq_ex* cq) {
  size_t at;
  if (st.ex_budget <= 0 || !Pick(g, st, cq, &at)) return false;
  st.current = st.buf[at];
  Release(st, at);
  --st.ex_budget;
  cq->wr_id = st.current.wc.wr_id;
  cq->status = st.current.wc.status;
  return true;
}

int SStartPoll(ibv_cq_ex* cq, ibv_poll_cq_attr* attr) {
  CqState* st;
  if (!ExOf(cq, &st)) return ENOENT;
  st->mu.LockAsUser();
  Global& g = *G();
  StartOfPoll(*st);
  const int pulled = PullEx(g, *st, cq, attr);
  AfterPullOfPoll(*st);
  if (pulled > 0) AssignHolds(g, *st, cq, pulled);
  st->ex_budget = INT_MAX;
  if (ServeNextEx(g, *st, cq)) return 0;  // the lock stays held until end_poll
  AgeRest(*st);
  st->mu.unlock();
  return ENOENT;
}

int SNextPoll(ibv_cq_ex* cq) {
  CqState* st;
  if (!ExOf(cq, &st)) return ENOENT;
  return ServeNextEx(*G(), *st, cq) ? 0 : ENOENT;
}

void SEndPoll(ibv_cq_ex* cq) {
  CqState* st;
  if (!ExOf(cq, &st)) return;
  AgeRest(*st);
  st->mu.unlock();
}

// A poll's release of what is buffered, when there may be a choice: Pick
// after Pick, then the rest age.
[[gnu::noinline]] int ReleaseMany(Global& g, CqState& st, ibv_cq* cq, int n, ibv_wc* wc) {
  int out = 0;
  size_t at;
  while (out < n && Pick(g, st, cq, &at)) {
    CopyWc(&wc[out++], st.buf[at].wc);
    Release(st, at);
  }
  AgeRest(st);
  return out;
}

// The first pull of a poll that found the buffer empty (reorder=random: a
// program with one completion in flight at a time polls so), with the
// completion it pulled when it is the only one: admitted and sched.hold
// drawn where the provider put it, returned from there unless held back.
// What the buffer would do with it, without it.  True when that ends the
// poll (`*result`: 1, 0 or the provider's error); false: what it pulled
// (`*pulled`) is in the buffer, for the poll's general course.
[[gnu::always_inline]] inline bool PullIntoEmpty(Global& g, CqState& st, ibv_cq* cq, ibv_wc* wc,
                                                 PollFn provider, ibv_wc* tmp, int* err, int* pulled,
                                                 int* result) {
  const size_t failing_before = st.failing.size();
  const int got = provider(cq, kCapacity, tmp);
  if (got < 0) {
    AfterPullOfPoll(st);
    *result = got;
    return true;
  }
  if (got != 1) {
    TakePulled(g, st, cq->context, tmp, got, kCapacity);
    *pulled = got;
  } else {
    ibv_wc& c = tmp[0];
    const QpInfo* known = AdmitWc(g, st, cq->context, c);
    const uint64_t seq = st.next_seq++;
    AfterPull(st, 1, kCapacity);
    uint32_t hold = 0;
    if (!NewFailure(st, failing_before)) {
      AfterPullOfPoll(st);
      // IsForced for an entry of age 0.
      if (!(g.delay == 0 || seq < st.release_below))
        hold = DrawHold(g, st, cq, c, [&] { return SideOf(c, known); });
      if (hold == 0) {
        CopyWc(wc, c);
        *result = 1;
        return true;
      }
    }
    Entry& e = Append(st);
    CopyWc(&e.wc, c);
    Classify(e, known);
    e.seq = seq;
    if (hold) {
      e.age = 1;  // held back: it stayed buffered through this poll
      e.hold = hold;
      *result = 0;
      return true;
    }
    e.age = 0;
    *pulled = 1;
  }
  if (NewFailure(st, failing_before)) *pulled += PullPoll(g, st, cq, provider, err, tmp, 1);
  return false;
}

// A poll's course after its pulls (`pulled` completions, the provider's
// error `err`): holds drawn, then what is eligible released.
[[gnu::always_inline]] inline int FinishPoll(Global& g, CqState& st, ibv_cq* cq, int n, ibv_wc* wc,
                                             int pulled, int err) {
  AfterPullOfPoll(st);
  if (st.buf.empty()) return err < 0 ? err : 0;
  if (pulled > 0) AssignHolds(g, st, cq, pulled);
  if (st.buf.size() == 1 && g.mode != Mode::kPct) {
    // One completion buffered (a program with one in flight, or one held
    // back): what Pick, Release and AgeRest do with it, in short.
    Entry& e = st.buf.front();
    if (!IsForced(g, st, e) && (g.mode != Mode::kNatural || g.replaying) && e.age < e.hold) {
      ++e.age;  // held back: it stayed buffered through this poll
      return 0;
    }
    CopyWc(wc, e.wc);
    st.buf.pop_front();
    return 1;
  }
  return ReleaseMany(g, st, cq, n, wc);
}

[[gnu::noinline]] int AfterPulls(Global& g, CqState& st, ibv_cq* cq, int n, ibv_wc* wc, int pulled, int err) {
  return FinishPoll(g, st, cq, n, wc, pulled, err);
}

// A poll through the buffer, under the CQ's lock: pull, hold, pick.
[[gnu::always_inline]] inline int PollThroughBuffer(Global& g, CqState& st, ibv_cq* cq, int n, ibv_wc* wc,
                                                    PollFn provider) {
  ibv_wc* const tmp = PulledArray(st);
  int err = 0;
  int pulled = 0;
  if (st.buf.empty() && g.mode == Mode::kRandom) {
    int result;
    if (PullIntoEmpty(g, st, cq, wc, provider, tmp, &err, &pulled, &result)) return result;
  } else {
    pulled = PullPoll(g, st, cq, provider, &err, tmp);
  }
  return FinishPoll(g, st, cq, n, wc, pulled, err);
}

// A poll through the buffer: reorder=random or pct, a replay, or the
// natural order with completions buffered or a send queue failing (after
// an injected error).  In one frame out of Poll (which jumps here with the
// CQ's lock taken; the lock is released here), so that the natural
// order's Poll stays small, its lock's fast path in line.
[[gnu::noinline]] int PollBuffered(Global& g, CqState& st, ibv_cq* cq, int n, ibv_wc* wc, PollFn provider) {
  const Unlocks l(st.mu);
  StartOfPoll(st);
  return PollThroughBuffer(g, st, cq, n, wc, provider);
}

// The natural order's poll that injected an error (a send queue failing)
// or that follows arming, after its pull: StartOfPoll and AfterPull's
// course (nothing was failing before this pull), then what the provider
// completed before the failed QP went to ERR is pulled now (and
// rewritten), for the next polls.  (Forcing is for holds and picks,
// which the natural order never makes: StartOfPoll after the pull
// changes nothing it returns.)
[[gnu::noinline]] void AfterNaturalPull(const Global& g, CqState& st, ibv_cq* cq, PollFn provider) {
  StartOfPoll(st);
  if (!st.failing.empty()) {
    ++st.pulls;
    int err = 0;
    PullFlushed(g, st, cq, provider, &err);
  }
  AfterPullOfPoll(st);
}

}  // namespace

namespace internal {
CqState* StateOf(const void* cq) { return reinterpret_cast<CqState*>(g_states.Get(cq)); }
}  // namespace internal

bool ComputeOn() {
  std::lock_guard<std::mutex> l(g_create_mu);
  core::Decider* d = Decider();
  const ReorderMode r = Reorder();
  const bool on = d && (r != ReorderMode::kOff || d->Active(Point::kWcError) || d->replaying());
  if (on) {
    G()->decider = d;
    G()->replaying = d->replaying();
    G()->wc_error = d->Active(Point::kWcError) || d->replaying();
    G()->mode = r == ReorderMode::kRandom ? Mode::kRandom
                : r == ReorderMode::kPct  ? Mode::kPct
                                          : Mode::kNatural;
    G()->natural = G()->mode == Mode::kNatural && !G()->replaying;
    G()->quick_random = G()->mode == Mode::kRandom && !G()->replaying;
    G()->delay = static_cast<uint32_t>(std::clamp(core::GlobalOptions().reorder_delay, 0, 1000000));
  }
  g_on.store(!on ? 1 : G()->natural ? 3 : 2, std::memory_order_release);
  return on;
}

int PollNatural(ibv_cq* cq, int n, ibv_wc* wc, PollFn provider) {
  CqState* st = n > 0 ? GetState(cq) : nullptr;
  if (!st) return provider(cq, n, wc);
  Global& g = *G();
  st->mu.LockAsUser();
  if (__builtin_expect(!g.natural || !st->buf.empty() || !st->failing.empty(), 0))
    return PollBuffered(g, *st, cq, n, wc, provider);  // it releases the lock
  const Unlocks l(st->mu);
  // Nothing is held or picked (the natural order), nothing waits in the
  // buffer and nothing failed: the provider's completions go straight to
  // the caller, each admitted in place, as the buffer would have returned
  // them.  (The pull count matters only while a send queue is failing:
  // AfterNaturalPull counts this pull when one begins to.)
  const int got = provider(cq, n, wc);
  for (int i = 0; i < got; ++i) AdmitWc(g, *st, cq->context, wc[i]);
  if (__builtin_expect(!st->failing.empty() || st->arm_pending, 0)) AfterNaturalPull(g, *st, cq, provider);
  return got;
}

// reorder=random's poll of a CQ with at most one completion buffered,
// nothing failing and nothing armed (a program with one completion in
// flight at a time polls so): PollThroughBuffer's course in one small
// frame, a held completion's poll that pulls nothing in short.  Any other
// poll: PollBuffered.
int PollScheduled(ibv_cq* cq, int n, ibv_wc* wc, PollFn provider) {
  CqState* st = n > 0 ? GetState(cq) : nullptr;
  if (!st) return provider(cq, n, wc);
  Global& g = *G();
  st->mu.LockAsUser();
  if (!(g.quick_random && st->buf.size() <= 1 && st->failing.empty() && !st->arm_pending))
    return PollBuffered(g, *st, cq, n, wc, provider);  // it releases the lock
  const Unlocks l(st->mu);
  ibv_wc* const tmp = PulledArray(*st);
  int err = 0;
  int pulled = 0;
  if (st->buf.empty()) {
    int result;
    if (PullIntoEmpty(g, *st, cq, wc, provider, tmp, &err, &pulled, &result)) return result;
    return AfterPulls(g, *st, cq, n, wc, pulled, err);
  }
  const int room = kCapacity - 1;
  const int got = provider(cq, room, tmp);
  if (__builtin_expect(got == 0, 1)) {
    ++st->pulls;  // AfterPull: nothing failing; AfterPullOfPoll: not armed
    Entry& e = st->buf.front();
    if (!IsForced(g, *st, e) && e.age < e.hold) {
      ++e.age;  // held back: it stayed buffered through this poll
      return 0;
    }
    CopyWc(wc, e.wc);
    st->buf.pop_front();
    return 1;
  }
  if (got < 0) {
    err = got;
  } else {
    TakePulled(g, *st, cq->context, tmp, got, room);
    pulled = got;
    if (!st->failing.empty()) pulled += PullPoll(g, *st, cq, provider, &err, tmp, 1);  // a new failure
  }
  return AfterPulls(g, *st, cq, n, wc, pulled, err);
}

void Armed(ibv_cq* cq) {
  if (CqState* st = StateOf(cq)) {
    std::lock_guard<core::BiasedLock> l(st->mu);
    st->arm_pending = true;
  }
}

void HookCqEx(ibv_cq_ex* cq, uint64_t wc_flags) {
  if (!cq || !cq->start_poll || !cq->next_poll || !cq->end_poll) return;
  CqState* st = GetState(cq);
  if (!st || st->ex) return;
  st->ex = new ExFns{cq->start_poll,
                     cq->next_poll,
                     cq->end_poll,
                     cq->read_opcode,
                     cq->read_vendor_err,
                     cq->read_byte_len,
                     cq->read_imm_data,
                     cq->read_qp_num,
                     cq->read_src_qp,
                     cq->read_wc_flags,
                     cq->read_slid,
                     cq->read_sl,
                     cq->read_dlid_path_bits,
                     cq->read_completion_ts,
                     cq->read_cvlan,
                     cq->read_flow_tag,
                     cq->read_tm_info,
                     cq->read_completion_wallclock_ns,
                     wc_flags};
  cq->start_poll = SStartPoll;
  cq->next_poll = SNextPoll;
  cq->end_poll = SEndPoll;
  HookReaders(cq);
}

void ForgetCq(const ibv_cq* cq) {
  CqState* st = StateOf(cq);
  if (!st) return;
  g_states.Erase(cq);
  g_states_gen.fetch_add(1, std::memory_order_acq_rel);
  delete st->ex;
  delete st;
}

void ResetForTest() {
  std::lock_guard<std::mutex> l(g_create_mu);
  // The old one stays allocated (a poll of another test thread may still
  // read it) and reachable, so that LeakSanitizer does not count it.
  static auto* const retired = new std::vector<Global*>;
  retired->push_back(G());
  g_global.store(new Global(), std::memory_order_release);
  g_on.store(0, std::memory_order_release);
}

void ResetForFuzz() {
  Global* old;
  {
    std::lock_guard<std::mutex> l(g_create_mu);
    old = G();
    g_global.store(new Global(), std::memory_order_release);
    g_on.store(0, std::memory_order_release);
  }
  delete old;  // no poll is in progress (faults.h: ResetDecisionsForFuzz)
}

int BufferedForTest(const ibv_cq* cq) {
  CqState* st = StateOf(cq);
  if (!st) return 0;
  std::lock_guard<core::BiasedLock> l(st->mu);
  return static_cast<int>(st->buf.size());
}

}  // namespace rdmasan::interpose::sched
