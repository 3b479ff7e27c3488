// interpose/wrap_internal: what the data-path wrappers' files share: the
// provider's saved ops per context (one list, wrap_ops.inc), the prologue
// every post entry point starts with, and the refusal of a call that
// reaches a wrapper through a dead object.  The files: wrap_context.cc
// (the saved ops: save, swap, restore), wrap_post.cc (posts),
// wrap_poll.cc (polls, the extended CQ), wrap_qp_ex.cc (the ibv_qp_ex
// shadows), wrap_mw.cc (memory windows), wrap_create.cc (the extended
// creates), domains.cc (device memory, parent domains).
//
// A context the program closed keeps (in its held-back block,
// interpose/destroyed.h) ops that lead to these wrappers; they find no
// saved pointers for it and refuse the call (use-after-destroy of the
// context) instead of calling the provider.
//
// May not: be included outside interpose/wrap*.cc and domains.cc, or take a
// lock or a map lookup on the data path (the saved ops are found by a
// lock-free scan: pass-through costs a few nanoseconds).
#ifndef RDMASAN_INTERPOSE_WRAP_INTERNAL_H_
#define RDMASAN_INTERPOSE_WRAP_INTERNAL_H_

#include <errno.h>
#include <infiniband/verbs.h>

#include <atomic>
#include <cstddef>
#include <memory>
#include <type_traits>

#include "checkers/use_after_destroy.h"
#include "core/event.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/off_options.h"

namespace rdmasan::interpose::wrap {

// The type of a wrapped op (wrap_ops.inc's table column).
#define RDMASAN_WRAPPED_OP_TYPE_Ops(field) decltype(ibv_context_ops::field)
#define RDMASAN_WRAPPED_OP_TYPE_Ext(field) decltype(verbs_context::field)

// The provider's ops of one wrapped context (null: the provider has none).
struct Saved {
  std::atomic<ibv_context*> ctx{nullptr};
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  RDMASAN_WRAPPED_OP_TYPE_##table(field) field = nullptr;
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
};

// The wrappers, each of its op's own type.
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  std::remove_pointer_t<RDMASAN_WRAPPED_OP_TYPE_##table(field)> wrapper;
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP

// The saved ops of a wrapped context, or null.  Lock-free.
Saved* Find(const ibv_context* ctx);

// verbs_get_ctx_op's rule: an extended op (at `offset` in verbs_context)
// exists if the provider's struct is big enough to hold it.
inline bool HasOp(const verbs_context* v, size_t offset) { return v && v->sz >= sizeof(*v) - offset; }

// The start of every post entry point (post_send, post_recv,
// post_srq_recv, post_srq_ops, bind_mw; the ibv_qp_ex batches start the
// same way over their own hooks), in one order:
//   1. the re-entry test (Outer): a nested call, the shim's or a
//      provider's own, goes straight to the provider once 2 and 3 passed;
//   2. the context's saved op (Real; Missing when there is none);
//   3. the refusal of a dead handle, asked only if MayBeDead (one load
//      while nothing was destroyed);
//   4. the fault point, on the way to the provider (checking on or off);
//   5. with checking on, the checks, under a held Reentry guard.
// With checking off the prologue adds one thread-local load to the
// pass-through: the guard is taken only where there are checks.
class PostEntry {
 public:
  explicit PostEntry(const ibv_context* ctx) : saved_(Find(ctx)) {}
  // With the context's saved ops found already (Find).
  explicit PostEntry(Saved* saved) : saved_(saved) {}
  bool MayBeDead() const { return !saved_ || __builtin_expect(AnyDestroyed(), 0); }
  template <typename Op>
  Op Real(Op Saved::*op) const {
    return saved_ ? saved_->*op : nullptr;
  }
  // A post through a context with no saved ops, or without the op.
  int Missing() const { return saved_ ? EOPNOTSUPP : ENODEV; }
  static bool Outer() { return Reentry::Depth() == 0; }

 private:
  Saved* saved_;
};

// Whether a post has nothing to do but reach the provider: nothing was
// destroyed (no handle to refuse), checking is off and the run decides
// nothing (no fault point, no async fault).  Asked first by the busiest
// wrappers (post_send, post_recv, poll_cq), whose full path then asks each
// again: plain loads of words that never change in a steady run (a word not
// known yet, checking's or the decider's, says no), and no call, so the
// wrapper's pass-through needs no frame of its own: it ends in a tail call
// of the provider's op.
inline bool OnlyForward() {
#if RDMASAN_OFF_OPTIONS_COMPILED_OUT
  return g_destroyed_count.load(std::memory_order_relaxed) == 0 &&
         g_checking.load(std::memory_order_relaxed) == 0;  // interpose/off_options.h
#endif
  return g_destroyed_count.load(std::memory_order_relaxed) == 0 &&
         g_checking.load(std::memory_order_relaxed) == 0 && g_decider_built.load(std::memory_order_acquire) &&
         g_decider.load(std::memory_order_relaxed) == nullptr;
}

// Hashes the payloads the NIC will read (buffer-modified-in-flight), if
// this post is among those the buffer_check option samples.
void HashSendPayloads(core::Event* e);

// Diagnostic counts of wrapped calls that were checked: a relaxed load and
// store, not a locked add (concurrent bumps may lose a count; nothing
// depends on exact totals under threads).  Pass-through counts nothing.
inline void Bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Each thread's event of one of the busiest kinds (posts, polls), reused:
// its vectors keep their storage, so a steady stream of posts and polls
// neither constructs nor frees one (a fresh event costs more than many of
// the checks).  `gone` is set by the holder's destructor: a verbs call
// from a later thread destructor gets a fresh event in `spare`.  Only that
// kind's calls use it, and each writes every field that kind's events
// carry; what a call writes only sometimes it resets itself.
inline core::Event& FreshEvent(core::Event& reused, bool gone, std::unique_ptr<core::Event>& spare,
                               core::EventKind kind) {
  core::Event& e = gone ? *(spare = std::make_unique<core::Event>()) : reused;
  e.kind = kind;
  return e;
}

// Shadows the ibv_wr_* setters of a provider's qp_ex (wrap_qp_ex.cc).
void HookQpEx(ibv_qp_ex* q);

// A wrapper reached for `obj` (of event kind `kind`, verb `verb`) whose
// context `ctx` has no saved pointers: if `obj` or `ctx` is dead (the
// program destroyed it or closed the context), the call is refused: one
// event (with checking on) naming the dead one, errno EINVAL, true.
// `ev_ret` is the event's return value; `fill` completes it.  Called from
// the wrapper's frame (pc, frame) for the stack.
bool RefuseDeadCall(const void* obj, const ibv_context* ctx, core::EventKind kind, checkers::UadVerb verb,
                    int32_t ev_ret, uintptr_t pc, uintptr_t frame,
                    void (*fill)(core::Event&, const void*) = nullptr, const void* arg = nullptr);

// Deletes the shim's hooks of a destroyed object (`del(p)`) only after
// kRetiredHooks later retirements: a thread still inside a hook when the
// object is destroyed (a program bug: a post racing the destroy) keeps
// valid books until it leaves, instead of using freed ones.
constexpr size_t kRetiredHooks = 256;
void RetireLater(void* p, void (*del)(void*));

// Whether `obj` was destroyed or `ctx` closed (nothing emitted).
bool IsDead(const void* obj, const ibv_context* ctx);

}  // namespace rdmasan::interpose::wrap

#define RDMASAN_WRAPPER_PC reinterpret_cast<uintptr_t>(__builtin_return_address(0))
#define RDMASAN_WRAPPER_FRAME reinterpret_cast<uintptr_t>(__builtin_frame_address(0))

#endif  // RDMASAN_INTERPOSE_WRAP_INTERNAL_H_
