// core/decision: where every choice the harness makes comes from.
//
// A *decision* is one choice at one named point: fail this post, fail this
// registration, turn this completion into an error, hold this completion,
// release that queue's completion first.  Each has a key (point, object,
// hit: the hit-th time the point was reached for that object) and an
// outcome, a number whose 0 is always "do nothing unusual" (no fault, the
// natural order).  Outcomes come from one DecisionSource:
//   - PrngSource: a seeded counter-based generator: the draws of a key
//     depend only on (seed, key), never on what other threads decided, so
//     two runs of a program deterministic under its schedule decide alike;
//   - ByteSource: a byte stream (a libFuzzer input), consumed in order,
//     all zero once exhausted;
//   - LogSource: a recorded decision log: each key's recorded outcome,
//     0 for every key the log does not name.
// Only non-zero outcomes are recorded (a decision log lists what the
// harness did, not what it left alone), so removing lines of a log gives
// another valid schedule: the shrinker of a fuzzing campaign relies on it.
//
// Fault points form a hierarchy by name (libfiu style): a spec names a
// point, or a group that is a prefix ending at '_' or '.', or '*':
// `post` is post_send, post_recv and post_srq_recv; `create` every create_*;
// `wc` wc.error; `async` every async.*.  FaultSpec parses --faults=SPEC:
//   spec   := rule (',' rule)*
//   rule   := name (':' setting)*
//   setting:= 'p=' prob | 'nth=' N | 'once' | 'enable=' prob | 'status=' S('|'S)*
//           | 'errno=' E('|'E)* | 'qp=' N | 'wr=' N
// A rule with neither p, nth nor once is BUGGIFY-style: enabled for the run
// with probability `enable` (default 0.5), then fires with p=0.05 per hit.
// The chaos points (chaos.*: softnic's legal freedoms, decided through the
// same sources) are named by ChaosSpec, --chaos=SPEC, in the same grammar.
//
// May not: depend on anything but core/ and Abseil, allocate per decision
// once a key's counter exists, or do I/O (the sink does).
#ifndef RDMASAN_CORE_DECISION_H_
#define RDMASAN_CORE_DECISION_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <atomic>
#include <mutex>
#include <type_traits>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/node_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

#include "absl/synchronization/mutex.h"

namespace rdmasan::core {

// Every point where the harness decides (names: PointName()).
enum class Point : uint16_t {
  kPostSend,           // post_send: fail the post at a chosen WR of the chain
  kPostRecv,           // post_recv
  kPostSrqRecv,        // post_srq_recv
  kRegMr,              // reg_mr (ibv_reg_mr, _iova, _iova2, reg_dmabuf_mr)
  kCreateCq,           // create_cq (ibv_create_cq, create_cq_ex)
  kCreateQp,           // create_qp (ibv_create_qp, create_qp_ex)
  kCreateSrq,          // create_srq
  kCreateAh,           // create_ah
  kCreateCompChannel,  // create_comp_channel
  kAllocPd,            // alloc_pd
  kWcError,            // wc.error: a completion becomes an error, the QP goes to ERR
  kAsyncPortErr,       // async.port_err: PORT_ERR, then PORT_ACTIVE
  kAsyncCqErr,         // async.cq_err: CQ_ERR on a CQ
  kAsyncQpFatal,       // async.qp_fatal: QP_FATAL, the QP goes to ERR
  kSchedHold,          // sched.hold: hold a completion back from this poll
  kSchedPick,          // sched.pick: release the i-th eligible queue's completion
  // softnic's legal freedoms (--chaos, softnic/chaos.h), after the others
  // so that the numbers the traces store for the points above stay theirs.
  kChaosPlace,    // chaos.place: placement order within a message
  kChaosGather,   // chaos.gather: late gather of a SEND/WRITE's source
  kChaosFence,    // chaos.fence: an unfenced WR overtakes a READ/ATOMIC
  kChaosLag,      // chaos.lag: a QP's execution lags behind others'
  kChaosRelaxed,  // chaos.relaxed: out-of-order landing into a relaxed-ordering MR
  kChaosCqEvent,  // chaos.cq_event: ibv_get_cq_event wakes with nothing to poll
  kCount
};
constexpr int kNumPoints = static_cast<int>(Point::kCount);
const char* PointName(Point p);
// The point named `name` exactly, or kCount.
Point PointByName(absl::string_view name);
// True for the points --faults may name (not the scheduler's).
inline bool IsFaultPoint(Point p) { return p < Point::kSchedHold; }
// True for the points --chaos may name.
inline bool IsChaosPoint(Point p) { return p >= Point::kChaosPlace && p < Point::kCount; }

struct DecisionKey {
  Point point = Point::kCount;
  uint64_t obj = 0;  // the object the decision is about (rdmasan's id), 0: none
  uint64_t hit = 0;  // 1-based: the hit-th decision at (point, obj)
  bool operator==(const DecisionKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const DecisionKey& k) {
    return H::combine(std::move(h), k.point, k.obj, k.hit);
  }
};

// One recorded decision: a key and its non-zero outcome.  `note` is for
// people (the WR, the status in words); a log's reader ignores it.
struct Decision {
  DecisionKey key;
  uint64_t outcome = 0;
  std::string note;
  // What it concerns, when a QP or a WR (for the event; not in the log).
  uint32_t qp_num = 0;
  uint64_t wr_id = 0;
};

// Uniform draws for one key.
class Draws {
 public:
  virtual ~Draws() = default;
  // A value in [0, n) (n == 0 or 1: 0).
  virtual uint64_t Below(uint64_t n) = 0;
  // True with probability p.  The top p of the range fires, so a draw of 0
  // (an exhausted byte stream) never does: an empty input is the natural run.
  [[gnu::always_inline]] bool Chance(double p) {
    if (p <= 0) return false;
    if (p >= 1) return true;
    constexpr uint64_t kScale = uint64_t(1) << 32;
    return Below(kScale) >= kScale - static_cast<uint64_t>(p * kScale);
  }
};

// The seeded PRNG (MakePrngSource): counter-based on splitmix64.  A key's
// draws start from KeyState(KeyBase(seed, point, obj), hit), so a caller
// that decides at one (point, obj) over and over computes the base once
// (Decider::DrawBase) and draws in line (Decider::ScheduleDrawn).
namespace prng {
inline uint64_t Mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}
// Unbiased enough for n far below 2^64 (the bias is n / 2^64).
inline uint64_t Reduce(uint64_t r, uint64_t n) {
  return n <= 1 ? 0 : static_cast<uint64_t>((static_cast<unsigned __int128>(r) * n) >> 64);
}
inline uint64_t KeyBase(uint64_t seed, Point p, uint64_t obj) {
  return Mix(Mix(seed ^ static_cast<uint64_t>(p)) ^ obj);
}
inline uint64_t KeyState(uint64_t base, uint64_t hit) { return Mix(base ^ hit); }
}  // namespace prng

// The PRNG's draws of one key, from its KeyState.
class PrngDraws final : public Draws {
 public:
  explicit PrngDraws(uint64_t state) : state_(state) {}
  uint64_t Below(uint64_t n) override { return prng::Reduce(prng::Mix(state_++), n); }

 private:
  uint64_t state_;
};

class DecisionSource {
 public:
  virtual ~DecisionSource() = default;
  // True for a recorded log: outcomes are looked up, not computed.
  virtual bool Replaying() const { return false; }
  // Replaying: the recorded outcome of `key` (0 if none).
  virtual uint64_t Recorded(const DecisionKey& key) const { return 0; }
  // Not replaying: runs `f` with the draws of `key`.
  virtual uint64_t Draw(const DecisionKey& key, absl::FunctionRef<uint64_t(Draws&)> f) = 0;
  // The seeded PRNG: prng::KeyBase of (p, obj) for its seed, true; any
  // other source: false (its draws are not a function of the key alone).
  virtual bool KeyBase(Point p, uint64_t obj, uint64_t* base) const { return false; }
  // Draws that belong to the run rather than to one hit (BUGGIFY
  // activation, PCT priorities): a pure function of (seed, tag, a, b) for
  // the PRNG; from the stream for bytes; 0 for a log.
  virtual uint64_t RunDraw(uint64_t tag, uint64_t a, uint64_t b, uint64_t n) = 0;
  virtual std::string Describe() const = 0;  // "seed 42", "log FILE", "bytes"
};

std::unique_ptr<DecisionSource> MakePrngSource(uint64_t seed);
std::unique_ptr<DecisionSource> MakeByteSource(const uint8_t* data, size_t size);  // copies the bytes
std::unique_ptr<DecisionSource> MakeLogSource(std::vector<Decision> log, std::string name);

// ------------------------------------------------------------ decision log --
// Text, one decision per line, '#' to end of line is a comment:
//   wc.error obj=5 hit=3 outcome=12   # RETRY_EXC_ERR on QP 0x11 wr_id=0x12
// The header comment lines name the run's settings ("# seed=", "# reorder=",
// "# faults=", and "# chaos=" when chaos is on) so that --schedule can
// restore them.  At a normal exit the
// log ends with "# reached POINT N" comment lines: how often each fault
// point was reached (FormatReached), which a reader of schedules ignores.
class Decider;
struct DecisionLog {
  std::vector<Decision> decisions;
  std::string reorder;  // from "# reorder=", "" if absent
  std::string faults;   // from "# faults="
  std::string chaos;    // from "# chaos=", "" if absent
};
// Clear errors naming the line and the bad token; never crashes on any input.
absl::StatusOr<DecisionLog> ParseDecisionLog(absl::string_view text);
std::string FormatDecision(const Decision& d);  // one line, with '\n'
// The "# chaos=" line only when `chaos` is not empty.
std::string FormatLogHeader(absl::string_view reorder, absl::string_view faults, absl::string_view source,
                            absl::string_view chaos = "");
std::string FormatReached(const Decider& d);  // "# reached post_send 12\n"..., "" if none
// The "# reached" lines of a log's text: (point, times reached), in order.
std::vector<std::pair<Point, uint64_t>> ParseReached(absl::string_view text);

// ------------------------------------------------------------------ faults --
struct FaultRule {
  std::string name;                // as written: a point, a group, or "*"
  double p = -1;                   // per-hit probability; <0: unset
  uint64_t nth = 0;                // fire at exactly the nth hit (1-based); 0: unset
  bool once = false;               // fire at most once
  double enable = -1;              // per-run activation probability; <0: unset
  std::vector<uint32_t> statuses;  // wc.error: ibv_wc_status values to draw from
  std::vector<int> errnos;         // failed calls: errno values to draw from
  uint32_t qp = 0;                 // only this QP number (0: any)
  int64_t wr = -1;                 // posts: fail at this WR of the chain (-1: draw)
  bool Matches(Point p) const;
};
struct FaultSpec {
  std::vector<FaultRule> rules;
  bool empty() const { return rules.empty(); }
};
// Errors name the bad token: "faults: unknown fault point 'post_snd' in 'post_snd:nth=3'".
absl::StatusOr<FaultSpec> ParseFaultSpec(absl::string_view spec);
// Status names: "retry-exc", "RETRY_EXC_ERR", "IBV_WC_RETRY_EXC_ERR" or a number.
bool ParseWcStatus(absl::string_view s, uint32_t* out);
bool ParseErrno(absl::string_view s, int* out);
const char* ErrnoName(int e);               // "ENOMEM"; "E?" if unknown
const char* WcStatusName(uint32_t status);  // "RETRY_EXC_ERR"; "SUCCESS"; "?" if unknown

// ------------------------------------------------------------------- chaos --
// ChaosSpec parses --chaos=SPEC, the legal freedoms softnic shows
// (softnic/chaos.h; docs/faults.md, "Chaos"), in the grammar of --faults:
//   spec   := rule (',' rule)*
//   rule   := name (':' setting)*      name: 'all', '*', or a point's name
//                                      without 'chaos.' (place, cq_event)
//   setting:= 'p=' prob | 'nth=' N | 'once' | 'enable=' prob | 'qp=' N
// A rule with neither p, nth nor once fires with p=kChaosDefaultP per hit
// (always enabled unless enable= says otherwise): a chaos decision is legal
// behaviour a correct program must take at every hit, so unlike a fault it
// need not be rare for the run to go on, and a bug that needs one freedom
// shown once among natural hits is found within a few runs.  'all' (or
// '*') names every point.
inline constexpr double kChaosDefaultP = 0.25;
struct ChaosSpec {
  std::vector<FaultRule> rules;  // FaultRule's p, nth, once, enable, qp
  bool empty() const { return rules.empty(); }
  // Bit i for ChaosPoint i (kChaosPlace is bit 0): the points any rule names.
  uint32_t Mask() const;
  // Whether a rule names chaos point `p` for QP `qp_num` (0: any QP).
  bool Names(Point p, uint32_t qp_num = 0) const;
};
// Whether a rule of --chaos names `p` (a chaos point).
bool ChaosRuleMatches(const FaultRule& r, Point p);
// Whether softnic implements chaos point `p` (every chaos point now).
bool ChaosPointAvailable(Point p);
// Errors name the bad token: "chaos: unknown point 'bogus' in 'bogus' (available: place, ...)".
absl::StatusOr<ChaosSpec> ParseChaosSpec(absl::string_view spec);

// --------------------------------------------------------------- decider --
// A decision's note (what it did, in words), computed only when a sink
// wants it: a reference to a callable, or none (nullptr).  Neither copies
// nor allocates; like absl::FunctionRef, it must not outlive the call it is
// passed to.
class NoteFn {
 public:
  NoteFn(std::nullptr_t = nullptr) {}  // NOLINT: none
  template <typename F, typename = std::enable_if_t<!std::is_same_v<std::decay_t<F>, NoteFn> &&
                                                    std::is_invocable_r_v<std::string, const F&, uint64_t>>>
  NoteFn(const F& f)  // NOLINT: as absl::FunctionRef
      : obj_(&f),
        call_([](const void* o, uint64_t v) -> std::string { return (*static_cast<const F*>(o))(v); }) {}
  explicit operator bool() const { return call_ != nullptr; }
  std::string operator()(uint64_t v) const { return call_(obj_, v); }

 private:
  const void* obj_ = nullptr;
  std::string (*call_)(const void*, uint64_t) = nullptr;
};

// The process's decisions: a source, the fault rules, per-(point, object)
// hit counters, and a sink that records every non-zero outcome.
class Decider {
 public:
  using Sink = std::function<void(const Decision&)>;
  Decider(std::unique_ptr<DecisionSource> source, FaultSpec faults, ChaosSpec chaos = {});

  // Whether any rule names `p` (or, replaying, the log does): the cheap
  // test a call site makes before anything else.
  bool Active(Point p) const { return active_[static_cast<int>(p)]; }
  void SetActive(Point p) { active_[static_cast<int>(p)] = true; }
  bool replaying() const { return source_->Replaying(); }

  // The next key for (p, obj): hit counts from 1.
  DecisionKey NextKey(Point p, uint64_t obj);

  // A fault decision at a fault point: 0 (no fault) or, when a rule fires,
  // what `outcome` makes of the rule and the draws (non-zero).  `qp_num`
  // filters rules with qp=.  Replaying: the log's outcome.  Non-zero
  // outcomes go to the sink with the note `note(outcome)`.
  // Inline up to the test whether a rule can fire at all: a point that is
  // reached at every completion (wc.error) and can never fire costs its
  // count, not a call.
  uint64_t Fault(Point p, uint64_t obj, uint32_t qp_num,
                 absl::FunctionRef<uint64_t(const FaultRule&, Draws&)> outcome, NoteFn note = nullptr,
                 uint64_t wr_id = 0) {
    reached_[static_cast<int>(p)].fetch_add(1, std::memory_order_relaxed);
    if (!may_fire_[static_cast<int>(p)]) return 0;  // e.g. faults=wc.error:p=0: reached, never fires
    return FaultMayFire(p, obj, qp_num, outcome, note, wr_id);
  }

  // A count of one caller's hits at a fault point, kept by one writer at a
  // time (a CQ's, under its lock), so that counting a hit is a plain add,
  // not a locked one: Reached(p) adds every such count to the Decider's
  // own.  Owned by the Decider (NewHitCounter: stable until it goes).
  class HitCounter {
   public:
    [[gnu::always_inline]] void Bump() {
      n_.store(n_.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    }

   private:
    friend class Decider;
    explicit HitCounter(Point p) : p_(p) {}
    Point p_;
    std::atomic<uint64_t> n_{0};
  };
  HitCounter* NewHitCounter(Point p);
  // Fault() for a caller that counts its hits in `hits` (a counter of p's).
  uint64_t FaultCounted(HitCounter* hits, Point p, uint64_t obj, uint32_t qp_num,
                        absl::FunctionRef<uint64_t(const FaultRule&, Draws&)> outcome, NoteFn note = nullptr,
                        uint64_t wr_id = 0) {
    hits->Bump();
    if (!may_fire_[static_cast<int>(p)]) return 0;
    return FaultMayFire(p, obj, qp_num, outcome, note, wr_id);
  }

  // A scheduler decision: `f` computes the outcome from draws (not called
  // when replaying).  Non-zero outcomes are recorded.
  uint64_t Schedule(Point p, uint64_t obj, absl::FunctionRef<uint64_t(Draws&)> f, NoteFn note = nullptr,
                    uint32_t qp_num = 0, uint64_t wr_id = 0);
  // The same at hit `hit` of (p, obj), counted by a caller that makes every
  // decision at (p, obj) through here (the scheduler: a CQ's own, under
  // its lock), so its count is the one NextKey would keep; no lock.
  uint64_t ScheduleAt(Point p, uint64_t obj, uint64_t hit, absl::FunctionRef<uint64_t(Draws&)> f,
                      NoteFn note = nullptr, uint32_t qp_num = 0, uint64_t wr_id = 0);
  // For such a caller, when the outcomes come from the seeded PRNG (not a
  // log, not bytes): the state every hit of (p, obj) starts from, true.
  bool DrawBase(Point p, uint64_t obj, uint64_t* base) const { return source_->KeyBase(p, obj, base); }
  // ScheduleAt for a base DrawBase gave, with the draws in line (`f` is
  // called with a PrngDraws&): the same outcome, no call but the sink's.
  template <typename F>
  [[gnu::always_inline]] uint64_t ScheduleDrawn(uint64_t base, Point p, uint64_t obj, uint64_t hit,
                                                const F& f, NoteFn note = nullptr, uint32_t qp_num = 0,
                                                uint64_t wr_id = 0) {
    PrngDraws d(prng::KeyState(base, hit));
    const uint64_t result = f(d);
    if (result) Record(DecisionKey{p, obj, hit}, result, note, qp_num, wr_id);
    return result;
  }

  // A chaos decision (softnic's legal freedoms) among `n` outcomes: 0 (the
  // natural behaviour) or, when a --chaos rule naming `p` (and qp_num, for
  // rules with qp=) fires, an outcome drawn in [1, n).  Replaying: the
  // log's outcome (0 if it is not below n).  Recorded when non-zero.
  uint64_t Chaos(Point p, uint64_t obj, uint64_t n, NoteFn note = nullptr, uint32_t qp_num = 0,
                 uint64_t wr_id = 0);

  DecisionSource& source() { return *source_; }
  const ChaosSpec& chaos() const { return chaos_; }
  const FaultSpec& faults() const { return faults_; }
  // `with_notes`: the sink reads Decision::note (a decision log is
  // written); without, no note is computed (a sched.hold's costs more than
  // the decision).
  void SetSink(Sink sink, bool with_notes = true) {
    sink_ = std::move(sink);
    notes_ = with_notes;
  }

  // Non-zero outcomes so far, per point.
  uint64_t Count(Point p) const;
  // How many times fault point `p` was reached (Fault() called), whatever
  // the outcome: a baseline run's list of what `fail-nth` enumeration can
  // try (`rdmasan fuzz --strategy=enumerate`).
  uint64_t Reached(Point p) const;

 private:
  // A rule's state for the run: the points it names (bit i: Point i), its
  // hits per point (nth=), whether it fired (once=), its BUGGIFY
  // activation per point (0 unknown, 1 on, -1 off).
  struct RuleState {
    uint32_t points = 0;
    bool never = false;  // p=0 alone: never fires, draws nothing: skipped
    bool fired = false;
    uint64_t hits[kNumPoints] = {};
    int8_t enabled[kNumPoints] = {};
  };
  static_assert(kNumPoints <= 32, "RuleState::points is one word");
  bool RuleEnabled(const FaultRule& r, RuleState& st, size_t rule_key, Point p, bool chaos)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The first rule of `rules` (their states `states`) that fires at this
  // hit decides: its outcome, 0 if none fires.
  uint64_t FirstFiring(const std::vector<FaultRule>& rules, std::vector<RuleState>& states, size_t key_base,
                       bool chaos, Point p, uint32_t qp_num, const DecisionKey& key,
                       absl::FunctionRef<uint64_t(const FaultRule&, Draws&)> outcome)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  DecisionKey NextKeyLocked(Point p, uint64_t obj) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Record(const DecisionKey& key, uint64_t outcome, NoteFn note, uint32_t qp_num, uint64_t wr_id);
  // Fault() past the count, at a point where a rule may fire.
  uint64_t FaultMayFire(Point p, uint64_t obj, uint32_t qp_num,
                        absl::FunctionRef<uint64_t(const FaultRule&, Draws&)> outcome, NoteFn note,
                        uint64_t wr_id);

  std::unique_ptr<DecisionSource> source_;
  FaultSpec faults_;
  ChaosSpec chaos_;
  bool active_[kNumPoints] = {};
  // Whether a decision at the point can be non-zero: a log is replayed, or
  // a fault rule that is not `never` names it.  Where none can, Fault()
  // only counts the hit: its key is never asked for.
  bool may_fire_[kNumPoints] = {};
  Sink sink_;
  bool notes_ = true;
  mutable std::mutex mu_;
  // Hits per (point, object); the counter of each point's last object,
  // remembered (a point is reached for one QP or CQ over and over).
  absl::node_hash_map<std::pair<uint16_t, uint64_t>, uint64_t> hits_ ABSL_GUARDED_BY(mu_);
  struct LastHit {
    uint64_t obj = 0;
    uint64_t* count = nullptr;  // into hits_ (a node: stable)
  };
  LastHit last_hit_[kNumPoints] ABSL_GUARDED_BY(mu_);
  std::vector<RuleState> fault_state_ ABSL_GUARDED_BY(mu_);
  std::vector<RuleState> chaos_state_ ABSL_GUARDED_BY(mu_);
  std::atomic<uint64_t> counts_[kNumPoints] = {};
  std::atomic<uint64_t> reached_[kNumPoints] = {};
  std::vector<std::unique_ptr<HitCounter>> hit_counters_ ABSL_GUARDED_BY(mu_);
};

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_DECISION_H_
