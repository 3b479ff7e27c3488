// The provider ops of each wrapped context (wrap_ops.inc): saved, swapped
// for the shim's wrappers, restored before the close, and pointed at the
// refusing wrappers in a closed context's held block.  Real and softnic
// contexts are wrapped alike.  Also what every wrapper file shares: the
// refusal of a dead handle and the retirement of a destroyed object's hooks.
//
// The saved ops are kept in a small fixed table keyed by context address:
// lookups are lock-free (a linear scan over atomics), so pass-through
// costs a few nanoseconds and never serializes threads; only writers lock.
#include <cstddef>
#include <mutex>
#include <utility>

#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/wrap_internal.h"

namespace rdmasan::interpose {

constinit thread_local int Reentry::depth_ = 0;

namespace wrap {
namespace {

// Constant-initialized (a context opened from another library's
// constructor is saved here before this library's initialisers run; a
// dynamic initializer would then wipe it).
constexpr int kSlots = 64;
constinit Saved g_saved[kSlots];
constinit std::mutex g_saved_mu;  // writers only

Counters g_counters;

// The member of `ctx` (its verbs_context `v`) that holds op `field`, or
// null for an extended op the provider's struct is too small to hold.
#define RDMASAN_OP_SLOT_Ops(field) (&ctx->ops.field)
#define RDMASAN_OP_SLOT_Ext(field) (wrap::HasOp(v, offsetof(verbs_context, field)) ? &v->field : nullptr)

}  // namespace

Saved* Find(const ibv_context* ctx) {
  for (int i = 0; i < kSlots; ++i)
    if (g_saved[i].ctx.load(std::memory_order_acquire) == ctx) return &g_saved[i];
  return nullptr;
}

void RetireLater(void* p, void (*del)(void*)) {
  static constinit std::mutex mu;
  static constinit std::pair<void*, void (*)(void*)> ring[kRetiredHooks] = {};
  static constinit size_t next = 0;
  std::pair<void*, void (*)(void*)> evicted;
  {
    std::lock_guard<std::mutex> l(mu);
    evicted = ring[next];
    ring[next] = {p, del};
    next = (next + 1) % kRetiredHooks;
  }
  if (evicted.first) evicted.second(evicted.first);
}

bool IsDead(const void* obj, const ibv_context* ctx) {
  // A record names only an address no live object has (a new object at a
  // recorded address drops the record, interpose/destroyed.h): the filter
  // alone answers for a live handle, with no lookup of its id.
  return DestroyedId(obj) || DestroyedId(ctx);
}

bool RefuseDeadCall(const void* obj, const ibv_context* ctx, core::EventKind kind, checkers::UadVerb verb,
                    int32_t ev_ret, uintptr_t pc, uintptr_t frame, void (*fill)(core::Event&, const void*),
                    const void* arg) {
  core::ObjId old = DestroyedId(obj);  // no id lookup: see IsDead
  const bool on_context = !old;
  if (!old) old = DestroyedId(ctx);
  if (!old) return false;
  if (Checking() && old != kUnknownObj) {
    core::Event e;
    e.kind = kind;
    (on_context ? e.parent : e.obj) = old;
    if (fill) fill(e, arg);
    e.attr_mask = static_cast<uint32_t>(verb);
    e.ret = ev_ret;
    e.err = EINVAL;
    e.stack = core::CaptureStackFrom(pc, frame);
    Emit(e);
  }
  errno = EINVAL;
  return true;
}

int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) {
  Saved* s = Find(ctx);
  Bump(g_counters.query_port);
  if (!s || !s->query_port) return EOPNOTSUPP;
  return s->query_port(ctx, port, attr, len);
}

}  // namespace wrap

Counters& GetCounters() { return wrap::g_counters; }

bool IsWrapped(const ibv_context* ctx) { return wrap::Find(ctx) != nullptr; }

void WrapContext(ibv_context* ctx) {
  if (!ctx) return;
  std::lock_guard<std::mutex> g(wrap::g_saved_mu);
  if (wrap::Find(ctx)) return;
  wrap::Saved* s = nullptr;
  for (auto& e : wrap::g_saved)
    if (!e.ctx.load(std::memory_order_relaxed)) {
      s = &e;
      break;
    }
  if (!s) return;  // more contexts than slots: leave this one unwrapped
  verbs_context* v = verbs_get_ctx(ctx);
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  {                                                          \
    auto* slot = RDMASAN_OP_SLOT_##table(field);             \
    s->field = slot ? *slot : nullptr;                       \
  }
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
  s->ctx.store(ctx, std::memory_order_release);
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  if (auto* slot = RDMASAN_OP_SLOT_##table(field); slot && s->field) *slot = wrap::wrapper;
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
}

void UnwrapContext(ibv_context* ctx) {
  std::lock_guard<std::mutex> g(wrap::g_saved_mu);
  wrap::Saved* s = wrap::Find(ctx);
  if (!s) return;
  verbs_context* v = verbs_get_ctx(ctx);
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  if (auto* slot = RDMASAN_OP_SLOT_##table(field); slot && s->field) *slot = s->field;
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
  s->ctx.store(nullptr, std::memory_order_release);
}

void RefuseOnClosedContext(ibv_context* ctx) {
  // The block is the shim's now (held back at the close): no provider
  // reads these pointers again, and no Saved slot names it.
  verbs_context* v = verbs_get_ctx(ctx);
#define RDMASAN_WRAPPED_OP(table, field, wrapper, on_closed) \
  if (auto* slot = RDMASAN_OP_SLOT_##table(field); on_closed && slot) *slot = wrap::wrapper;
#include "interpose/wrap_ops.inc"
#undef RDMASAN_WRAPPED_OP
}

}  // namespace rdmasan::interpose
