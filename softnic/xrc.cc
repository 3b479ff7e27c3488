// softnic XRC (eXtended Reliable Connected transport): XRC domains
// (ibv_open_xrcd, ibv_close_xrcd), XRC SRQs (ibv_create_srq_ex,
// ibv_get_srq_num), opening a shared XRC target QP (ibv_open_qp), and the
// look-up a requester makes of the SRQ a message names.  These are the
// verbs_context ops softnic sets when it opens a context; XRC QPs
// themselves are made by qp.cc and carried by the RC data path
// (datapath.cc).
//
// A domain is known in the fabric by the inode it was opened on (any
// process of the user opening the same file joins it, as the kernel's
// per-device inode table gives) or, without a file, by a fabric-unique
// number.  Each process keeps one xrcds entry per domain it holds open.
//
// What is not done: a target QP lives as long as its creator's handle
// (the kernel keeps it while any process has it open); ibv_open_qp handles
// may modify and query it, and destroying one only closes the handle.
//
// May not: trust a domain, SRQ number or slot read from shared memory
// without checking it against the tables' bounds and generations.
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>

#include <mutex>
#include <new>

#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

SnXrcd* Xrcd(ibv_xrcd* x) { return reinterpret_cast<SnXrcd*>(x); }

// The live entry of `key` held by any process, or kNone (fabric lock held).
uint32_t FindDomainLocked(Fabric* f, const XrcdKey& key, bool own_only) {
  ShmHeader* h = f->hdr();
  for (uint32_t i = 0; i < kMaxXrcds; ++i) {
    const ShmXrcd& x = h->xrcds[i];
    if (!x.in_use || !(x.key == key)) continue;
    if (own_only ? x.proc == f->self_proc() : f->ProcAlive(x.proc)) return i;
  }
  return kNone;
}

ibv_xrcd* OpenXrcd(ibv_context* ctx, ibv_xrcd_init_attr* attr) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (attr->comp_mask >= IBV_XRCD_INIT_ATTR_RESERVED) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_XRCD_INIT_ATTR_FD) || !(attr->comp_mask & IBV_XRCD_INIT_ATTR_OFLAGS)) {
    errno = EINVAL;
    return nullptr;
  }
  XrcdKey key{};
  if (attr->fd != -1) {
    struct stat st;
    if (fstat(attr->fd, &st) != 0) {
      errno = EBADF;
      return nullptr;
    }
    key = {static_cast<uint64_t>(st.st_dev), static_cast<uint64_t>(st.st_ino)};
  }
  auto* x = new (std::nothrow) SnXrcd();
  if (!x) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  if (attr->fd != -1) {
    // The kernel's answers: no domain on the inode and no O_CREAT is
    // EAGAIN; a domain there and O_EXCL is EINVAL.
    const bool exists = FindDomainLocked(p->fab, key, false) != kNone;
    if (!exists && !(attr->oflags & O_CREAT)) {
      delete x;
      errno = EAGAIN;
      return nullptr;
    }
    if (exists && (attr->oflags & O_EXCL)) {
      delete x;
      errno = EINVAL;
      return nullptr;
    }
  } else {
    key = {0, ++h->next_xrcd};
  }
  uint32_t slot = FindDomainLocked(p->fab, key, true);
  if (slot == kNone) {
    slot = FreeSlot(h->xrcds);
    if (slot == kNone) {
      delete x;
      errno = ENOMEM;
      return nullptr;
    }
    ShmXrcd& e = h->xrcds[slot];
    e.in_use = 1;
    e.proc = p->fab->self_proc();
    e.refs = 0;
    e.key = key;
  }
  ++h->xrcds[slot].refs;
  x->xrcd.context = ctx;
  x->entry = slot;
  x->key = key;
  return &x->xrcd;
}

int CloseXrcd(ibv_xrcd* ibx) {
  Process* p = GetProcess();
  if (!p) return ENODEV;
  SnXrcd* x = Xrcd(ibx);
  // The kernel refuses to close a handle that QPs or SRQs were made with.
  if (x->users.load() != 0) return EBUSY;
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmXrcd& e = p->fab->hdr()->xrcds[x->entry];
    if (e.in_use && e.proc == p->fab->self_proc() && e.key == x->key && e.refs > 0 && --e.refs == 0)
      e.in_use = 0;
  }
  delete x;
  return 0;
}

ibv_srq* CreateSrqEx(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  constexpr uint32_t kKnown = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_XRCD |
                              IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  const uint32_t mask = attr->comp_mask;
  if (mask & ~kKnown) {
    errno = EINVAL;
    return nullptr;
  }
  const ibv_srq_type type = (mask & IBV_SRQ_INIT_ATTR_TYPE) ? attr->srq_type : IBV_SRQT_BASIC;
  if (type == IBV_SRQT_TM || (mask & IBV_SRQ_INIT_ATTR_TM)) return CreateTmSrq(ctx, attr);
  if (type != IBV_SRQT_BASIC && type != IBV_SRQT_XRC) {
    errno = EINVAL;
    return nullptr;
  }
  if (!(mask & IBV_SRQ_INIT_ATTR_PD) || !attr->pd || attr->pd->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq_init_attr basic{};
  basic.srq_context = attr->srq_context;
  basic.attr = attr->attr;
  if (type == IBV_SRQT_BASIC) return CreateSrqCommon(attr->pd, &basic, nullptr, nullptr);
  if (!(mask & IBV_SRQ_INIT_ATTR_XRCD) || !(mask & IBV_SRQ_INIT_ATTR_CQ) || !attr->xrcd || !attr->cq ||
      attr->xrcd->context != ctx || attr->cq->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  return CreateSrqCommon(attr->pd, &basic, Xrcd(attr->xrcd), Cq(attr->cq));
}

int GetSrqNum(ibv_srq* ibsrq, uint32_t* srq_num) {
  // Every SRQ has a number (as mlx5 answers); only an XRC SRQ's is of use
  // to a peer.
  *srq_num = Srq(ibsrq)->shm->srqn;
  return 0;
}

ibv_qp* OpenQp(ibv_context* ctx, ibv_qp_open_attr* attr) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  constexpr uint32_t kNeed = IBV_QP_OPEN_ATTR_NUM | IBV_QP_OPEN_ATTR_XRCD | IBV_QP_OPEN_ATTR_TYPE;
  if (attr->comp_mask >= IBV_QP_OPEN_ATTR_RESERVED || (attr->comp_mask & kNeed) != kNeed || !attr->xrcd ||
      attr->xrcd->context != ctx || attr->qp_type != IBV_QPT_XRC_RECV) {
    errno = EINVAL;
    return nullptr;
  }
  SnXrcd* x = Xrcd(attr->xrcd);
  auto* qp = new (std::nothrow) SnQp();
  if (!qp) {
    errno = ENOMEM;
    return nullptr;
  }
  try {
    qp->sq.resize(1);
  } catch (...) {
    delete qp;
    errno = ENOMEM;
    return nullptr;
  }
  FabricLock lock(p->fab);
  const uint32_t slot = attr->qp_num & (kMaxQps - 1);
  ShmQp& s = p->fab->hdr()->qps[slot];
  // Only a target QP of the same domain opens (the kernel looks in the
  // domain's own list of target QPs, and answers EINVAL when it is not
  // there).
  if (!s.in_use || s.qpn != attr->qp_num || s.type != IBV_QPT_XRC_RECV || !(s.xrcd == x->key)) {
    delete qp;
    errno = EINVAL;
    return nullptr;
  }
  qp->slot = slot;
  qp->shm = &s;
  qp->send_cq = qp->recv_cq = nullptr;
  qp->srq = nullptr;
  qp->xrcd = x;
  qp->opened = true;
  qp->max_send_wr = qp->max_send_sge = qp->max_inline = qp->max_recv_wr = qp->max_recv_sge = 0;
  x->users.fetch_add(1);
  ibv_qp& q = qp->qpx.qp_base;
  q.context = ctx;
  q.qp_context = (attr->comp_mask & IBV_QP_OPEN_ATTR_CONTEXT) ? attr->qp_context : nullptr;
  q.handle = slot;
  q.qp_num = s.qpn;
  q.state = static_cast<ibv_qp_state>(s.state.load());
  q.qp_type = IBV_QPT_XRC_RECV;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  InstallQpExOps(qp);
  return &q;
}

}  // namespace

uint32_t XrcSrqFor(Fabric* f, const ShmQp& tgt, uint32_t srqn) {
  const uint32_t slot = srqn & (kMaxSrqs - 1);
  const ShmSrq& s = f->hdr()->srqs[slot];
  if (!s.in_use || s.srqn != srqn || s.srq_type != IBV_SRQT_XRC || !(s.xrcd == tgt.xrcd)) return kNone;
  return slot;
}

void InstallXrcOps(verbs_context* v) {
  v->open_xrcd = OpenXrcd;
  v->close_xrcd = CloseXrcd;
  v->create_srq_ex = CreateSrqEx;
  v->post_srq_ops = PostSrqOps;
  v->get_srq_num = GetSrqNum;
  v->open_qp = OpenQp;
}

}  // namespace rdmasan::softnic
