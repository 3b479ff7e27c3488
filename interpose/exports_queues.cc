// The exported verbs of completion channels, CQs, SRQs, QPs and AHs
// (interpose/exports_internal.h).  Every one that takes a handle refuses a
// dead one, or one whose device context was closed (use-after-destroy).
#include "interpose/exports_internal.h"
#include "interpose/thread_domains.h"
#include "interpose/watchdog.h"

// ------------------------------------------------------- channels and CQs --

RDMASAN_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  VERB_PROLOGUE(kCreateCompChannel, kByKind, context, nullptr, kParent, -1, nullptr);
  ibv_comp_channel* ch = Fails(re, Point::kCreateCompChannel, context)
                             ? nullptr
                             : ip::TableOf(context).create_comp_channel(context);
  if (ch && re.outer()) ip::Assign(ch);
  return ch;
}

RDMASAN_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  VERB_PROLOGUE(kDestroyCompChannel, kByKind, channel, channel->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroyCompChannel, channel, stack, re, &DispatchTable::destroy_comp_channel);
}

RDMASAN_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                     ibv_comp_channel* channel, int comp_vector) {
  VERB_PROLOGUE(kCreateCq, kByKind, channel, nullptr, kChannel, -1, nullptr);
  REFUSE_IF_DEAD(kCreateCq, kByKind, context, nullptr, kParent, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_cq* cq = Fails(re, Point::kCreateCq, context)
                   ? nullptr
                   : ip::TableOf(context).create_cq(context, cqe, cq_context, channel, comp_vector);
  if (Watch(re))
    ip::OnCreateCq(cq, context, channel, stack);
  else
    ip::ForgetDestroyed(cq);  // a new object at a destroyed one's address, with checking off too
  return cq;
}

RDMASAN_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  VERB_PROLOGUE(kResizeCq, kByKind, cq, cq->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  const int rc = ip::TableOf(cq->context).resize_cq(cq, cqe);
  const rdmasan::core::ObjId id = ip::Id(cq);
  if (Watch(re) && id) {
    Event e = Ev(EventKind::kResizeCq, stack);
    e.obj = id;
    e.cqe = rc == 0 ? cq->cqe : cqe;
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  VERB_PROLOGUE(kDestroyCq, kByKind, cq, cq->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  const bool cq_ex = ip::TableOf(cq->context).cq_is_cq_ex;
  bool held = false;
  int rc = Destroy(EventKind::kDestroyCq, cq, stack, re, &DispatchTable::destroy_cq, &held);
  if (!rc) {
    ip::ForgetCq(cq);
    ip::td::Unbind(cq);
  }
  // A softnic CQ is an ibv_cq_ex: its extended poll, read from the block the
  // shim now holds, leads to the wrapper that refuses it (checking off too).
  if (held && cq_ex) ip::RefuseOnDestroyedCqEx(reinterpret_cast<ibv_cq_ex*>(cq));
  return rc;
}

RDMASAN_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  VERB_PROLOGUE(kGetCqEvent, kByKind, channel, channel->context, kChannel, -1, -1);
  const auto stack = CALLER_STACK();
  const bool watch = Watch(re);
  if (watch) {
    Event w = Ev(EventKind::kWaitCqEvent, stack);
    w.obj = ip::Id(channel);
    Done(w, 0);
  }
  ip::FlushTraceBeforeBlocking();
  int rc = ip::TableOf(channel->context).get_cq_event(channel, cq, cq_context);
  if (watch) {
    Event e = Ev(EventKind::kGetCqEvent, stack);
    e.obj = rc == 0 ? ip::Id(*cq) : 0;
    e.channel = ip::Id(channel);
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  VERB_PROLOGUE(kAckCqEvents, kByKind, cq, cq->context, kObj, EINVAL);
  const auto stack = CALLER_STACK();
  ip::TableOf(cq->context).ack_cq_events(cq, nevents);
  if (Watch(re)) {
    Event e = Ev(EventKind::kAckCqEvents, stack);
    e.obj = ip::Id(cq);
    e.count = nevents;
    Done(e, 0);
  }
}

// ------------------------------------------------------------------- SRQ --

RDMASAN_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  VERB_PROLOGUE(kCreateSrq, kByKind, pd, pd->context, kParent, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_srq* srq =
      Fails(re, Point::kCreateSrq, pd) ? nullptr : ip::TableOf(pd->context).create_srq(pd, srq_init_attr);
  if (Watch(re)) {
    Event e = Ev(EventKind::kCreateSrq, stack);
    e.parent = ip::Id(pd);
    e.caps.max_recv_wr = srq_init_attr->attr.max_wr;
    e.caps.max_recv_sge = srq_init_attr->attr.max_sge;
    if (srq) e.obj = ip::Assign(srq, {0, srq_init_attr->attr.max_sge, 0, srq_init_attr->attr.max_wr});
    Done(e, srq ? 0 : -1);
  } else {
    ip::ForgetDestroyed(srq);  // a new object at a destroyed one's address, with checking off too
  }
  return srq;
}

RDMASAN_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  VERB_PROLOGUE(kModifySrq, kByKind, srq, srq->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(srq->context).modify_srq(srq, srq_attr, srq_attr_mask);
}

RDMASAN_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  VERB_PROLOGUE(kModifySrq, kQuerySrq, srq, srq->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(srq->context).query_srq(srq, srq_attr);
}

RDMASAN_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  VERB_PROLOGUE(kDestroySrq, kByKind, srq, srq->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroySrq, srq, stack, re, &DispatchTable::destroy_srq);
}

// -------------------------------------------------------------------- QP --

RDMASAN_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  VERB_PROLOGUE(kCreateQp, kByKind, pd, pd->context, kParent, -1, nullptr);
  REFUSE_IF_DEAD(kCreateQp, kByKind, qp_init_attr->send_cq, nullptr, kSendCq, -1, nullptr);
  REFUSE_IF_DEAD(kCreateQp, kByKind, qp_init_attr->recv_cq, nullptr, kRecvCq, -1, nullptr);
  REFUSE_IF_DEAD(kCreateQp, kByKind, qp_init_attr->srq, nullptr, kSrq, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_qp* qp =
      Fails(re, Point::kCreateQp, pd) ? nullptr : ip::TableOf(pd->context).create_qp(pd, qp_init_attr);
  if (Watch(re))
    ip::OnCreateQp(qp, pd, qp_init_attr->cap, qp_init_attr->send_cq, qp_init_attr->recv_cq, qp_init_attr->srq,
                   qp_init_attr->qp_type, qp_init_attr->sq_sig_all, stack);
  else
    ip::ForgetDestroyed(qp);  // a new object at a destroyed one's address, with checking off too
  if (qp && re.outer()) ip::NoteQp(qp, qp_init_attr->srq);  // for wc.error and the scheduler's streams
  return qp;
}

RDMASAN_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  VERB_PROLOGUE(kModifyQp, kByKind, qp, qp->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  int rc = ip::TableOf(qp->context).modify_qp(qp, attr, attr_mask);
  if (Watch(re)) {
    Event e = Ev(EventKind::kModifyQp, stack);
    e.obj = ip::Id(qp);
    e.attr_mask = attr_mask;
    e.qp_state = (attr_mask & IBV_QP_STATE) ? attr->qp_state : 0;
    e.access = (attr_mask & IBV_QP_ACCESS_FLAGS) ? attr->qp_access_flags : 0;
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  VERB_PROLOGUE(kModifyQp, kQueryQp, qp, qp->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(qp->context).query_qp(qp, attr, attr_mask, init_attr);
}

RDMASAN_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  VERB_PROLOGUE(kDestroyQp, kByKind, qp, qp->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  // Not a stale handle's fields (a destroyed QP was refused above).
  if (re.outer() && (ip::Id(qp) != 0 || !ip::Checking())) ip::ForgetQpNum(qp);
  if (re.outer()) ip::QuiesceQpEx(qp, /*dying=*/true);
  int rc = Destroy(EventKind::kDestroyQp, qp, stack, re, &DispatchTable::destroy_qp);
  if (!rc) {
    ip::ForgetQp(qp);
    ip::td::Unbind(qp);
  }
  if (rc && re.outer()) ip::QuiesceQpEx(qp, /*dying=*/false);
  return rc;
}

RDMASAN_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  VERB_PROLOGUE(kModifyQp, kQpToQpEx, qp, qp->context, kObj, -1, nullptr);
  return ip::TableOf(qp->context).qp_to_qp_ex(qp);
}

RDMASAN_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  VERB_PROLOGUE(kModifyQp, kQueryEce, qp, qp->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(qp->context).query_ece(qp, ece);
}

RDMASAN_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  VERB_PROLOGUE(kModifyQp, kSetEce, qp, qp->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(qp->context).set_ece(qp, ece);
}

RDMASAN_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  VERB_PROLOGUE(kModifyQp, kQueryQpDataInOrder, qp, qp->context, kObj, EINVAL, 0);
  return ip::TableOf(qp->context).query_qp_data_in_order(qp, op, flags);
}

RDMASAN_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  VERB_PROLOGUE(kModifyQp, kAttachMcast, qp, qp->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(qp->context).attach_mcast(qp, gid, lid);
}

RDMASAN_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  VERB_PROLOGUE(kModifyQp, kDetachMcast, qp, qp->context, kObj, EINVAL, EINVAL);
  return ip::TableOf(qp->context).detach_mcast(qp, gid, lid);
}

// -------------------------------------------------------------------- AH --

RDMASAN_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  VERB_PROLOGUE(kCreateAh, kByKind, pd, pd->context, kParent, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_ah* ah = Fails(re, Point::kCreateAh, pd) ? nullptr : ip::TableOf(pd->context).create_ah(pd, attr);
  return AfterCreate(re, stack, EventKind::kCreateAh, pd, ah);
}

RDMASAN_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  VERB_PROLOGUE(kDestroyAh, kByKind, ah, ah->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroyAh, ah, stack, re, &DispatchTable::destroy_ah);
}

RDMASAN_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                       ibv_ah_attr* ah_attr) {
  VERB_PROLOGUE(kOpenDevice, kInitAhFromWc, context, nullptr, kObj, EINVAL, EINVAL);
  return ip::TableOf(context).init_ah_from_wc(context, port_num, wc, grh, ah_attr);
}

RDMASAN_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  VERB_PROLOGUE(kCreateAh, kCreateAhFromWc, pd, pd->context, kParent, -1, nullptr);
  return ip::TableOf(pd->context).create_ah_from_wc(pd, wc, grh, port_num);
}

RDMASAN_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr, uint8_t eth_mac[6],
                                               uint16_t* vid) {
  VERB_PROLOGUE(kOpenDevice, kResolveEthL2, context, nullptr, kObj, EINVAL, EINVAL);
  return ip::TableOf(context).resolve_eth_l2_from_gid(context, attr, eth_mac, vid);
}
