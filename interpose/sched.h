// interpose/sched: legal completion reordering and delay, and injected
// error completions (wc.error), in the poll paths of every wrapped context
// (softnic and real providers alike: wrap_poll.cc calls in here).
//
// When the run decides anything about completions (reorder=random|pct,
// faults= naming wc.error, or schedule=), each CQ gets a bounded buffer
// (kCapacity completions; pulling from the provider stops when it is full,
// nothing is ever dropped) of the completions pulled from the provider.
// Each completion belongs to a *stream*: the send queue of its QP, the
// receive queue of its QP, or the SRQ its receive came from.  A stream is
// FIFO; streams merge in any order.  An error completion (whose opcode is
// undefined, so whose queue is unknown) is a barrier for its QP: nothing of
// that QP passes it and it passes nothing of that QP.  Each poll:
//   1. pulls what the provider has;
//   2. sched.hold (random; any mode when replaying), once per completion
//      pulled: outcome h > 0 holds it back until it stayed buffered
//      through h polls of its CQ (random: a quarter of them, h uniform in
//      1..reorder_delay); a held completion still blocks its stream;
//   3. fills the caller's array, each step releasing one *eligible*
//      completion (the head of its stream, not held, behind no barrier of
//      its QP):
//      sched.pick outcome i releases the i-th eligible one counted from
//      0 = the oldest in the buffer (the natural order); an outcome past
//      the eligible ones (a log re-applied to another run) means 0.
// Bounded delay: a completion that stayed buffered through reorder_delay
// polls of its CQ, and every completion buffered when the CQ is polled
// after a successful ibv_req_notify_cq (or start_poll after arming), is
// *forced*: while the oldest buffered completion is forced, polls neither
// hold nor pick; they return the oldest first.  (With polls that ask for at
// least what is buffered, a completion is returned at most reorder_delay
// polls of its CQ after the poll that pulled it.)  So a program that follows
// poll, arm, poll never waits with a completion held.
// pct: Burckhardt et al. (ASPLOS'10) over streams: each stream gets a
// random priority >= pct_depth from the run's draws; pct_depth-1 change
// points are drawn among steps 1..pct_steps (a step is one unforced
// release); at change point i the released stream's priority drops to
// pct_depth-i.  Each unforced release takes the highest-priority eligible
// stream.  No holds.
// wc.error: a successful send-queue completion of an RC/XRC QP pulled from
// the provider may become an error (the rule's statuses, or RETRY_EXC_ERR,
// RNR_RETRY_EXC_ERR for sends, REM_ACCESS_ERR/REM_OP_ERR for RDMA and
// atomics); its QP then goes to ERR through the provider (MoveQpToError),
// which flushes every later outstanding WR, and every later successful
// completion of that send queue the provider had already produced becomes
// WR_FLUSH_ERR.  Every error completion returned gets PoisonErrorWc().
//
// May not: cost more than one predictable branch per poll when nothing is
// decided (On()); invent, drop or duplicate a completion; reorder within a
// stream; hold a completion past the bounds above; block (beyond the CQ's
// own lock, taken by one poller at a time).
#ifndef RDMASAN_INTERPOSE_SCHED_H_
#define RDMASAN_INTERPOSE_SCHED_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "interpose/off_options.h"

namespace rdmasan::interpose::sched {

inline constexpr int kCapacity = 256;  // completions buffered per CQ

// 0: not known yet, 1: off, 2: on, 3: on in the natural order (nothing
// is held or picked: reorder=off, not replaying).
extern std::atomic<int> g_on;
bool ComputeOn();
// Whether the scheduler is known to be off (the poll wrapper's first test).
inline bool KnownOff() {
#if RDMASAN_OFF_OPTIONS_COMPILED_OUT
  return true;  // bench/postpoll_bench_bare (interpose/off_options.h)
#endif
  return g_on.load(std::memory_order_relaxed) == 1;
}
// Whether the poll paths schedule: one relaxed load and one branch when off.
inline bool On() {
#if RDMASAN_OFF_OPTIONS_COMPILED_OUT
  return false;  // bench/postpoll_bench_bare (interpose/off_options.h)
#endif
  const int s = g_on.load(std::memory_order_relaxed);
  if (__builtin_expect(s == 1, 1)) return false;
  return s >= 2 || ComputeOn();
}

using PollFn = int (*)(ibv_cq*, int, ibv_wc*);
// Poll's two courses: the natural order's, and the one that holds and picks.
int PollNatural(ibv_cq* cq, int n, ibv_wc* wc, PollFn provider);
int PollScheduled(ibv_cq* cq, int n, ibv_wc* wc, PollFn provider);
// ibv_poll_cq through the scheduler (`provider`: the provider's poll_cq),
// after On().
inline int Poll(ibv_cq* cq, int n, ibv_wc* wc, PollFn provider) {
  return g_on.load(std::memory_order_relaxed) == 3 ? PollNatural(cq, n, wc, provider)
                                                   : PollScheduled(cq, n, wc, provider);
}
// After a successful ibv_req_notify_cq: the next poll releases what is held.
void Armed(ibv_cq* cq);
// Puts the scheduler's start/next/end_poll and read_* functions on an
// ibv_cq_ex (before the checking layer hooks it, which then calls these as
// the provider's).  `wc_flags`: the fields the CQ was created with.
void HookCqEx(ibv_cq_ex* cq, uint64_t wc_flags);
// A destroyed CQ: its buffer goes (what it held is gone with it).
void ForgetCq(const ibv_cq* cq);

// Tests: re-reads whether scheduling is on (after ResetDecisionsForTest)
// and forgets every CQ's buffer and the PCT state.
void ResetForTest();
// In-process fuzzing, between two inputs: the same, freeing the old state
// (no poll may be in progress).  The CQs' buffers are kept: an input ends
// with them empty (include/rdmasan/rdmasan_fuzz.h).
void ResetForFuzz();
// Tests: completions buffered on `cq` now.
int BufferedForTest(const ibv_cq* cq);

}  // namespace rdmasan::interpose::sched

#endif  // RDMASAN_INTERPOSE_SCHED_H_
