// interpose/wrap_internal: what the data-path wrappers' files share
// (wrap.cc: contexts, posts, polls and the extended creates;
// wrap_qp_ex.cc: the ibv_qp_ex shadows; wrap_mw.cc: memory windows): the
// provider's saved function pointers per context, and the refusal of a
// call that reaches a wrapper through a dead object.
//
// A context the program closed keeps (in its held-back block,
// interpose/destroyed.h) ops that lead to these wrappers; they find no
// saved pointers for it and refuse the call (use-after-destroy of the
// context) instead of calling the provider.
//
// May not: be included outside interpose/wrap*.cc, or take a lock or a
// map lookup on the data path beyond what wrap.cc's header allows.
#ifndef RDMASAN_INTERPOSE_WRAP_INTERNAL_H_
#define RDMASAN_INTERPOSE_WRAP_INTERNAL_H_

#include <infiniband/verbs.h>

#include <atomic>

#include "checkers/use_after_destroy.h"
#include "core/event.h"
#include "core/stack.h"

namespace rdmasan::interpose::wrap {

// The provider's pointers of one wrapped context.
struct Saved {
  std::atomic<ibv_context*> ctx{nullptr};
  int (*post_send)(ibv_qp*, ibv_send_wr*, ibv_send_wr**) = nullptr;
  int (*post_recv)(ibv_qp*, ibv_recv_wr*, ibv_recv_wr**) = nullptr;
  int (*post_srq_recv)(ibv_srq*, ibv_recv_wr*, ibv_recv_wr**) = nullptr;
  int (*poll_cq)(ibv_cq*, int, ibv_wc*) = nullptr;
  int (*req_notify_cq)(ibv_cq*, int) = nullptr;
  ibv_cq_ex* (*create_cq_ex)(ibv_context*, ibv_cq_init_attr_ex*) = nullptr;
  ibv_qp* (*create_qp_ex)(ibv_context*, ibv_qp_init_attr_ex*) = nullptr;
  ibv_srq* (*create_srq_ex)(ibv_context*, ibv_srq_init_attr_ex*) = nullptr;
  int (*query_port)(ibv_context*, uint8_t, ibv_port_attr*, size_t) = nullptr;
  ibv_mw* (*alloc_mw)(ibv_pd*, ibv_mw_type) = nullptr;
  int (*dealloc_mw)(ibv_mw*) = nullptr;
  int (*bind_mw)(ibv_qp*, ibv_mw*, ibv_mw_bind*) = nullptr;
  int (*post_srq_ops)(ibv_srq*, ibv_ops_wr*, ibv_ops_wr**) = nullptr;
};

Saved* Find(const ibv_context* ctx);

// Hashes the payloads the NIC will read (buffer-modified-in-flight), if
// this post is among those the buffer_check option samples.
void HashSendPayloads(core::Event* e);

// Diagnostic counts of wrapped calls that were checked: a relaxed load and
// store, not a locked add (concurrent bumps may lose a count; nothing
// depends on exact totals under threads).  Pass-through counts nothing.
inline void Bump(std::atomic<uint64_t>& c) {
  c.store(c.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// The extended creates of QPs and SRQs (wrap_create.cc).
ibv_qp* CreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
ibv_srq* CreateSrqEx(ibv_context* ctx, ibv_srq_init_attr_ex* attr);

// Shadows the ibv_wr_* setters of a provider's qp_ex (wrap_qp_ex.cc).
void HookQpEx(ibv_qp_ex* q);

// The context ops of memory windows (wrap_mw.cc).
ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type);
int DeallocMw(ibv_mw* mw);
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);

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
