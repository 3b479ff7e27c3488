// interpose/sched_state: the scheduler's state (sched.cc's alone): a CQ's
// buffer of completions and what its decisions count, and the run's
// settings.  Split from sched.cc, which reads and writes all of it.
//
// May not: be included by anything but sched.cc, sched_ex.cc and
// sched_pick.cc (interpose/sched.h is the module's header).
#ifndef RDMASAN_INTERPOSE_SCHED_STATE_H_
#define RDMASAN_INTERPOSE_SCHED_STATE_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "checkers/ring.h"
#include "core/biased_lock.h"
#include "core/decision.h"
#include "interpose/faults.h"

namespace rdmasan::interpose::sched::internal {

enum class Mode { kNatural, kRandom, kPct };

// One buffered completion, with every field a reader may ask for.
struct Entry {
  ibv_wc wc;
  uint64_t stream = 0;  // the FIFO it belongs to
  uint64_t ident = 0;   // the stream across runs (PCT priorities)
  uint64_t seq = 0;     // pull order on its CQ
  uint32_t age = 0;     // polls of its CQ it stayed buffered through
  uint32_t hold = 0;    // not eligible before this age (sched.hold)
  bool barrier = false;
  // ibv_cq_ex extras.
  uint64_t ts = 0, wallclock = 0;
  uint32_t flow_tag = 0;
  uint16_t cvlan = 0;
  ibv_wc_tm_info tm{};
};

// The provider's extended poll functions of a hooked ibv_cq_ex.
struct ExFns {
  int (*start_poll)(ibv_cq_ex*, ibv_poll_cq_attr*);
  int (*next_poll)(ibv_cq_ex*);
  void (*end_poll)(ibv_cq_ex*);
  ibv_wc_opcode (*read_opcode)(ibv_cq_ex*);
  uint32_t (*read_vendor_err)(ibv_cq_ex*);
  uint32_t (*read_byte_len)(ibv_cq_ex*);
  __be32 (*read_imm_data)(ibv_cq_ex*);
  uint32_t (*read_qp_num)(ibv_cq_ex*);
  uint32_t (*read_src_qp)(ibv_cq_ex*);
  unsigned int (*read_wc_flags)(ibv_cq_ex*);
  uint32_t (*read_slid)(ibv_cq_ex*);
  uint8_t (*read_sl)(ibv_cq_ex*);
  uint8_t (*read_dlid_path_bits)(ibv_cq_ex*);
  uint64_t (*read_completion_ts)(ibv_cq_ex*);
  uint16_t (*read_cvlan)(ibv_cq_ex*);
  uint32_t (*read_flow_tag)(ibv_cq_ex*);
  void (*read_tm_info)(ibv_cq_ex*, ibv_wc_tm_info*);
  uint64_t (*read_completion_wallclock_ns)(ibv_cq_ex*);
  uint64_t wc_flags;
};

struct CqState {
  // One poller at a time; held from start_poll to end_poll.  Biased to
  // the thread that polls the CQ (the one that takes it with LockAsUser):
  // a CQ is polled by one thread in nearly every program, and a pthread
  // mutex taken and dropped at every poll was a fifth of what scheduling
  // adds to a poll.  Held across the provider's poll, which never waits
  // for a completion (and across start_poll .. end_poll, as the API has
  // one poller do).
  core::BiasedLock mu;
  checkers::Ring<Entry> buf;  // oldest first; slots reused (no allocation per completion)
  // What a provider's poll put there before the buffer takes it (kCapacity
  // completions, made at the CQ's first pull into the buffer): not on the
  // stack, so that a poll's frame stays small.
  std::unique_ptr<ibv_wc[]> pulled;
  uint64_t next_seq = 1;
  uint64_t release_below = 0;  // entries with seq < this are forced (armed)
  bool arm_pending = false;
  uint64_t pulls = 0;
  // Send queues failed by an injected error: their later successful
  // completions become flushes, until a pull after the failure drains the
  // provider's CQ.  (qp_num, the pull that failed it)
  std::vector<std::pair<uint32_t, uint64_t>> failing;
  ExFns* ex = nullptr;
  Entry current;  // ibv_cq_ex: the completion being read
  int ex_budget = 0;
  uint64_t obj = 0;  // the CQ's id, once known (CqObj)
  // Hits of sched.hold and sched.pick at this CQ (the Decider's count of
  // (point, obj): every such decision is this CQ's, made under mu), for
  // the Global numbered `epoch`.
  uint64_t epoch = 0;
  uint64_t holds = 0, picks = 0;
  // When the run's outcomes come from the seed: the PRNG's state for
  // (sched.hold, drawn_obj) and (sched.pick, drawn_obj) before a hit is
  // mixed in (Decider::DrawBase), for the Global `epoch`.
  bool prng = false;
  uint64_t drawn_obj = 0;
  uint64_t hold_base = 0, pick_base = 0;
  // The QP of the last completion admitted, as LookupQp gave it, while the
  // QP table's generation is qp_gen (0: none remembered).
  uint64_t qp_gen = 0;
  uint32_t qp_num = 0;
  bool qp_known = false;
  bool qp_may_fail = false;  // known, and RC or XRC_SEND (wc.error may fail its sends)
  QpInfo qp;
  // This CQ's hits at wc.error, counted without a locked add (the Decider's
  // HitCounter of the Global numbered wc_hits_epoch).
  uint64_t wc_hits_epoch = 0;
  core::Decider::HitCounter* wc_hits = nullptr;
};

struct Pct {
  std::mutex mu;
  bool init = false;
  int depth = 1;
  std::vector<uint64_t> change;  // steps, 1-based, sorted by index i (change[i-1])
  uint64_t steps = 0;
  absl::flat_hash_map<uint64_t, int64_t> prio;
};

// Numbers each Global (ResetForTest and ResetForFuzz make new ones): a CQ's
// decision counters belong to one.
inline std::atomic<uint64_t> g_epochs{0};

struct Global {
  uint64_t epoch = g_epochs.fetch_add(1, std::memory_order_relaxed) + 1;
  Mode mode = Mode::kNatural;
  bool replaying = false;
  bool natural = true;        // mode kNatural and not replaying: nothing is held or picked
  bool quick_random = false;  // mode kRandom and not replaying (sched.cc's PollRandom)
  bool wc_error = false;
  uint32_t delay = 4;
  core::Decider* decider = nullptr;
  Pct pct;
};

// A buffered completion that polls return oldest first, neither held nor
// picked: it stayed buffered through reorder_delay polls, or it was
// buffered when the CQ was armed.
inline bool IsForced(const Global& g, const CqState& st, const Entry& e) {
  return e.age >= g.delay || e.seq < st.release_below;
}

// sched.cc: the state of `cq` (an ibv_cq or ibv_cq_ex), null if none.
CqState* StateOf(const void* cq);
// sched_ex.cc: the provider's current completion of `cq` into `e`; the
// scheduler's read_* functions put on `cq`, for those its provider offers.
void ReadEx(const ExFns& f, ibv_cq_ex* cq, Entry* e);
void HookReaders(ibv_cq_ex* cq);

// sched_pick.cc: the eligible entries of the buffer (the head of its
// stream, not held, behind no barrier of its QP), oldest first (indexes);
// PCT's draws of the run (once) and a stream's priority; "send", "recv",
// "srq" or "error".
void Eligible(const Global& g, const CqState& st, std::vector<uint32_t>* out);
void PctInit(Global& g, Pct& p);
int64_t PctPriority(Global& g, Pct& p, uint64_t ident);
const char* Side(const Entry& e);

}  // namespace rdmasan::interpose::sched::internal

#endif  // RDMASAN_INTERPOSE_SCHED_STATE_H_
