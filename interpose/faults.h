// interpose/faults: the harness bends the world the program lives in.
//
// Holds the process's core::Decider, built at first use from the options
// (seed=, faults=, reorder=, chaos=, schedule=, decision_log=), and what the fault
// points and the completion scheduler (interpose/sched.h) need to know of
// the program's QPs.  Every non-zero decision becomes a kDecision event
// (in the trace, and kept by the checkers to name in reports) and a line of
// decision_log=PATH.  The fault points themselves live where the calls are:
// the post wrappers (wrap_post.cc) fail a post at a chosen WR of the chain, the
// create/alloc/reg exports (exports.cc) fail with NULL and an errno, the
// scheduler turns a completion into an error and moves its QP to ERR
// through the provider's own modify_qp.
//
// May not: cost anything when no fault, reorder or schedule option is set
// (Decider() is then null after one load), change what a call returns
// except as the decision says, or fail a call in a way its man page does
// not allow.
#ifndef RDMASAN_INTERPOSE_FAULTS_H_
#define RDMASAN_INTERPOSE_FAULTS_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "core/decision.h"
#include "core/event.h"
#include "core/options.h"
#include "interpose/off_options.h"

namespace rdmasan::interpose {

// The decider, or null when the run decides nothing (no faults=, reorder=
// off, no chaos=, no schedule=).  Two loads after the first call.
core::Decider* DeciderSlow();
struct FaultsState;
extern std::atomic<core::Decider*> g_decider;  // set once built
extern std::atomic<bool> g_decider_built;
inline core::Decider* Decider() {
#if RDMASAN_OFF_OPTIONS_COMPILED_OUT
  return nullptr;  // bench/postpoll_bench_bare (interpose/off_options.h)
#endif
  if (__builtin_expect(g_decider_built.load(std::memory_order_acquire), 1))
    return g_decider.load(std::memory_order_relaxed);
  return DeciderSlow();
}
// True when fault point `p` may fire in this run (one load when nothing is
// decided).
inline bool FaultActive(core::Point p) {
  core::Decider* d = Decider();
  return __builtin_expect(d != nullptr, 0) && d->Active(p);
}

// A post of a chain of `chain_len` WRs to the QP or SRQ `obj` (number
// qp_num, 0 for an SRQ) reaches fault point `p`: 0, or the errno the post
// fails with and in *index the WR it fails at (earlier WRs are posted).
int PostFault(core::Point p, core::ObjId obj, uint32_t qp_num, uint32_t chain_len, uint32_t* index);
// The async fault points, reached at each post to `qp` (any of
// async.qp_fatal, async.cq_err on its send CQ, async.port_err): softnic
// raises the event with its consequences (softnic::InjectAsync); on a real
// provider only async.qp_fatal applies (the QP is moved to ERR; the event
// itself comes from the kernel and cannot be injected).
void MaybeInjectAsync(ibv_qp* qp);
inline bool AnyAsyncActive() {
  core::Decider* d = Decider();
  return __builtin_expect(d != nullptr, 0) &&
         (d->Active(core::Point::kAsyncQpFatal) || d->Active(core::Point::kAsyncCqErr) ||
          d->Active(core::Point::kAsyncPortErr));
}

// A create/alloc/reg call under parent `obj` reaches fault point `p`: 0,
// or the errno it fails with (NULL returned).
int CallFault(core::Point p, core::ObjId obj);

enum class ReorderMode { kOff, kRandom, kPct };
// reorder= (or the schedule's "# reorder=" when the option is not given).
ReorderMode Reorder();

// What the shim knows of a QP for faults and scheduling (by its number on
// its context).  Noted at creation whether or not checking is on.
struct QpInfo {
  ibv_qp* qp = nullptr;
  core::ObjId id = 0;   // rdmasan's object id (0 if checking is off)
  core::ObjId srq = 0;  // its SRQ's id, 0 if none
  bool has_srq = false;
  uint32_t type = 0;  // ibv_qp_type
};
void NoteQp(ibv_qp* qp, ibv_srq* srq);
void ForgetQpNum(ibv_qp* qp);
// False if unknown.
bool LookupQp(const ibv_context* ctx, uint32_t qp_num, QpInfo* out);
// Changes with every NoteQp and ForgetQpNum (never 0): what LookupQp
// answered stays true while it holds, so a caller may remember it.
uint64_t QpTableGeneration();

// Moves a QP to ERR through its provider (softnic or the real
// ibv_modify_qp), as a NIC does after an error completion; the call is
// the shim's, not the program's (no event).  Returns the provider's rc.
int MoveQpToError(ibv_qp* qp);

// Fills the fields of an error completion that ibv_poll_cq(3) leaves
// undefined (all but wr_id, status, qp_num, vendor_err) with poison, so
// code that reads them misbehaves visibly.
void PoisonErrorWc(ibv_wc* wc);
inline constexpr uint32_t kPoison32 = 0xdeadbeefu;

// A short line per recent injected fault, newest last (crash and hang
// reports name what preceded them).  Safe to call from a signal handler
// only in the sense that it never blocks: it may return "".
std::string RecentInjections();

// Decisions per point so far, for the exit summary ("" if none).
std::string DecisionSummary();
// At a normal exit: ends decision_log= with its "# reached POINT N" lines.
void FinishDecisionLog();

// chaos= (or the schedule's "# chaos="): at start, tells softnic which of
// its chaos points to ask the Decider about (softnic::SetChaos); the
// Decider itself is built at the first decision.  On a real NIC chaos
// has nothing to act on: only softnic asks.
void InstallChaos();

// What is wrong with schedule= ("" if nothing): the preloaded library
// stops the program at start on it (init.cc).
std::string ScheduleError();

// Tests: rebuild the decider from the process's options with `options`
// (RDMASAN_OPTIONS syntax) applied on top ("faults=post_send:once").
void ResetDecisionsForTest(const std::string& options = "");
// In a fork() child, before it runs on: a decision log whose path names no
// process (no %p) continues as PATH.<pid>, the parent's left alone.
void DecisionsAfterForkInChild();

// In-process fuzzing (interpose/fuzz_api.cc): rebuilds the decider from
// `options` with `source` (an input's bytes) as its source, resets the
// scheduler (sched::ResetForFuzz) and frees the previous decider.  No
// verbs call may be in progress on any thread.
void ResetDecisionsForFuzz(const core::Options& options, std::unique_ptr<core::DecisionSource> source);

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_FAULTS_H_
