// Memory windows: ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw, wrapped
// through the context's ops (interpose/wrap_internal.h).  A dead PD, MW or
// QP, or a closed context, is refused (use-after-destroy).
#include <algorithm>
#include <memory>

#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/ptr_table.h"
#include "interpose/wrap_internal.h"

namespace rdmasan::interpose::wrap {
namespace {

// A refused call names a dead PD as the parent of what it would make.
void ObjToParent(core::Event& e, const void*) {
  if (e.obj) e.parent = e.obj, e.obj = 0;
}
// A bind through a dead MW names it in the bind WR.
void DeadMwToBind(core::Event& e, const void*) {
  if (!e.obj) return;
  e.send_wrs.emplace_back().opcode = IBV_WR_BIND_MW;
  e.send_wrs[0].bind.mw = e.obj;
  e.obj = 0;
}

}  // namespace

// ------------------------------------------------------ memory windows --
// ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw are inline in verbs.h and
// dispatch through the context's ops: wrapped like the data path, for
// real providers and softnic alike.
ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  Saved* s = Find(pd->context);
  if ((!s || AnyDestroyed()) &&
      RefuseDeadCall(pd, pd->context, core::EventKind::kAllocMw, checkers::UadVerb::kByKind, -1,
                     RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME, ObjToParent))
    return nullptr;
  if (!s || !s->alloc_mw) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer()) return s->alloc_mw(pd, type);
  if (!Checking()) {
    ibv_mw* mw = s->alloc_mw(pd, type);
    ForgetDestroyed(mw);  // a new object at a destroyed one's address
    return mw;
  }
  const core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_mw* mw = s->alloc_mw(pd, type);
  const int err = errno;
  core::Event e;
  e.kind = core::EventKind::kAllocMw;
  e.stack = stack;
  e.parent = Id(pd);
  e.count = type;
  if (mw) {
    e.obj = Assign(mw);
    e.rkey = mw->rkey;
  }
  e.ret = mw ? 0 : -1;
  e.err = mw ? 0 : err;
  Emit(e);
  errno = err;
  return mw;
}

int DeallocMw(ibv_mw* mw) {
  Saved* s = Find(mw->context);
  if ((!s || AnyDestroyed()) &&
      RefuseDeadCall(mw, mw->context, core::EventKind::kDeallocMw, checkers::UadVerb::kByKind, EINVAL,
                     RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return EINVAL;
  if (!s || !s->dealloc_mw) return EOPNOTSUPP;
  Reentry re;
  // The window's block is held back while the provider frees it: a later
  // call on the handle is recognized (interpose/destroyed.h).
  HoldFrees hold(mw);
  if (!re.outer() || !Checking()) {
    const core::ObjId id = Id(mw);
    const int rc = s->dealloc_mw(mw);
    if (!rc && re.outer()) NoteDestroyed(mw, id), Forget(mw);
    return rc;
  }
  core::Event e;
  e.kind = core::EventKind::kDeallocMw;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  e.obj = Id(mw);
  e.rkey = mw->rkey;
  const int rc = s->dealloc_mw(mw);
  e.ret = rc;
  e.err = rc;
  Emit(e);
  if (!rc) NoteDestroyed(mw, e.obj), Forget(mw);
  return rc;
}

// ibv_bind_mw posts a bind WR to the QP's send queue: the post prologue
// (wrap_internal.h), and post_send's fault point for a chain of one (the
// provider is not called; ibv_bind_mw returns the errno).
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  const PostEntry entry(mw->context);
  if (entry.MayBeDead() &&
      (RefuseDeadCall(qp, qp->context, core::EventKind::kBindMw, checkers::UadVerb::kByKind, EINVAL,
                      RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME) ||
       RefuseDeadCall(mw, mw->context, core::EventKind::kBindMw, checkers::UadVerb::kByKind, EINVAL,
                      RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME, DeadMwToBind)))
    return EINVAL;
  const auto bind_mw = entry.Real(&Saved::bind_mw);
  if (!bind_mw) return EOPNOTSUPP;
  if (!entry.Outer()) return bind_mw(qp, mw, bind);
  uint32_t at = 0;
  const int injected = __builtin_expect(FaultActive(core::Point::kPostSend), 0)
                           ? PostFault(core::Point::kPostSend, Id(qp), qp->qp_num, 1, &at)
                           : 0;
  if (!Checking()) return injected ? injected : bind_mw(qp, mw, bind);
  const Reentry re;  // the checks: what they call is not the program's
  core::Event e;
  e.kind = core::EventKind::kBindMw;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  e.obj = Id(qp);
  const int rc = injected ? injected : bind_mw(qp, mw, bind);
  core::SendWr& w = e.send_wrs.emplace_back();
  w.wr_id = bind->wr_id;
  w.opcode = IBV_WR_BIND_MW;
  w.send_flags = bind->send_flags;
  w.rkey = mw->rkey;  // the key the verb gave the window
  const ibv_mw_bind_info& b = bind->bind_info;
  w.bind = {Id(mw), Id(b.mr), b.addr, b.length, b.mw_access_flags};
  e.ret = rc;
  e.err = rc;
  e.bad_index = rc ? 0 : UINT32_MAX;
  Emit(e);
  return rc;
}

}  // namespace rdmasan::interpose::wrap
