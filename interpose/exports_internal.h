// interpose/exports_internal: what the exported-symbol layer's files
// share (exports.cc: devices, queries, object-free helpers; exports_mr.cc:
// PDs and MRs; exports_queues.cc: channels, CQs, SRQs, QPs, AHs): the one
// prologue of an exported verb, the event helpers, and the refusal of a
// call on a dead handle (use-after-destroy; checkers/use_after_destroy.h
// has the table of verbs).  Every verb reaches its device through the
// context's dispatch table (interpose/dispatch.h), softnic's or the real one.
//
// Each exported verb that takes a handle starts with VERB_PROLOGUE on it
// (and on its device context): a handle the program destroyed, or one whose
// context it closed, is refused with EINVAL (NULL and errno EINVAL for a
// verb that returns a pointer) before the provider or softnic could read
// freed memory, with checking off too; with checking on, one event names
// the dead object for the check.
//
// May not: be included outside interpose/exports*.cc (it defines macros
// and a using-directive), or call a provider with a handle it knows dead.
#ifndef RDMASAN_INTERPOSE_EXPORTS_INTERNAL_H_
#define RDMASAN_INTERPOSE_EXPORTS_INTERNAL_H_

#include <dlfcn.h>
#include <errno.h>
#include <infiniband/verbs.h>

#include "checkers/use_after_destroy.h"
#include "core/options.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/dispatch.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/memory.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

using rdmasan::interpose::DispatchTable;
using rdmasan::interpose::Real;
using rdmasan::interpose::Reentry;
namespace ip = rdmasan::interpose;
using rdmasan::checkers::UadVerb;
using rdmasan::core::Event;
using rdmasan::core::EventKind;

// Captures the application's call site; only valid directly in an exported
// function's body.
#define CALLER_STACK() RDMASAN_CAPTURE_CALLER_STACK()
// Registrations and deregistrations are off the data path, and their stacks are what a
// suppression of a registration cache names (registered=ucs_rcache_*):
// walked with the unwind tables, through libraries without frame pointers.
#define REG_STACK() RDMASAN_CAPTURE_CALLER_FULL_STACK()

#define RDMASAN_EXPORT extern "C" __attribute__((visibility("default")))

// The real function of a verb that reaches no device (string helpers, rate
// conversions, fork control, the device list); `real` is null while
// libibverbs is not loaded (looked up again once the process loaded
// something: loader.h).  A verb that reaches a device goes through its
// dispatch table instead.
#define REAL(name, ver)                              \
  static constinit ip::RealSym real_sym(#name, ver); \
  const auto real = reinterpret_cast<decltype(&::name)>(real_sym.Get())

namespace rdmasan::interpose::exported {

// Whether this call should become an Event.
inline bool Watch(const Reentry& re) { return re.outer() && ip::Checking(); }

inline Event Ev(EventKind kind, core::StackId stack) {
  Event e;
  e.kind = kind;
  e.stack = stack;
  return e;
}

// Whether an injected fault (faults=, schedule=) fails this create, alloc
// or registration call under `parent`: errno is set, the caller returns
// NULL as the provider would.  Never inside libibverbs' own calls.
inline bool Fails(const Reentry& re, core::Point p, const void* parent) {
  if (__builtin_expect(!ip::FaultActive(p), 1) || !re.outer()) return false;
  const int err = ip::CallFault(p, ip::Id(parent));
  if (!err) return false;
  errno = err;
  return true;
}

// Emits the event of a verb that returns an int (0 or an error code).
inline int Done(Event e, int rc) {
  e.ret = rc;
  e.err = rc ? (rc > 0 ? rc : errno) : 0;
  ip::Emit(e);
  return rc;
}

// Where a refused call's event names the dead handle.
enum class Names { kObj, kParent, kSendCq, kRecvCq, kSrq, kChannel };

// The id a dead handle had (kUnknownObj if the shim never gave it one), or
// 0 for a live or unknown one.  A handle with a live id costs one lookup.
inline core::ObjId DeadId(const void* h) { return !h || ip::Id(h) ? 0 : ip::DestroyedId(h); }

// A call of `verb` (event kind `kind`) on `handle`: refused if the program
// destroyed the handle, or closed `ctx` (the handle's device context; null
// when the handle is the context or none applies).  One event (with
// checking on) names the dead object where `where` says (a closed context:
// as the parent); errno is EINVAL.  False, with nothing done, for a live
// handle and inside libibverbs' own calls.
inline bool RefuseDead(EventKind kind, UadVerb verb, const void* handle, const ibv_context* ctx,
                       core::StackId stack, const Reentry& re, Names where = Names::kObj,
                       int32_t ret = EINVAL) {
  if (!re.outer()) return false;
  core::ObjId old = DeadId(handle);
  if (!old && ctx) {
    old = DeadId(ctx);
    where = Names::kParent;
  }
  if (!old) return false;
  if (ip::Checking() && old != ip::kUnknownObj) {
    Event e = Ev(kind, stack);
    switch (where) {
      case Names::kObj:
        e.obj = old;
        break;
      case Names::kParent:
        e.parent = old;
        break;
      case Names::kSendCq:
        e.send_cq = old;
        break;
      case Names::kRecvCq:
        e.recv_cq = old;
        break;
      case Names::kSrq:
        e.srq = old;
        break;
      case Names::kChannel:
        e.channel = old;
        break;
    }
    e.attr_mask = static_cast<uint32_t>(verb);
    e.ret = ret;
    e.err = EINVAL;
    ip::Emit(e);
  }
  errno = EINVAL;
  return true;
}

// The prologue of an exported verb on `handle` (of device context `ctx`,
// or nullptr): if either is dead, the call is refused (RefuseDead, with
// EventKind::kind, UadVerb::verb, the handle named as Names::where and the
// event's ret `ev_ret`) and the verb returns what follows.  `ctx` (an
// expression that reads the handle) is evaluated only for a handle not
// known dead: a destroyed handle's memory may be freed (under a sanitizer
// the shim cannot hold its block back).  Until the program destroys
// something it costs one load; after, a lookup of each handle.  Needs `re`
// (a Reentry) in scope.
#define REFUSE_IF_DEAD(kind, verb, handle, ctx, where, ev_ret, ...)                                        \
  if (ip::AnyDestroyed() && re.outer() && (DeadId(handle) || DeadId(ctx)) &&                               \
      RefuseDead(EventKind::kind, UadVerb::verb, handle, DeadId(handle) ? nullptr : (ctx), CALLER_STACK(), \
                 re, Names::where, ev_ret))                                                                \
  return __VA_ARGS__

// The prologue every exported verb on a handle starts with, in this order:
// the re-entry guard `re`; the refusal of the handle (REFUSE_IF_DEAD's
// arguments), then of each other handle it takes (one REFUSE_IF_DEAD
// each); then, for a verb that emits an event, the caller's stack
// (`const auto stack = CALLER_STACK();`, REG_STACK() for the
// registrations); then, for a create, alloc or registration, its fault
// point (Fails); then the device, through TableOf(context).  A verb on a
// device or on no handle starts with `Reentry re;` alone.
#define VERB_PROLOGUE(kind, verb, handle, ctx, where, ev_ret, ...) \
  Reentry re;                                                      \
  REFUSE_IF_DEAD(kind, verb, handle, ctx, where, ev_ret, __VA_ARGS__)

// Runs a provider's destroy of `obj` (id `id`): the heap block the provider
// frees that holds the handle is held back, and on success the handle is
// remembered as destroyed (interpose/destroyed.h), with checking off too.
// True in *held when the block is the shim's now.
// `kept`: the device keeps the object's memory (softnic's QPs, softnic.h).
template <typename Call>
int DestroyHolding(const void* obj, core::ObjId id, Call call, bool* held = nullptr, bool kept = false) {
  if (held) *held = false;
  // An object libibverbs destroys inside its own call is not the program's.
  if (!id && Reentry::Depth() > 1) return call();
  ip::HoldFrees hold(obj);
  const int rc = call();
  const bool h = !rc && ip::NoteDestroyed(obj, id, kept);
  if (held) *held = h;
  return rc;
}

// The destroy verbs, after their prologue: one Event (the object's id,
// taken before it goes), the device's destroy (`entry` of the table of the
// object's context), then the shim forgets the object.
template <typename Obj, typename Entry>
int Destroy(EventKind kind, Obj* obj, core::StackId stack, const Reentry& re, Entry DispatchTable::*entry,
            bool* held = nullptr) {
  Event e = Ev(kind, stack);
  e.obj = ip::Id(obj);
  const DispatchTable& table = ip::TableOf(obj->context);
  int rc = DestroyHolding(
      obj, e.obj, [&] { return (table.*entry)(obj); }, held,
      /*kept=*/table.keeps_destroyed_qps && kind == EventKind::kDestroyQp);
  if (Watch(re)) Done(e, rc);
  if (!rc) ip::Forget(obj);
  return rc;
}

// The event of a simple create verb: the new object's id under its parent.
template <typename T>
T* AfterCreate(const Reentry& re, core::StackId stack, EventKind kind, const void* parent, T* obj) {
  if (!Watch(re)) {
    ip::ForgetDestroyed(obj);  // a new object at a destroyed one's address, with checking off too
    return obj;
  }
  Event e = Ev(kind, stack);
  e.parent = ip::Id(parent);
  if (obj) e.obj = ip::Assign(obj);
  Done(e, obj ? 0 : -1);
  return obj;
}

}  // namespace rdmasan::interpose::exported

using namespace rdmasan::interpose::exported;  // NOLINT: the exports' shared vocabulary
using rdmasan::core::Point;

#endif  // RDMASAN_INTERPOSE_EXPORTS_INTERNAL_H_
