// The extended creates of QPs and SRQs, wrapped through the verbs_context
// ops (interpose/wrap_internal.h): one create event each, as
// ibv_create_qp / ibv_create_srq give; a closed context or a dead PD is
// refused (use-after-destroy).
#include <errno.h>

#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/wrap_internal.h"

namespace rdmasan::interpose::wrap {

ibv_qp* CreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  Saved* s = Find(ctx);
  Bump(GetCounters().create_qp_ex);
  if (!s && wrap::RefuseDeadCall(nullptr, ctx, core::EventKind::kCreateQp, checkers::UadVerb::kCreateQpEx, -1,
                                 RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return nullptr;
  if (!s || !s->create_qp_ex) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer()) return s->create_qp_ex(ctx, attr);
  const int err = FaultActive(core::Point::kCreateQp) ? CallFault(core::Point::kCreateQp, Id(attr->pd)) : 0;
  if (!Checking()) {
    ibv_qp* qp = err ? (errno = err, nullptr) : s->create_qp_ex(ctx, attr);
    ForgetDestroyed(qp);            // a new object at a destroyed one's address
    if (qp) NoteQp(qp, attr->srq);  // for wc.error and the scheduler's streams
    return qp;
  }
  core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_qp* qp = err ? (errno = err, nullptr) : s->create_qp_ex(ctx, attr);
  OnCreateQp(qp, attr->pd, attr->cap, attr->send_cq, attr->recv_cq, attr->srq, attr->qp_type,
             attr->sq_sig_all, stack);
  if (qp) NoteQp(qp, attr->srq);  // after OnCreateQp: with its id
  // A QP created with send_ops_flags is an ibv_qp_ex (ibv_qp_to_qp_ex gives
  // the same address: qp_base is its first member).
  if (qp && (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)) HookQpEx(reinterpret_cast<ibv_qp_ex*>(qp));
  return qp;
}

// ibv_create_srq_ex (inline: a basic SRQ with only PD and TYPE goes to
// the exported ibv_create_srq instead).  An XRC SRQ's receives complete on
// its own CQ: the event names it in recv_cq.
ibv_srq* CreateSrqEx(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  Saved* s = Find(ctx);
  if (!s && wrap::RefuseDeadCall(nullptr, ctx, core::EventKind::kCreateSrq, checkers::UadVerb::kCreateSrqEx,
                                 -1, RDMASAN_WRAPPER_PC, RDMASAN_WRAPPER_FRAME))
    return nullptr;
  if (!s || !s->create_srq_ex) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer()) return s->create_srq_ex(ctx, attr);
  const bool has_pd = attr->comp_mask & IBV_SRQ_INIT_ATTR_PD;
  const int err = FaultActive(core::Point::kCreateSrq)
                      ? CallFault(core::Point::kCreateSrq, Id(has_pd ? attr->pd : nullptr))
                      : 0;
  if (!Checking()) {
    ibv_srq* srq = err ? (errno = err, nullptr) : s->create_srq_ex(ctx, attr);
    ForgetDestroyed(srq);  // a new object at a destroyed one's address
    return srq;
  }
  const core::StackId stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_srq* srq = err ? (errno = err, nullptr) : s->create_srq_ex(ctx, attr);
  const int saved = errno;
  const bool typed = (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE) && (attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ);
  const bool xrc = typed && attr->srq_type == IBV_SRQT_XRC;
  const bool tm = typed && attr->srq_type == IBV_SRQT_TM;
  core::Event e;
  e.kind = core::EventKind::kCreateSrq;
  e.stack = stack;
  e.parent = Id(has_pd ? attr->pd : nullptr);
  e.recv_cq = xrc ? Id(attr->cq) : 0;
  // A TM SRQ's tag operations complete on its CQ; its receives, on the
  // receive CQs of its QPs (as a basic SRQ's).
  e.qp_type = tm ? static_cast<uint32_t>(IBV_SRQT_TM) : 0u;
  e.send_cq = tm ? Id(attr->cq) : 0;
  e.caps.max_recv_wr = attr->attr.max_wr;
  e.caps.max_recv_sge = attr->attr.max_sge;
  if (srq) e.obj = Assign(srq, {0, attr->attr.max_sge, 0, attr->attr.max_wr});
  e.ret = srq ? 0 : -1;
  e.err = srq ? 0 : saved;
  Emit(e);
  errno = saved;
  return srq;
}

}  // namespace rdmasan::interpose::wrap
