// interpose/thread_domains: the thread-domain-race check, live.
//
// A thread domain is a promise to the provider.  ibv_alloc_td(3): objects
// created under one "will disable internal locking designed to protect
// against concurrent access to that object from multiple user threads";
// ibv_alloc_parent_domain(3): a verb given a parent domain with a TD "may
// choose to share resources between objects using the same thread domain";
// ibv_wr_post(3): with a TD "it is up to the caller to ensure that only one
// thread can be within the critical region at a time".  So: one thread at a
// time inside the data-path verbs of a TD's objects.  Covered: QPs created
// with a parent domain that has a TD (ibv_post_send, ibv_post_recv, an
// ibv_wr_* batch from ibv_wr_start to ibv_wr_complete / ibv_wr_abort) and
// CQs created with one (ibv_create_cq_ex's parent_domain: ibv_poll_cq, an
// extended poll from ibv_start_poll to ibv_end_poll).
//
// Each TD has a gate: one atomic word naming the thread inside (its tid and
// the stack of its call), taken by a CAS on entry and cleared on exit, with
// a depth for the owner's nested entries (a poll inside its own batch).  A
// second thread that finds the gate held by another is the finding, reported
// at once with its own stack and the holder's: exact, whenever two calls
// really overlap, not a guess from timing.  The call then goes on as the
// program made it.
//
// Live only, not an engine check (checkers/): the finding is the overlap of
// two calls in time, which one event per call, recorded at the call, cannot
// show; enter and exit events on every data-path call would double the
// trace.  A replay of the trace does not report it (docs/checks.md).
//
// Cost: while no live object belongs to a TD, one relaxed load and a
// predictable branch per covered call (Active()); a covered call pays a
// table lookup, a CAS and two stores, a poll a stack capture too.
//
// May not: block, delay or change the program's call (a race is reported,
// the call goes on), take a lock on the data path but to report a race, or
// do anything with checking off (callers enter only with checking on).
#ifndef RDMASAN_INTERPOSE_THREAD_DOMAINS_H_
#define RDMASAN_INTERPOSE_THREAD_DOMAINS_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "core/event.h"

namespace rdmasan::interpose::td {

// What a thread is inside, for the report.
enum class Verb : uint8_t { kNone, kPostSend, kPostRecv, kWrBatch, kPollCq, kCqExPoll };

struct Gate;

// Off the data path (creation and destruction).
// A parent domain allocated with `td` (null: none) at `stack`.
void NoteParentDomain(const ibv_pd* parent, const ibv_td* td, core::StackId stack);
void ForgetParentDomain(const ibv_pd* parent);
// A QP or CQ created with `pd`: bound to its TD if pd is a parent domain
// with one; Unbind when it is destroyed.
void Bind(const void* obj, const ibv_pd* pd);
void Unbind(const void* obj);

// Live objects bound to a TD.
extern std::atomic<uint32_t> g_bound;
inline bool Active() { return __builtin_expect(g_bound.load(std::memory_order_relaxed) != 0, 0); }

// The gate of a bound object, or null.  Lock-free.
Gate* GateOf(const void* obj);

// Enters `g` for a call on `obj` (its id) at `stack` (0: captured here from
// the wrapper's frame `pc`/`frame`, if given).  Reports a race if another
// thread is inside.  Leave ends this thread's entry (nothing if this thread
// is not inside: its entry was the race).
void Enter(Gate* g, Verb v, core::ObjId obj, core::StackId stack, uintptr_t pc = 0, uintptr_t frame = 0);
void Leave(Gate* g);

// One covered call, entered for the scope of a wrapper.
class Hold {
 public:
  Hold(const void* obj, Verb v, core::StackId stack, uintptr_t pc = 0, uintptr_t frame = 0) {
    if (Active()) Take(obj, v, stack, pc, frame);
  }
  ~Hold() {
    if (gate_) Leave(gate_);
  }
  Hold(const Hold&) = delete;
  Hold& operator=(const Hold&) = delete;

 private:
  void Take(const void* obj, Verb v, core::StackId stack, uintptr_t pc, uintptr_t frame);
  Gate* gate_ = nullptr;
};

}  // namespace rdmasan::interpose::td

#endif  // RDMASAN_INTERPOSE_THREAD_DOMAINS_H_
