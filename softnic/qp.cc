// softnic queue pairs: create, modify (the state machine), query, destroy,
// and the move to ERR that flushes the receive side.
//
// A QP's attributes and receive queue live in the fabric, where requesters
// of other processes find them by QPN; its send queue is private (SnQp::sq)
// and run by datapath.cc.
#include "softnic/softnic.h"

#include <errno.h>
#include <sched.h>

#include <algorithm>
#include <cstring>
#include <mutex>
#include <new>

#include "softnic/chaos.h"
#include "softnic/internal.h"
#include "softnic/owned.h"

namespace rdmasan::softnic {

bool InitRq(Fabric* f, ShmRq* rq, uint32_t max_wr, uint32_t max_sge) {
  rq->max_wr = max_wr;
  rq->max_sge = max_sge ? max_sge : 1;
  rq->stride = RqStride(rq->max_sge);
  rq->nslots = RingSlots(max_wr);
  ResetRq(rq);
  rq->ring_off = f->Alloc(uint64_t(rq->nslots) * rq->stride);
  return rq->ring_off != 0;
}

namespace {

// Allowed attribute masks per transition (IB spec 11.2.4.2), for RC/UC/UD.
struct Transition {
  int required[3];  // UD, UC, RC
  int optional[3];
};

int TypeIndex(uint32_t type) { return type == IBV_QPT_UD ? 0 : type == IBV_QPT_UC ? 1 : 2; }

// A raw packet QP (the kernel's table): RESET -> INIT needs the port (INIT
// -> INIT may change it), and RTR and RTS take no path attributes.
bool RawTransitionAllowed(ibv_qp_state cur, ibv_qp_state next, int mask) {
  mask &= ~IBV_QP_CUR_STATE;
  switch (cur) {
    case IBV_QPS_RESET:
      return next == IBV_QPS_INIT && mask == IBV_QP_PORT;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) return (mask & ~IBV_QP_PORT) == 0;
      return next == IBV_QPS_RTR && mask == 0;
    case IBV_QPS_RTR:
      return next == IBV_QPS_RTS && mask == 0;
    case IBV_QPS_RTS:
      return next == IBV_QPS_RTS && mask == 0;
    default:
      return false;
  }
}

bool TransitionAllowed(ibv_qp_state cur, ibv_qp_state next, uint32_t type, int mask) {
  mask &= ~IBV_QP_STATE;
  const int t = TypeIndex(type);
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return (mask & ~IBV_QP_CUR_STATE) == 0 || true;
  if (type == IBV_QPT_RAW_PACKET) return RawTransitionAllowed(cur, next, mask);
  Transition tr{};
  bool ok = true;
  switch (cur) {
    case IBV_QPS_RESET:
      if (next != IBV_QPS_INIT) return false;
      tr.required[0] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      tr.required[1] = tr.required[2] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      break;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) {
        tr.optional[0] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
        tr.optional[1] = tr.optional[2] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      } else if (next == IBV_QPS_RTR) {
        tr.required[1] = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        tr.required[2] = tr.required[1] | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        tr.optional[0] = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
        tr.optional[1] = tr.optional[2] = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
      } else {
        ok = false;
      }
      break;
    case IBV_QPS_RTR:
      if (next != IBV_QPS_RTS) return false;
      tr.required[0] = tr.required[1] = IBV_QP_SQ_PSN;
      tr.required[2] =
          IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
      tr.optional[0] = IBV_QP_CUR_STATE | IBV_QP_QKEY;
      tr.optional[1] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
      tr.optional[2] = tr.optional[1] | IBV_QP_MIN_RNR_TIMER;
      break;
    case IBV_QPS_RTS:
    case IBV_QPS_SQD:
    case IBV_QPS_SQE:
      if (next != IBV_QPS_RTS && next != IBV_QPS_SQD) return false;
      if (cur == IBV_QPS_SQE && next != IBV_QPS_RTS) return false;
      tr.optional[0] =
          IBV_QP_CUR_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN | IBV_QP_PKEY_INDEX | IBV_QP_EN_SQD_ASYNC_NOTIFY;
      tr.optional[1] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                       IBV_QP_AV | IBV_QP_PKEY_INDEX | IBV_QP_EN_SQD_ASYNC_NOTIFY;
      tr.optional[2] = tr.optional[1] | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC |
                       IBV_QP_PATH_MTU;
      break;
    default:
      ok = false;
  }
  if (!ok) return false;
  // XRC (the kernel's table): an initiator is an RC requester that needs no
  // responder attributes at RTR; a target is an RC responder that needs
  // only TIMEOUT and SQ_PSN at RTS.
  if (type == IBV_QPT_XRC_SEND && cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
    tr.optional[2] |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    tr.required[2] = tr.required[1];
  } else if (type == IBV_QPT_XRC_RECV && cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
    tr.optional[2] |= IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    tr.required[2] = IBV_QP_TIMEOUT | IBV_QP_SQ_PSN;
  }
  if ((mask & tr.required[t]) != tr.required[t]) return false;
  if (mask & ~(tr.required[t] | tr.optional[t])) return false;
  return true;
}

ibv_qp* CreateQpCommon(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr_ex* a) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  const uint32_t type = a->qp_type;
  if (type != IBV_QPT_RC && type != IBV_QPT_UC && type != IBV_QPT_UD && !IsXrc(type) &&
      type != IBV_QPT_RAW_PACKET) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // A raw packet QP: the RoCE port, CAP_NET_RAW (raw.cc).  An RSS QP (a
  // raw QP with a hash and an indirection table, wq.cc) has no queues or
  // CQs of its own: its frames land in its table's WQs.
  const bool rss = a->comp_mask & (IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE);
  if (int e = type == IBV_QPT_RAW_PACKET ? RawQpAllowed() : 0) {
    errno = e;
    return nullptr;
  }
  if (int e = rss ? CheckRss(ctx, a) : 0) {
    errno = e;
    return nullptr;
  }
  // What each type has: an XRC target (XRC_RECV) is made in a domain and
  // has neither PD, CQs nor queues of its own (its messages land in the
  // domain's SRQs); an XRC initiator (XRC_SEND) has only a send queue.
  ibv_cq* scq = a->send_cq;
  ibv_cq* rcq = a->recv_cq;
  ibv_srq* srq = a->srq;
  SnXrcd* xrcd = nullptr;
  ibv_qp_cap& cap = a->cap;
  if (type == IBV_QPT_XRC_RECV) {
    if (!(a->comp_mask & IBV_QP_INIT_ATTR_XRCD) || !a->xrcd || a->xrcd->context != ctx) {
      errno = EINVAL;
      return nullptr;
    }
    xrcd = reinterpret_cast<SnXrcd*>(a->xrcd);
    pd = nullptr;
    scq = rcq = nullptr;
    srq = nullptr;
    cap = {};
  } else if (rss) {
    if (!pd || pd->context != ctx) {
      errno = EINVAL;
      return nullptr;
    }
    scq = rcq = nullptr;
    srq = nullptr;
    cap = {};
  } else {
    if (type == IBV_QPT_XRC_SEND) rcq = scq, srq = nullptr;
    if (!pd || !scq || !rcq || scq->context != ctx || rcq->context != ctx || pd->context != ctx ||
        (srq && srq->context != ctx)) {
      errno = EINVAL;
      return nullptr;
    }
    if (type == IBV_QPT_XRC_SEND) cap.max_recv_wr = cap.max_recv_sge = 0;
  }
  if (cap.max_send_wr > kMaxQpWr || cap.max_send_sge > kMaxSge || cap.max_inline_data > kMaxInline ||
      (!srq && (cap.max_recv_wr > kMaxQpWr || cap.max_recv_sge > kMaxSge))) {
    errno = EINVAL;
    return nullptr;
  }
  if (srq) cap.max_recv_wr = cap.max_recv_sge = 0;
  auto qp = NewOwned<SnQp>();
  if (!qp) {
    errno = ENOMEM;
    return nullptr;
  }
  try {
    qp->sq.resize(RingSlots(cap.max_send_wr));
    // As many as InitRq's ring.
    if (!srq && !IsXrc(type) && !rss) qp->rq_shadow.resize(RingSlots(cap.max_recv_wr));
  } catch (...) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->qps, 1);
  if (slot == kNone || !InitRq(p->fab, &h->qps[slot].rq, srq ? 0 : cap.max_recv_wr, cap.max_recv_sge)) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmQp& s = h->qps[slot];
  s.gen = (s.gen % 4095) + 1;
  if (((s.gen << 12) | slot) == kMcastQpn) s.gen = 1;  // 0xFFFFFF is multicast's
  s.qpn = (s.gen << 12) | slot;
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.ctx = Ctx(ctx)->slot;
  s.pd = pd ? PdId(pd) : kNone;
  s.type = type;
  s.state.store(IBV_QPS_RESET);
  s.send_cq = scq ? Cq(scq)->slot : kNone;
  s.recv_cq =
      rcq && (type == IBV_QPT_RC || type == IBV_QPT_UC || type == IBV_QPT_UD || type == IBV_QPT_RAW_PACKET)
          ? Cq(rcq)->slot
          : kNone;
  s.rss = kNone;
  s.srq = srq ? Srq(srq)->slot : kNone;
  s.xrcd = xrcd ? xrcd->key : XrcdKey{};
  s.sq_sig_all = a->sq_sig_all;
  s.access = 0;
  s.qkey = 0;
  s.dest_qpn = 0;
  s.min_rnr_timer = 0;
  s.rnr_retry = 0;
  s.timeout = 0;
  s.retry_cnt = 0;
  s.max_rd_atomic = s.max_dest_rd_atomic = 0;
  s.path_mtu = IBV_MTU_1024;
  s.remote_gone = 0;
  qp->slot = slot;
  qp->shm = &s;
  if (rss) {
    if (int e = SetupRssLocked(p, qp.get(), a)) {
      p->fab->Free(s.rq.ring_off);
      s.rq.ring_off = 0;
      s.in_use = 0;
      s.qpn = 0;
      errno = e;
      return nullptr;
    }
  }
  qp->send_cq = scq ? Cq(scq) : nullptr;
  qp->recv_cq = s.recv_cq != kNone ? Cq(rcq) : nullptr;
  qp->srq = srq ? Srq(srq) : nullptr;
  qp->xrcd = xrcd;
  if (xrcd) xrcd->users.fetch_add(1);
  qp->max_send_wr = cap.max_send_wr;
  qp->max_send_sge = cap.max_send_sge;
  qp->max_inline = cap.max_inline_data;
  qp->max_recv_wr = cap.max_recv_wr;
  qp->max_recv_sge = cap.max_recv_sge;
  ibv_qp& q = qp->qpx.qp_base;
  q.context = ctx;
  q.qp_context = a->qp_context;
  q.pd = pd;
  q.send_cq = scq;
  q.recv_cq = type == IBV_QPT_XRC_SEND ? nullptr : rcq;
  q.srq = srq;
  q.handle = slot;
  q.qp_num = s.qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = a->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  InstallQpExOps(qp.get());
  static std::atomic<uint32_t> created{0};
  qp->ordinal = created.fetch_add(1, std::memory_order_relaxed) + 1;
  p->qps[slot] = qp.release();  // the program's handle now
  p->qp_end = std::max(p->qp_end, slot + 1);
  return &q;
}

}  // namespace

ibv_qp* VCreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_XRCD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
                             IBV_QP_INIT_ATTR_SEND_OPS_FLAGS | IBV_QP_INIT_ATTR_RX_HASH |
                             IBV_QP_INIT_ATTR_IND_TABLE;
  if (attr->comp_mask & ~kMask) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // create_flags: none is supported (rxe's set is empty too), so a mask
  // that names the field with 0 in it is a plain QP, and any flag
  // (BLOCK_SELF_MCAST_LB, SCATTER_FCS, CVLAN_STRIPPING, ...) is EOPNOTSUPP,
  // as rxe answers.
  if ((attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS) && attr->create_flags) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // An XRC target needs its domain, every other type its PD.
  if (attr->qp_type != IBV_QPT_XRC_RECV && !(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    constexpr uint64_t kOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
                              IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                              IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
                              IBV_QP_EX_WITH_BIND_MW | IBV_QP_EX_WITH_LOCAL_INV |
                              IBV_QP_EX_WITH_SEND_WITH_INV | IBV_QP_EX_WITH_ATOMIC_WRITE;
    if (attr->send_ops_flags & ~kOps) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
  }
  ibv_pd* pd = (attr->comp_mask & IBV_QP_INIT_ATTR_PD) ? attr->pd : nullptr;
  return pd ? QpInDomain(CreateQpCommon(ctx, pd, attr), pd) : CreateQpCommon(ctx, nullptr, attr);
}

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = QpInDomain(CreateQpCommon(pd->context, pd, &ex), pd);
  if (qp) attr->cap = ex.cap;
  return qp;
}

ibv_qp_ex* QpToQpEx(ibv_qp* qp) { return &Qp(qp)->qpx; }

int ModifyQp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnQp* qp = Qp(ibqp);
  std::lock_guard<QueueMutex> sq(qp->sq_mu);
  bool flush = false;
  {
    FabricLock lock(p->fab);
    ShmQp& s = *qp->shm;
    auto cur = static_cast<ibv_qp_state>(s.state.load());
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
    auto next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if (!TransitionAllowed(cur, next, s.type, mask)) return EINVAL;
    if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
      return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16) return EINVAL;
    if (mask & IBV_QP_AV) {
      ibv_ah_attr av = attr->ah_attr;  // port 0: the QP's port
      if (av.port_num == 0) av.port_num = 1;
      if (CheckAddressVector(av)) return EINVAL;  // no GRH on RoCE, an empty source GID
      qp->av = av;
    }
    if (mask & IBV_QP_ACCESS_FLAGS) s.access = attr->qp_access_flags;
    if (mask & IBV_QP_QKEY) s.qkey = attr->qkey;
    if (mask & IBV_QP_DEST_QPN) s.dest_qpn = attr->dest_qp_num;
    if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = attr->min_rnr_timer;
    if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = attr->rnr_retry;
    if (mask & IBV_QP_TIMEOUT) s.timeout = attr->timeout;
    if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = attr->retry_cnt;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = attr->max_rd_atomic;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & IBV_QP_PATH_MTU) s.path_mtu = attr->path_mtu;
    if (mask & IBV_QP_RQ_PSN) s.rq_psn = attr->rq_psn;
    if (mask & IBV_QP_SQ_PSN) s.sq_psn = attr->sq_psn;
    if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = attr->pkey_index;
    if (mask & IBV_QP_PORT) s.port_num = attr->port_num;
    if (mask & IBV_QP_STATE) {
      if (next == IBV_QPS_RESET) {
        // Completions of the QP not yet polled go, as a provider's
        // modify_qp to RESET cleans them from its CQs (mlx5_cq_clean).  A
        // CQ in the middle of an ibv_start_poll of this thread keeps them.
        SnCq* cqs[2] = {qp->send_cq, qp->recv_cq != qp->send_cq ? qp->recv_cq : nullptr};
        for (SnCq* c : cqs)
          if (c && c->mu.try_lock()) {
            CleanCqLocked(p, c, qp->slot, s.qpn, qp->srq);
            c->mu.unlock();
          }
        ResetRq(&s.rq);
        qp->rq_outstanding.Clear();
        qp->sq_retired = qp->sq_exec = qp->sq_posted = 0;
        qp->place = {};
        qp->order = {};
        qp->sq_retire_to.store(0);
        s.remote_gone = 0;
      }
      if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
        MoveToErrorLocked(p, &s);
        flush = true;
      }
      if (next == IBV_QPS_RTR && cur != IBV_QPS_RTR) p->fab->AllowPeerOf(s);  // before a peer can reach us
      s.state.store(next);
      ibqp->state = next;
    }
  }
  if (flush) FlushSq(p, qp);
  return 0;
}

int QueryQp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  SnQp* qp = Qp(ibqp);
  const ShmQp& s = *qp->shm;
  memset(attr, 0, sizeof(*attr));
  attr->qp_state = static_cast<ibv_qp_state>(s.state.load());
  attr->cur_qp_state = attr->qp_state;
  attr->path_mtu = static_cast<ibv_mtu>(s.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = s.qkey;
  attr->rq_psn = s.rq_psn;
  attr->sq_psn = s.sq_psn;
  attr->dest_qp_num = s.dest_qpn;
  attr->qp_access_flags = s.access;
  attr->cap.max_send_wr = qp->max_send_wr;
  attr->cap.max_recv_wr = qp->max_recv_wr;
  attr->cap.max_send_sge = qp->max_send_sge;
  attr->cap.max_recv_sge = qp->max_recv_sge;
  attr->cap.max_inline_data = qp->max_inline;
  attr->pkey_index = s.pkey_index;
  attr->port_num = s.port_num;
  attr->max_rd_atomic = s.max_rd_atomic;
  attr->max_dest_rd_atomic = s.max_dest_rd_atomic;
  attr->min_rnr_timer = s.min_rnr_timer;
  attr->timeout = s.timeout;
  attr->retry_cnt = s.retry_cnt;
  attr->rnr_retry = s.rnr_retry;
  attr->ah_attr = qp->av;
  if (init) {
    memset(init, 0, sizeof(*init));
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = attr->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = s.sq_sig_all;
  }
  return 0;
}

namespace {

// The poller lock of a CQ the QP completes on, taken while the QP leaves
// the process's table: a poller of that CQ (cq.cc PollOne reads
// p->qps[] under it) either finished with the QP or finds it gone.  Tried
// for a while only: the thread destroying the QP may itself be inside an
// ibv_start_poll batch of that CQ, which holds the lock until end_poll.
std::unique_lock<QueueMutex> PollerLock(SnCq* cq) {
  if (!cq) return {};
  std::unique_lock<QueueMutex> l(cq->mu, std::defer_lock);
  for (int i = 0; i < 20000 && !l.try_lock(); ++i) sched_yield();
  return l;
}

// A destroyed QP's memory is kept until kRetiredQps later destroys: a
// thread still posting to it (a program bug) finds a QP in RESET and is
// refused, in every build (under a sanitizer the shim cannot hold the
// block back for it).  The send ring goes at once (no post reads it past
// the RESET check, made under sq_mu).
constexpr size_t kRetiredQps = 256;
void Retire(SnQp* qp) {
  static constinit std::mutex mu;
  static constinit SnQp* ring[kRetiredQps] = {};
  static constinit size_t next = 0;
  SnQp* evicted;
  {
    std::lock_guard<std::mutex> l(mu);
    evicted = ring[next];
    ring[next] = qp;
    next = (next + 1) % kRetiredQps;
  }
  delete evicted;
}

}  // namespace

int DestroyQp(ibv_qp* ibqp) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnQp* qp = Qp(ibqp);
  if (qp->xrcd) qp->xrcd->users.fetch_sub(1);
  if (qp->opened) {
    // A handle of ibv_open_qp: the QP stays its creator's.
    pthread_mutex_destroy(&ibqp->mutex);
    pthread_cond_destroy(&ibqp->cond);
    delete qp;
    return 0;
  }
  {
    std::lock_guard<std::mutex> g(p->mu);
    // A post in progress on another thread (a program bug) ends before the
    // QP goes; one that comes later finds it in RESET, its fabric slot no
    // longer its own, and is refused before it reads the send ring (the
    // QP's memory is retired, not freed: Retire).
    std::lock_guard<QueueMutex> sq(qp->sq_mu);
    std::unique_lock<QueueMutex> scq = PollerLock(qp->send_cq);
    std::unique_lock<QueueMutex> rcq = PollerLock(qp->recv_cq != qp->send_cq ? qp->recv_cq : nullptr);
    FabricLock lock(p->fab);
    // The QP's completions not yet polled go with it, as a provider's
    // destroy_qp cleans them from its CQs (mlx5_destroy_qp: __mlx5_cq_clean
    // of both CQs): a ULP frees the receive buffers of a QP it destroyed and
    // polls on (libfabric's rxm crashed reading the flush of a receive of a
    // connection it had shut down).  A CQ another thread keeps in the middle
    // of an ibv_start_poll keeps them.
    if (scq.owns_lock()) CleanCqLocked(p, qp->send_cq, qp->slot, qp->shm->qpn, qp->srq);
    if (rcq.owns_lock()) CleanCqLocked(p, qp->recv_cq, qp->slot, qp->shm->qpn, qp->srq);
    DetachAllMcastLocked(p, qp->slot);
    DetachAllFlowsLocked(p, qp->slot);
    if (qp->ind_table) ReleaseRssLocked(p, qp);
    p->fab->Free(qp->shm->rq.ring_off);
    qp->shm->rq.ring_off = 0;
    qp->shm->in_use = 0;
    qp->shm->qpn = 0;
    p->qps[qp->slot] = nullptr;
    static ShmQp dead_qp{};  // state 0: IBV_QPS_RESET
    qp->shm = &dead_qp;
    std::vector<SendWqe>().swap(qp->sq);
  }
  DetachFromDomain(ibqp);
  Retire(qp);
  return 0;
}

void MoveToErrorLocked(Process* p, ShmQp* q) {
  ShmHeader* h = p->fab->hdr();
  q->state.store(IBV_QPS_ERR);
  const uint32_t slot = static_cast<uint32_t>(q - h->qps);
  if (q->srq == kNone) {
    ShmRq& rq = q->rq;
    // At most one ring's worth, whatever head and tail in shared memory say.
    for (uint64_t n = 0; rq.tail < RqHead(rq) && n < kMaxQpWr; ++n) {
      ShmRecvWqe* w = p->fab->RqEntry(rq, rq.tail);
      if (!w) break;
      ShmCqe c{};
      c.wr_id = w->wr_id;
      c.status = IBV_WC_WR_FLUSH_ERR;
      c.opcode = IBV_WC_RECV;
      c.qp_num = q->qpn;
      c.qp_slot = slot;
      PushCqeLocked(p, q->recv_cq, c);
      ++rq.tail;
    }
  } else {
    RaiseAsyncLocked(p, q->ctx, IBV_EVENT_QP_LAST_WQE_REACHED, kObjQp, slot);
  }
  // The owner flushes its private send queue when it next looks.
  if (q->send_cq < kMaxCqs) h->cqs[q->send_cq].attention.fetch_add(1);
}

void InjectAsync(ibv_context* ctx, ibv_event_type type, ibv_qp* qp, ibv_cq* cq) {
  Process* p = GetProcess();
  if (!p || !IsContext(ctx)) return;
  if (type == IBV_EVENT_QP_FATAL && qp) {
    SnQp* q = Qp(qp);
    std::lock_guard<QueueMutex> sq(q->sq_mu);  // as ModifyQp: sq_mu, then the fabric
    {
      FabricLock lock(p->fab);
      if (q->shm->state.load() != IBV_QPS_ERR) MoveToErrorLocked(p, q->shm);
      qp->state = IBV_QPS_ERR;
      RaiseAsyncLocked(p, q->shm->ctx, IBV_EVENT_QP_FATAL, kObjQp, q->slot);
    }
    FlushSq(p, q);
    return;
  }
  FabricLock lock(p->fab);
  if (type == IBV_EVENT_CQ_ERR && cq) {
    SnCq* c = Cq(cq);
    if (c->slot < kMaxCqs) {
      ShmCq& s = p->fab->hdr()->cqs[c->slot];
      if (s.in_use && !s.overrun) {
        s.overrun = 1;
        RaiseAsyncLocked(p, s.ctx, IBV_EVENT_CQ_ERR, kObjCq, c->slot);
      }
    }
  } else if (type == IBV_EVENT_PORT_ERR || type == IBV_EVENT_PORT_ACTIVE) {
    RaiseAsyncLocked(p, Ctx(ctx)->slot, type, kObjPort, 1);
  }
}

// Whether a reader may poll a message's data instead of its completion
// (ibv_query_qp_data_in_order(3): 1 only if the data is guaranteed to be
// written in order).  softnic guarantees no order of the bytes of one
// message, with chaos or without: its one copy is a memmove (glibc's
// stores the head and the tail of a large buffer after its middle), a
// process_vm_writev, or the receiver's scatter at poll, and
// `--chaos=place`/`gather` place messages in pieces.  So it answers 0,
// as libibverbs answers for a device that promises nothing: a program
// that asks takes its completion path.
int QueryQpDataInOrder(ibv_qp*, ibv_wr_opcode, uint32_t) { return 0; }

}  // namespace rdmasan::softnic
