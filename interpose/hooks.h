// interpose/hooks: from verbs calls to Events to Findings, live.
//
// Assigns stable object ids (in creation order, never reused), copies each
// call into a core::Event, runs the checkers engine and hands the findings
// to the reporter.  Entry points call Emit() after the real call returns
// (or, for ibv_get_cq_event, also before it blocks).
//
// The trace (option trace=PATH) opens at the first event.  Its buffered
// events are written every 200 ms by a detached thread, before a verb that
// can block, and by the handler of every signal whose default action ends
// the process (installed only where the program left that default): a
// crash leaves PATH.incomplete, any other such signal closes the trace.
//
// May not: change a verb's result, throw, or run when the shim is re-entered
// from libibverbs itself (the caller checks Reentry::outer()), or take a
// process-wide lock on the data path: the engine locks per domain of
// queues (checkers/engine.h).
#ifndef RDMASAN_INTERPOSE_HOOKS_H_
#define RDMASAN_INTERPOSE_HOOKS_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <vector>

#include "checkers/state.h"
#include "core/event.h"
#include "core/report.h"

namespace rdmasan::interpose {

// True when checking is on (the event pipeline runs at all): the checking
// option, unless SetChecking() overrode it (benchmarks compare modes).
// One load once the option was read (-1 until then).
extern std::atomic<int> g_checking;
bool CheckingSlow();
inline bool Checking() {
  const int v = g_checking.load(std::memory_order_relaxed);
  return __builtin_expect(v >= 0, 1) ? v != 0 : CheckingSlow();
}
void SetChecking(bool on);

// Object ids.  Assign() gives a new id to a created object (a QP or SRQ
// with the limits the provider returned: the chain copies read no more SGEs
// of a WR, and no more WRs of a chain, than those allow); Id() looks one up
// (0 if unknown); Forget() drops it after destruction.
struct ObjLimits {
  uint32_t max_send_sge = 0, max_recv_sge = 0;  // 0: unknown object, read no SGE
  // Queue depths; Limits() gives a bound >= the depth (a power of two), 0
  // when unknown.
  uint32_t max_send_wr = 0, max_recv_wr = 0;
};
core::ObjId Assign(const void* obj, const ObjLimits& limits = {});
core::ObjId Id(const void* obj);
// Bumped by every Forget() (from 1): an id remembered by its object's
// address holds while this word is what it was when the id was looked up
// (the address may since name another object).
extern std::atomic<uint64_t> g_ids_forgotten;
ObjLimits Limits(const void* obj);
// Id() and Limits() of one object with one lookup (the posts ask both).
struct ObjInfo {
  core::ObjId id = 0;
  ObjLimits limits;
};
ObjInfo Lookup(const void* obj);
// Lookup's id and max_send_sge alone (a one-WR post_send's needs).
struct SendObjInfo {
  core::ObjId id = 0;
  uint32_t max_send_sge = 0;
};
SendObjInfo LookupSend(const void* obj);
// Lookup's id and max_recv_sge alone (a one-WR post_recv's needs).
struct RecvObjInfo {
  core::ObjId id = 0;
  uint32_t max_recv_sge = 0;
};
RecvObjInfo LookupRecv(const void* obj);
void Forget(const void* obj);
// Makes `obj` another handle of the object whose id is `id` (a parent
// domain of its PD, an imported PD or MR): every event naming `obj` names
// that object.  interpose/domains.h keeps which handles are aliases.
void AssignAlias(const void* obj, core::ObjId id);

// Fills tid (and seq when the run is traced), runs the checkers and reports.  With `retired`, also
// hands back the send WRs with payload hashes that the event retired.
void Emit(core::Event& e, std::vector<checkers::RetiredWr>* retired = nullptr);

// The data path's compact events (checkers::Engine::PostOneSend,
// PostOneRecv and PollSucceeded), when the event would reach the engine alone (the process
// started, no trace, no fuzz hook, no watchdog) and is quiet: true, done;
// false, nothing done: Emit the event.
bool EmitOneSend(const checkers::OneSend& p);
bool EmitOneRecv(const checkers::OneRecv& p);
bool EmitPollSucceeded(core::ObjId cq, const core::Completion* wcs, size_t n,
                       std::vector<checkers::RetiredWr>* retired);

// In-process fuzzing (interpose/fuzz_api.cc): `hook` sees every event
// after the checkers, with the findings it raised (already reported).
// While a hook is set, the crash signals are left to the fuzzer (whose
// handlers save the input): set it before the first verbs call.
using FuzzEventHook = void (*)(const core::Event&, const std::vector<core::Finding>&);
void SetFuzzEventHook(FuzzEventHook hook);

// Events of object creation shared by both layers (exports and the
// verbs_context create_*_ex wrappers).  `obj` may be null (failed call).
void OnCreateCq(ibv_cq* cq, ibv_context* ctx, ibv_comp_channel* channel, core::StackId stack);
void OnCreateQp(ibv_qp* qp, ibv_pd* pd, const ibv_qp_cap& cap, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq,
                ibv_qp_type type, int sq_sig_all, core::StackId stack);

// Whether an outstanding WR still uses the MR with this lkey (false when
// checking is off).
bool LkeyInFlight(uint32_t lkey);

// Every live CQ's outstanding work, from the checkers' books (empty when
// checking is off): the hang report's books (interpose/watchdog.h).
std::vector<checkers::CqOutstanding> Outstanding();

// Writes the events the trace buffers (if the run is traced): called before
// a verb that can block (ibv_get_cq_event, ibv_get_async_event), so a
// program killed while it waits leaves them.
void FlushTraceBeforeBlocking();

// In a forked child: let go of the parent's trace without touching it; the
// child's own trace opens at its next event.
void AfterForkInChild();

// Whether this process image has seen a verbs event (its books and trace
// exist).
bool Started();

// The id of the run this image belongs to, which names its trace
// (traces/tree.cc): inherited from the image that began the run, or made
// here.  Read at the shim's start, before the program can fork or exec.
const std::string& TraceRun();

// Before an exec (process_hooks.cc): close this image's trace, complete;
// if the exec fails, the next event opens a new one.
void BeforeExec();

// In _exit/_Exit: the end-of-run work exit() does (trace, summary, SARIF,
// exitcode), once, where exit would do it; returns the status to exit with.
int ExitStatusAtUnderscoreExit(int status);

// The most WRs of a chain worth copying for a queue of depth bound `max_wr`
// (0: unknown, `fallback`): a provider places at most that many and refuses
// the next, so one more shows every overflow, and a cyclic chain (a WR's
// next pointing back) is walked no further.
inline uint32_t ChainBound(uint32_t max_wr, uint32_t fallback) { return max_wr ? max_wr + 1 : fallback; }

// Copies of the verbs arguments: at most `max_wrs` WRs of the chain, and of
// each WR its num_sge SGEs if num_sge <= max_sge (at most kMaxCopiedSges),
// else none: a WR over the limit is refused by the provider, and its list
// may be shorter than num_sge (num_sge itself is kept as given).  Return the number of WRs copied.
// `ud`: the chain was posted to a UD QP (its WRs name AHs).
constexpr uint32_t kMaxCopiedSges = 1024;
uint32_t CopySendChain(const ibv_send_wr* wr, const ibv_send_wr* bad, core::Event* e, bool ud,
                       uint32_t max_sge, uint32_t max_wrs = 4096);
uint32_t CopyRecvChain(const ibv_recv_wr* wr, const ibv_recv_wr* bad, core::Event* e, uint32_t max_sge,
                       uint32_t max_wrs = 65536);
// ibv_post_srq_ops's chain, as core::EventKind::kPostSrqOps lays it out
// (core/event.h); call it after the provider, which writes TAG_ADD handles.
uint32_t CopyOpsChain(const ibv_ops_wr* wr, const ibv_ops_wr* bad, core::Event* e, uint32_t max_sge,
                      uint32_t max_wrs = 4096);

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_HOOKS_H_
