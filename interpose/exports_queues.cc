// The exported verbs of completion channels, CQs, SRQs, QPs and AHs
// (interpose/exports_internal.h).  Every one that takes a handle refuses a
// dead one, or one whose device context was closed (use-after-destroy).
#include "interpose/exports_internal.h"
#include "interpose/watchdog.h"

// ------------------------------------------------------- channels and CQs --

RDMASAN_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  REAL(ibv_create_comp_channel, "IBVERBS_1.0");
  Reentry re;
  if (RefuseDestroyed(EventKind::kCreateCompChannel, context, CALLER_STACK(), re, /*as_parent=*/true))
    return nullptr;
  ibv_comp_channel* ch = Fails(re, Point::kCreateCompChannel, context) ? nullptr
                         : IsSn(context)                               ? sn::CreateCompChannel(context)
                         : real                                        ? real(context)
                                                                       : (errno = ENOSYS, nullptr);
  if (ch && re.outer()) ip::Assign(ch);
  return ch;
}

RDMASAN_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  REAL(ibv_destroy_comp_channel, "IBVERBS_1.0");
  Reentry re;
  const auto stack = CALLER_STACK();
  if (RefuseDead(EventKind::kDestroyCompChannel, UadVerb::kByKind, channel, channel->context, stack, re))
    return EINVAL;
  return Destroy(EventKind::kDestroyCompChannel, channel, stack, re, sn::DestroyCompChannel, real);
}

RDMASAN_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                     ibv_comp_channel* channel, int comp_vector) {
  REAL(ibv_create_cq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kCreateCq, kByKind, channel, nullptr, kChannel, -1, nullptr);
  const auto stack = CALLER_STACK();
  if (RefuseDestroyed(EventKind::kCreateCq, context, stack, re, /*as_parent=*/true)) return nullptr;
  ibv_cq* cq = Fails(re, Point::kCreateCq, context) ? nullptr
               : IsSn(context) ? sn::CreateCq(context, cqe, cq_context, channel, comp_vector)
               : real          ? real(context, cqe, cq_context, channel, comp_vector)
                               : (errno = ENOSYS, nullptr);
  if (Watch(re)) ip::OnCreateCq(cq, context, channel, stack);
  return cq;
}

RDMASAN_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  REAL(ibv_resize_cq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kResizeCq, kByKind, cq, cq->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  if (RefuseDestroyed(EventKind::kResizeCq, cq, stack, re)) return EINVAL;
  const int rc = IsSn(cq->context) ? sn::ResizeCq(cq, cqe) : real ? real(cq, cqe) : ENOSYS;
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
  REAL(ibv_destroy_cq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kDestroyCq, kByKind, cq, cq->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  const bool sn = IsSn(cq->context);
  bool held = false;
  int rc = Destroy(EventKind::kDestroyCq, cq, stack, re, sn::DestroyCq, real, &held);
  if (!rc) ip::ForgetCq(cq);
  // A softnic CQ is an ibv_cq_ex: its extended poll, read from the block the
  // shim now holds, leads to the wrapper that refuses it (checking off too).
  if (held && sn) ip::RefuseOnDestroyedCqEx(reinterpret_cast<ibv_cq_ex*>(cq));
  return rc;
}

RDMASAN_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  REAL(ibv_get_cq_event, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kGetCqEvent, kByKind, channel, channel->context, kChannel, -1, -1);
  const auto stack = CALLER_STACK();
  const bool watch = Watch(re);
  if (watch) {
    Event w = Ev(EventKind::kWaitCqEvent, stack);
    w.obj = ip::Id(channel);
    Done(w, 0);
  }
  ip::FlushTraceBeforeBlocking();
  int rc = IsSn(channel->context) ? sn::GetCqEvent(channel, cq, cq_context)
           : real                 ? real(channel, cq, cq_context)
                                  : -1;
  if (watch) {
    Event e = Ev(EventKind::kGetCqEvent, stack);
    e.obj = rc == 0 ? ip::Id(*cq) : 0;
    e.channel = ip::Id(channel);
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  REAL(ibv_ack_cq_events, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kAckCqEvents, kByKind, cq, cq->context, kObj, EINVAL);
  const auto stack = CALLER_STACK();
  if (IsSn(cq->context))
    sn::AckCqEvents(cq, nevents);
  else if (real)
    real(cq, nevents);
  if (Watch(re)) {
    Event e = Ev(EventKind::kAckCqEvents, stack);
    e.obj = ip::Id(cq);
    e.count = nevents;
    Done(e, 0);
  }
}

// ------------------------------------------------------------------- SRQ --

RDMASAN_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  REAL(ibv_create_srq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kCreateSrq, kByKind, pd, pd->context, kParent, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_srq* srq = Fails(re, Point::kCreateSrq, pd) ? nullptr
                 : IsSn(pd->context)              ? sn::CreateSrq(pd, srq_init_attr)
                 : real                           ? real(pd, srq_init_attr)
                                                  : (errno = ENOSYS, nullptr);
  if (Watch(re)) {
    Event e = Ev(EventKind::kCreateSrq, stack);
    e.parent = ip::Id(pd);
    e.caps.max_recv_wr = srq_init_attr->attr.max_wr;
    e.caps.max_recv_sge = srq_init_attr->attr.max_sge;
    if (srq) e.obj = ip::Assign(srq, {0, srq_init_attr->attr.max_sge, 0, srq_init_attr->attr.max_wr});
    Done(e, srq ? 0 : -1);
  }
  return srq;
}

RDMASAN_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  REAL(ibv_modify_srq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kModifySrq, kByKind, srq, srq->context, kObj, EINVAL, EINVAL);
  if (IsSn(srq->context)) return sn::ModifySrq(srq, srq_attr, srq_attr_mask);
  return real ? real(srq, srq_attr, srq_attr_mask) : ENOSYS;
}

RDMASAN_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  REAL(ibv_query_srq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kModifySrq, kQuerySrq, srq, srq->context, kObj, EINVAL, EINVAL);
  if (IsSn(srq->context)) return sn::QuerySrq(srq, srq_attr);
  return real ? real(srq, srq_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  REAL(ibv_destroy_srq, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kDestroySrq, kByKind, srq, srq->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroySrq, srq, stack, re, sn::DestroySrq, real);
}

// -------------------------------------------------------------------- QP --

RDMASAN_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  REAL(ibv_create_qp, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kCreateQp, kByKind, pd, pd->context, kParent, -1, nullptr);
  REFUSE_IF_DEAD(kCreateQp, kByKind, qp_init_attr->send_cq, nullptr, kSendCq, -1, nullptr);
  REFUSE_IF_DEAD(kCreateQp, kByKind, qp_init_attr->recv_cq, nullptr, kRecvCq, -1, nullptr);
  REFUSE_IF_DEAD(kCreateQp, kByKind, qp_init_attr->srq, nullptr, kSrq, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_qp* qp = Fails(re, Point::kCreateQp, pd) ? nullptr
               : IsSn(pd->context)             ? sn::CreateQp(pd, qp_init_attr)
               : real                          ? real(pd, qp_init_attr)
                                               : (errno = ENOSYS, nullptr);
  if (Watch(re))
    ip::OnCreateQp(qp, pd, qp_init_attr->cap, qp_init_attr->send_cq, qp_init_attr->recv_cq, qp_init_attr->srq,
                   qp_init_attr->qp_type, qp_init_attr->sq_sig_all, stack);
  if (qp && re.outer()) ip::NoteQp(qp, qp_init_attr->srq);  // for wc.error and the scheduler's streams
  return qp;
}

RDMASAN_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  REAL(ibv_modify_qp, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kByKind, qp, qp->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  int rc = IsSn(qp->context) ? sn::ModifyQp(qp, attr, attr_mask) : real ? real(qp, attr, attr_mask) : ENOSYS;
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
  REAL(ibv_query_qp, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kQueryQp, qp, qp->context, kObj, EINVAL, EINVAL);
  if (IsSn(qp->context)) return sn::QueryQp(qp, attr, attr_mask, init_attr);
  return real ? real(qp, attr, attr_mask, init_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  REAL(ibv_destroy_qp, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kDestroyQp, kByKind, qp, qp->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  // Not a stale handle's fields (a destroyed QP is refused below).
  if (re.outer() && (ip::Id(qp) != 0 || !ip::Checking())) ip::ForgetQpNum(qp);
  if (re.outer()) ip::QuiesceQpEx(qp, /*dying=*/true);
  int rc = Destroy(EventKind::kDestroyQp, qp, stack, re, sn::DestroyQp, real);
  if (!rc) ip::ForgetQp(qp);
  if (rc && re.outer()) ip::QuiesceQpEx(qp, /*dying=*/false);
  return rc;
}

RDMASAN_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  REAL(ibv_qp_to_qp_ex, "IBVERBS_1.6");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kQpToQpEx, qp, qp->context, kObj, -1, nullptr);
  if (IsSn(qp->context)) return sn::QpToQpEx(qp);
  return real ? real(qp) : nullptr;
}

RDMASAN_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  REAL(ibv_query_ece, "IBVERBS_1.10");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kQueryEce, qp, qp->context, kObj, EINVAL, EINVAL);
  if (IsSn(qp->context) || !real) return EOPNOTSUPP;
  return real(qp, ece);
}

RDMASAN_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  REAL(ibv_set_ece, "IBVERBS_1.10");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kSetEce, qp, qp->context, kObj, EINVAL, EINVAL);
  if (IsSn(qp->context) || !real) return EOPNOTSUPP;
  return real(qp, ece);
}

RDMASAN_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  REAL(ibv_query_qp_data_in_order, "IBVERBS_1.14");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kQueryQpDataInOrder, qp, qp->context, kObj, EINVAL, 0);
  if (IsSn(qp->context)) return 0;  // no in-order guarantee is promised
  return real ? real(qp, op, flags) : 0;
}

RDMASAN_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  REAL(ibv_attach_mcast, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kAttachMcast, qp, qp->context, kObj, EINVAL, EINVAL);
  if (IsSn(qp->context)) return sn::AttachMcast(qp, gid, lid);
  return real ? real(qp, gid, lid) : ENOSYS;
}

RDMASAN_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  REAL(ibv_detach_mcast, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kModifyQp, kDetachMcast, qp, qp->context, kObj, EINVAL, EINVAL);
  if (IsSn(qp->context)) return sn::DetachMcast(qp, gid, lid);
  return real ? real(qp, gid, lid) : ENOSYS;
}

// -------------------------------------------------------------------- AH --

RDMASAN_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  REAL(ibv_create_ah, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kCreateAh, kByKind, pd, pd->context, kParent, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_ah* ah = Fails(re, Point::kCreateAh, pd) ? nullptr
               : IsSn(pd->context)             ? sn::CreateAh(pd, attr)
               : real                          ? real(pd, attr)
                                               : (errno = ENOSYS, nullptr);
  return AfterCreate(re, stack, EventKind::kCreateAh, pd, ah);
}

RDMASAN_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  REAL(ibv_destroy_ah, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kDestroyAh, kByKind, ah, ah->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroyAh, ah, stack, re, sn::DestroyAh, real);
}

RDMASAN_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                       ibv_ah_attr* ah_attr) {
  REAL(ibv_init_ah_from_wc, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kInitAhFromWc, context, nullptr, kObj, EINVAL, EINVAL);
  if (!IsSn(context)) return real ? real(context, port_num, wc, grh, ah_attr) : ENOSYS;
  return sn::InitAhFromWc(context, port_num, wc, grh, ah_attr);
}

RDMASAN_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  REAL(ibv_create_ah_from_wc, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kCreateAh, kCreateAhFromWc, pd, pd->context, kParent, -1, nullptr);
  if (!IsSn(pd->context)) {
    if (!real) return errno = ENOSYS, nullptr;
    return real(pd, wc, grh, port_num);
  }
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr)) return errno = EINVAL, nullptr;
  return sn::CreateAh(pd, &attr);
}

RDMASAN_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr, uint8_t eth_mac[6],
                                               uint16_t* vid) {
  REAL(ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kResolveEthL2, context, nullptr, kObj, EINVAL, EINVAL);
  if (IsSn(context)) {
    if (!sn::PortIsEthernet()) return EINVAL;  // InfiniBand link layer: no Ethernet L2
    // softnic's RoCE port is the host's loopback: every peer's MAC is
    // 00:00:00:00:00:00, with no VLAN.
    memset(eth_mac, 0, 6);
    if (vid) *vid = 0xffff;
    return attr && attr->is_global ? 0 : EINVAL;
  }
  return real ? real(context, attr, eth_mac, vid) : ENOSYS;
}
