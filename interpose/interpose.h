// interpose: the verbs calls of an unmodified program, seen from the inside.
//
// Two layers (docs/checks.md has the rules; the layering is described
// here).  (a) exports*.cc define every
// function an application can call from libibverbs (the default-version
// exports IBVERBS_1.0 .. 1.14); the dynamic linker binds the program's
// versioned references to these unversioned definitions when librdmasan.so
// is preloaded.  Each runs one prologue and its checks, then reaches the
// device through the dispatch table of the object's context (dispatch.h):
// softnic's functions for a softnic context, libibverbs' own exported
// functions for any other, found with dlvsym(RTLD_NEXT, name, version) or,
// when the program loaded libibverbs RTLD_LOCAL, in that library
// (loader.h); a loader's own dlsym/dlvsym of a verb on a libibverbs handle
// is handed the shim's definition (dl_hooks.cc).
// (b) the wrap*.cc files swap the inline data-path dispatch pointers of
// each context after it is opened, real and softnic alike
// (interpose/wrap_ops.inc lists them: ops.post_send, post_recv,
// post_srq_recv, poll_cq, req_notify_cq, the memory-window ops;
// verbs_context create_cq_ex, create_qp_ex, create_srq_ex, post_srq_ops,
// query_port, reg_dm_mr, alloc_parent_domain) and chain to the provider's
// value.
//
// May not: crash or change the result of a verb (wrappers return exactly
// what the provider returned, errno included; the one exception is a call
// on a handle the program already destroyed, which is refused with EINVAL
// before the provider could touch freed memory: interpose/destroyed.h),
// read more of a WR's scatter list than a valid num_sge names (hooks.h),
// throw across the C ABI,
// allocate on the data path, or take a global lock on the data path.
#ifndef RDMASAN_INTERPOSE_INTERPOSE_H_
#define RDMASAN_INTERPOSE_INTERPOSE_H_

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>

#include "core/compiler.h"
#include "interpose/loader.h"

namespace rdmasan::interpose {

// Swaps the data-path pointers of a context, real or softnic alike;
// idempotent.  The ibv_qp_ex setters of its QPs are shadowed too, on every
// provider (softnic's included: it refuses some batches before they reach
// post_send), so each ibv_wr_* batch is one event as the application built
// it.
void WrapContext(ibv_context* ctx);
// Drops the qp_ex shadow of a QP after it is destroyed (kept a while: a
// thread may still be inside one of its hooks).
void ForgetQp(ibv_qp* qp);
// Before a destroy of `qp` (dying) or after one that failed (not): an
// ibv_wr_* batch another thread has open on it ends first, a later one is
// refused at ibv_wr_start.
void QuiesceQpEx(ibv_qp* qp, bool dying);
// Forgets a context before it is closed: gives it back the provider's
// pointers (real and softnic alike).
void UnwrapContext(ibv_context* ctx);
// After a successful close whose block the shim holds (interpose/destroyed.h):
// the closed context's data-path ops lead to wrappers that refuse every
// call through it (use-after-destroy), as the exports refuse its handles.
void RefuseOnClosedContext(ibv_context* ctx);
// Likewise for a destroyed extended CQ whose block the shim holds: its
// start_poll and next_poll lead to the refusing wrappers.
void RefuseOnDestroyedCqEx(ibv_cq_ex* cq);
// Drops what the shim keeps for a CQ (its extended-poll hooks) before it is
// destroyed.
void ForgetCq(ibv_cq* cq);
// True if ctx's data path currently goes through the wrappers.
bool IsWrapped(const ibv_context* ctx);

// Whether the device list the program sees has softnic in it (softnic=on,
// or auto with no real device): then the rdma_cm device it opens is
// softnic's (softnic/cm.h).
bool SoftnicListed();

// Counters of checked data-path calls (for tests and diagnostics).
struct Counters {
  std::atomic<uint64_t> post_send{0}, post_recv{0}, post_srq_recv{0}, poll_cq{0}, req_notify_cq{0},
      create_cq_ex{0}, create_qp_ex{0}, query_port{0};
};
Counters& GetCounters();

// Re-entry guard: libibverbs calls its own exports through the PLT, which
// land in the shim again; only the outermost call is the application's.
class Reentry {
 public:
  RDMASAN_TLS_ACCESSOR Reentry() : outer_(depth_++ == 0) {}
  RDMASAN_TLS_ACCESSOR ~Reentry() { --depth_; }
  bool outer() const { return outer_; }
  // Calls of the shim in progress on this thread (0: the program's own).
  static RDMASAN_TLS_ACCESSOR int Depth() { return depth_; }

 private:
  static constinit thread_local int depth_;  // constinit: no TLS init call per access
  bool outer_;
};

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_INTERPOSE_H_
