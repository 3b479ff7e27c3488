// interpose/hooks: from verbs calls to Events to Findings, live.
//
// Assigns stable object ids (in creation order, never reused), copies each
// call into a core::Event, runs the checkers engine and hands the findings
// to the reporter.  Entry points call Emit() after the real call returns
// (or, for ibv_get_cq_event, also before it blocks).
//
// May not: change a verb's result, throw, or run when the shim is re-entered
// from libibverbs itself (the caller checks Reentry::outer()), or take a
// process-wide lock on the data path: the engine locks per domain of
// queues (checkers/engine.h).
#ifndef RDMASAN_INTERPOSE_HOOKS_H_
#define RDMASAN_INTERPOSE_HOOKS_H_

#include <infiniband/verbs.h>

#include <vector>

#include "checkers/state.h"
#include "core/event.h"

namespace rdmasan::interpose {

// True when checking is on (the event pipeline runs at all): the checking
// option, unless SetChecking() overrode it (benchmarks compare modes).
bool Checking();
void SetChecking(bool on);

// Object ids.  Assign() gives a new id to a created object; Id() looks one
// up (0 if unknown); Forget() drops it after destruction.
core::ObjId Assign(const void* obj);
core::ObjId Id(const void* obj);
void Forget(const void* obj);

// Fills tid (and seq when the run is traced), runs the checkers and reports.  With `retired`, also
// hands back the send WRs with payload hashes that the event retired.
void Emit(core::Event& e, std::vector<checkers::RetiredWr>* retired = nullptr);

// Events of object creation shared by both layers (exports and the
// verbs_context create_*_ex wrappers).  `obj` may be null (failed call).
void OnCreateCq(ibv_cq* cq, ibv_context* ctx, ibv_comp_channel* channel, core::StackId stack);
void OnCreateQp(ibv_qp* qp, ibv_pd* pd, const ibv_qp_cap& cap, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq,
                ibv_qp_type type, int sq_sig_all, core::StackId stack);

// In a forked child: let go of the parent's trace without touching it.
void AfterForkInChild();

// Copies of the verbs arguments.
// `ud`: the chain was posted to a UD QP (its WRs name AHs).
void CopySendChain(const ibv_send_wr* wr, const ibv_send_wr* bad, core::Event* e, bool ud);
void CopyRecvChain(const ibv_recv_wr* wr, const ibv_recv_wr* bad, core::Event* e);

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_HOOKS_H_
