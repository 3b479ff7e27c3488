// softnic shared receive queues: create (basic, and XRC for xrc.cc), modify
// (the limit), query, destroy.
// The ring lives in the fabric, where requesters take its WQEs; posting to
// it is in recv.cc.
#include "softnic/softnic.h"

#include <errno.h>

#include <new>

#include "softnic/internal.h"
#include "softnic/owned.h"

namespace rdmasan::softnic {

ibv_srq* CreateSrqCommon(ibv_pd* pd, ibv_srq_init_attr* attr, SnXrcd* xrcd, SnCq* cq) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (attr->attr.max_wr < 1 || attr->attr.max_wr > kMaxQpWr || attr->attr.max_sge > kMaxSge ||
      attr->attr.srq_limit > attr->attr.max_wr) {
    errno = EINVAL;
    return nullptr;
  }
  auto srq = NewOwned<SnSrq>();
  if (!srq) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->srqs);
  if (slot == kNone || !InitRq(p->fab, &h->srqs[slot].rq, attr->attr.max_wr, attr->attr.max_sge)) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmSrq& s = h->srqs[slot];
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.gen++;
  s.ctx = Ctx(pd->context)->slot;
  s.pd = PdId(pd);
  s.srq_limit = attr->attr.srq_limit;
  s.armed_limit = attr->attr.srq_limit > 0;
  s.srqn = ((s.gen & ((1u << (24 - kSrqnGenShift)) - 1)) << kSrqnGenShift) | slot;
  s.srq_type = xrcd ? IBV_SRQT_XRC : IBV_SRQT_BASIC;
  s.tags_off = 0;
  s.max_tags = 0;
  s.tm_unexpected = 0;
  s.tm_seq = 0;
  s.cq = cq ? cq->slot : kNone;
  s.xrcd = xrcd ? xrcd->key : XrcdKey{};
  srq->xrcd = xrcd;
  srq->cq = cq;
  if (xrcd) xrcd->users.fetch_add(1);
  srq->slot = slot;
  srq->shm = &s;
  srq->srq.context = pd->context;
  srq->srq.srq_context = attr->srq_context;
  srq->srq.pd = pd;
  srq->srq.handle = slot;
  pthread_mutex_init(&srq->srq.mutex, nullptr);
  pthread_cond_init(&srq->srq.cond, nullptr);
  p->srqs[slot] = srq.get();
  return &srq.release()->srq;  // the program's handle now
}

ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  return SrqInDomain(CreateSrqCommon(pd, attr, nullptr, nullptr), pd);
}

int ModifySrq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnSrq* srq = Srq(ibsrq);
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // no resize
  FabricLock lock(p->fab);
  if (mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > srq->shm->rq.max_wr) return EINVAL;
    srq->shm->srq_limit = attr->srq_limit;
    srq->shm->armed_limit = attr->srq_limit > 0;
  }
  return 0;
}

int QuerySrq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  SnSrq* srq = Srq(ibsrq);
  attr->max_wr = srq->shm->rq.max_wr;
  attr->max_sge = srq->shm->rq.max_sge;
  attr->srq_limit = srq->shm->srq_limit;
  return 0;
}

int DestroySrq(ibv_srq* ibsrq) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnSrq* srq = Srq(ibsrq);
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    for (auto& q : h->qps)
      if (q.in_use && q.srq == srq->slot && q.proc == p->fab->self_proc()) return EBUSY;
    p->fab->Free(srq->shm->rq.ring_off);
    if (srq->shm->tags_off) p->fab->Free(srq->shm->tags_off);
    srq->shm->tags_off = 0;
    srq->shm->in_use = 0;
    srq->shm->srq_type = IBV_SRQT_BASIC;
    p->srqs[srq->slot] = nullptr;
  }
  if (srq->xrcd) srq->xrcd->users.fetch_sub(1);
  pthread_mutex_destroy(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  DetachFromDomain(ibsrq);
  delete srq;
  return 0;
}

}  // namespace rdmasan::softnic
