// softnic/chaos: the legal freedoms of a NIC that softnic shows on demand
// (`--chaos=`): the orders of the data that the verbs spec allows and a
// friendly NIC never shows, each one a decision of the shim's
// DecisionSource, so a run, its decision log, its trace and a fuzzing
// campaign all cover them like the completion orders.
//
// softnic knows only core/, never the shim's Decider: the shim installs one
// function here at start (SetChaos) with the points `--chaos` names, and
// softnic asks it (ChaosDecide) at each place where a NIC may legally
// choose.  Outcome 0 is always what softnic does without chaos, so a
// decision log that omits a decision replays the natural behaviour.
//
// The points (docs/faults.md, "Chaos", has the spec or man-page rule each
// follows):
//   kPlace    placement order within a message (chunks in a decided order,
//             over several progress steps);
//   kGather   late gather: the source of a SEND/WRITE read at a decided
//             moment between the post and the completion, maybe twice;
//   kFence    unfenced overtaking: a WR behind an outstanding READ/ATOMIC
//             without IBV_SEND_FENCE executes before the READ's data lands;
//   kLag      a QP's execution lags behind other QPs';
//   kRelaxed  messages into an IBV_ACCESS_RELAXED_ORDERING MR land out of order;
//   kCqEvent  ibv_get_cq_event wakes with nothing to poll.
//
// May not: decide anything itself (no randomness in softnic), cost more than
// one relaxed load and a predictable branch per query while chaos is off,
// or call back into softnic from the decide function.
#ifndef RDMASAN_SOFTNIC_CHAOS_H_
#define RDMASAN_SOFTNIC_CHAOS_H_

#include <atomic>
#include <cstdint>

namespace rdmasan::softnic {

enum class ChaosPoint : uint8_t { kPlace, kGather, kFence, kLag, kRelaxed, kCqEvent, kCount };

// The shim's decision for point `p` about object `obj` (the QP number for
// the QP points, the CQ's number for kCqEvent), WR `wr_id` (0: none) of
// QP number `qp_num` (0: none; a rule's qp= and a report's context line
// match it): an outcome in [0, n), 0 being the natural behaviour.  `what`
// is a short description for the decision's note ("place wr_id 0x7: 4
// chunks").
using ChaosDecideFn = uint64_t (*)(ChaosPoint p, uint64_t obj, uint64_t wr_id, uint64_t n, const char* what,
                                   uint32_t qp_num);

struct ChaosState {
  std::atomic<uint32_t> mask{0};  // bit p: --chaos names point p
  std::atomic<ChaosDecideFn> decide{nullptr};
};
inline constinit ChaosState g_chaos;

// The shim, once at start (before any verbs call it lets through).
inline void SetChaos(ChaosDecideFn decide, uint32_t mask) {
  g_chaos.decide.store(decide, std::memory_order_release);
  g_chaos.mask.store(decide ? mask : 0, std::memory_order_release);
}
inline bool ChaosOn(ChaosPoint p) {
  return (g_chaos.mask.load(std::memory_order_relaxed) >> static_cast<unsigned>(p)) & 1u;
}
inline constexpr uint32_t ChaosBit(ChaosPoint p) { return 1u << static_cast<unsigned>(p); }
// Whether any of the points in `bits` (ChaosBit()s) is on: one relaxed load.
inline bool ChaosOnAny(uint32_t bits) { return (g_chaos.mask.load(std::memory_order_relaxed) & bits) != 0; }
// 0 when the point is off, n <= 1, or no decide function is installed.
inline uint64_t ChaosDecide(ChaosPoint p, uint64_t obj, uint64_t wr_id, uint64_t n, const char* what,
                            uint32_t qp_num = 0) {
  if (n <= 1 || !ChaosOn(p)) return 0;
  ChaosDecideFn f = g_chaos.decide.load(std::memory_order_acquire);
  if (f == nullptr) return 0;
  uint64_t outcome = f(p, obj, wr_id, n, what, qp_num);
  return outcome < n ? outcome : 0;
}

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_CHAOS_H_
