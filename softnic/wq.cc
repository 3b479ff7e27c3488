// softnic receive work queues and RSS: ibv_create_wq / ibv_modify_wq /
// ibv_destroy_wq / ibv_post_wq_recv, ibv_create_rwq_ind_table /
// ibv_destroy_rwq_ind_table (the verbs_context ops the inline verbs call),
// an RSS QP's hash configuration (ibv_create_qp_ex with
// IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE), and the Toeplitz
// hash that picks a WQ of its table for a frame.
//
// A WQ (IBV_WQT_RQ) is a QP slot of type kQptWq in the fabric, with the
// receive queue, CQ and state of a QP (RESET; RDY, kept as RTR; ERR, which
// flushes its receives), and its number is that slot's QPN; no sender can
// address it, only steering through an RSS QP reaches it.  Its completions
// carry the WQ number as qp_num.  An indirection table is process-local
// (a list of WQs); an RSS QP copies the WQ numbers, the key and the hash
// fields into the fabric's rss[] table, where a sender of any process
// reads them.  A WQ named by a table, or a table used by a QP, cannot be
// destroyed (EBUSY), as the kernel refuses.
//
// May not: trust the rss[] entry or the WQ numbers read from the fabric
// (bounds and the QP table are checked before use), or post receives to a
// WQ beyond its capacity.
#include <errno.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <vector>

#include "softnic/internal.h"
#include "softnic/owned.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {

struct SnWq {
  ibv_wq wq;
  SnQp q;                           // its QP slot: receive queue, CQ, state
  std::atomic<uint32_t> tables{0};  // indirection tables naming it
};

struct SnIndTable {
  ibv_rwq_ind_table t;
  uint32_t log_size = 0;
  std::vector<SnWq*> wqs;
  std::atomic<uint32_t> users{0};  // RSS QPs using it
};

namespace {

constexpr uint64_t kRssFields = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
                                IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP |
                                IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
std::atomic<int> g_next_table{1};

SnWq* Wq(ibv_wq* w) { return reinterpret_cast<SnWq*>(w); }

int PostWqRecv(ibv_wq* wq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  return PostRecvOp(&Wq(wq)->q.qpx.qp_base, wr, bad);
}

ibv_wq* CreateWq(ibv_context* ctx, ibv_wq_init_attr* a) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (!a || a->wq_type != IBV_WQT_RQ || !a->pd || !a->cq || a->pd->context != ctx || a->cq->context != ctx) {
    errno = EINVAL;
    return nullptr;
  }
  if (a->comp_mask & ~uint32_t{IBV_WQ_INIT_ATTR_FLAGS}) {
    errno = EINVAL;
    return nullptr;
  }
  if ((a->comp_mask & IBV_WQ_INIT_ATTR_FLAGS) && a->create_flags) {
    errno = EOPNOTSUPP;  // no VLAN stripping, FCS scatter, delay drop, padding
    return nullptr;
  }
  if (a->max_wr == 0 || a->max_wr > kMaxQpWr || a->max_sge == 0 || a->max_sge > kMaxSge) {
    errno = EINVAL;
    return nullptr;
  }
  auto w = NewOwned<SnWq>();
  if (!w) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  const uint32_t slot = FreeSlot(h->qps, 1);
  if (slot == kNone || !InitRq(p->fab, &h->qps[slot].rq, a->max_wr, a->max_sge)) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmQp& s = h->qps[slot];
  s.gen = (s.gen % 4095) + 1;
  if (((s.gen << 12) | slot) == kMcastQpn) s.gen = 1;
  s.qpn = (s.gen << 12) | slot;
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.ctx = Ctx(ctx)->slot;
  s.pd = PdId(a->pd);
  s.type = kQptWq;
  s.state.store(IBV_QPS_RESET);
  s.send_cq = kNone;
  s.recv_cq = Cq(a->cq)->slot;
  s.srq = kNone;
  s.xrcd = XrcdKey{};
  s.rss = kNone;
  s.sq_sig_all = s.access = s.qkey = s.dest_qpn = 0;
  s.remote_gone = 0;
  s.port_num = 1;
  SnQp& q = w->q;
  q.slot = slot;
  q.shm = &s;
  q.send_cq = nullptr;
  q.recv_cq = Cq(a->cq);
  q.srq = nullptr;
  q.max_send_wr = q.max_send_sge = q.max_inline = 0;
  q.max_recv_wr = a->max_wr;
  q.max_recv_sge = a->max_sge;
  ibv_qp& iq = q.qpx.qp_base;
  iq.context = ctx;
  iq.pd = a->pd;
  iq.recv_cq = a->cq;
  iq.qp_num = s.qpn;
  iq.handle = slot;
  iq.state = IBV_QPS_RESET;
  iq.qp_type = IBV_QPT_RAW_PACKET;
  p->qps[slot] = &q;
  p->qp_end = std::max(p->qp_end, slot + 1);
  ibv_wq& wq = w->wq;
  wq.context = ctx;
  wq.pd = a->pd;
  wq.cq = a->cq;
  wq.wq_num = s.qpn;
  wq.handle = slot;
  wq.state = IBV_WQS_RESET;
  wq.wq_type = IBV_WQT_RQ;
  wq.post_recv = PostWqRecv;
  return &w.release()->wq;  // the program's handle now
}

ibv_qp_state QpStateOf(ibv_wq_state s) {
  return s == IBV_WQS_RDY ? IBV_QPS_RTR : s == IBV_WQS_ERR ? IBV_QPS_ERR : IBV_QPS_RESET;
}

int ModifyWq(ibv_wq* wq, ibv_wq_attr* attr) {
  Process* p = GetProcess();
  if (!p) return ENODEV;
  SnWq* w = Wq(wq);
  constexpr uint32_t kMask = IBV_WQ_ATTR_STATE | IBV_WQ_ATTR_CURR_STATE | IBV_WQ_ATTR_FLAGS;
  if (attr->attr_mask & ~kMask) return EINVAL;
  if ((attr->attr_mask & IBV_WQ_ATTR_FLAGS) && (attr->flags_mask & attr->flags)) return EOPNOTSUPP;
  const ibv_wq_state cur = wq->state;
  if ((attr->attr_mask & IBV_WQ_ATTR_CURR_STATE) && attr->curr_wq_state != cur) return EINVAL;
  if (!(attr->attr_mask & IBV_WQ_ATTR_STATE)) return 0;
  const ibv_wq_state next = attr->wq_state;
  // RESET -> RDY -> ERR, and any of them back to RESET.
  const bool ok = next == IBV_WQS_RESET || (next == IBV_WQS_RDY && cur != IBV_WQS_ERR) ||
                  (next == IBV_WQS_ERR && cur == IBV_WQS_RDY) || (next == IBV_WQS_ERR && cur == IBV_WQS_ERR);
  if (!ok) return EINVAL;
  FabricLock lock(p->fab);
  ShmQp& s = *w->q.shm;
  if (next == IBV_WQS_RESET) {
    if (w->q.recv_cq && w->q.recv_cq->mu.try_lock()) {
      CleanCqLocked(p, w->q.recv_cq, w->q.slot, s.qpn, nullptr);
      w->q.recv_cq->mu.unlock();
    }
    ResetRq(&s.rq);
    w->q.rq_outstanding.Clear();
    s.state.store(IBV_QPS_RESET);
  } else if (next == IBV_WQS_ERR) {
    if (cur != IBV_WQS_ERR) MoveToErrorLocked(p, &s);
  } else {
    if (cur != IBV_WQS_RDY) p->fab->AllowPeerOf(s);  // before a sender can reach it
    s.state.store(QpStateOf(next));
  }
  wq->state = next;
  w->q.qpx.qp_base.state = QpStateOf(next);
  return 0;
}

int DestroyWq(ibv_wq* wq) {
  Process* p = GetProcess();
  if (!p) return ENODEV;
  SnWq* w = Wq(wq);
  if (w->tables.load()) return EBUSY;
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmQp& s = *w->q.shm;
    p->fab->Free(s.rq.ring_off);
    s.rq.ring_off = 0;
    s.in_use = 0;
    s.qpn = 0;
    p->qps[w->q.slot] = nullptr;
  }
  delete w;
  return 0;
}

ibv_rwq_ind_table* CreateIndTable(ibv_context* ctx, ibv_rwq_ind_table_init_attr* a) {
  if (!a || a->comp_mask || a->log_ind_tbl_size > kMaxIndTableLog || !a->ind_tbl) {
    errno = a && a->comp_mask ? EOPNOTSUPP : EINVAL;
    return nullptr;
  }
  const uint32_t n = 1u << a->log_ind_tbl_size;
  for (uint32_t i = 0; i < n; ++i)
    if (!a->ind_tbl[i] || a->ind_tbl[i]->context != ctx || a->ind_tbl[i]->wq_type != IBV_WQT_RQ) {
      errno = EINVAL;
      return nullptr;
    }
  auto* t = new (std::nothrow) SnIndTable();
  if (!t) {
    errno = ENOMEM;
    return nullptr;
  }
  try {
    for (uint32_t i = 0; i < n; ++i) t->wqs.push_back(Wq(a->ind_tbl[i]));
  } catch (...) {
    delete t;
    errno = ENOMEM;
    return nullptr;
  }
  for (SnWq* w : t->wqs) w->tables.fetch_add(1);
  t->log_size = a->log_ind_tbl_size;
  t->t.context = ctx;
  t->t.ind_tbl_num = g_next_table.fetch_add(1);
  t->t.ind_tbl_handle = t->t.ind_tbl_num;
  return &t->t;
}

int DestroyIndTable(ibv_rwq_ind_table* table) {
  auto* t = reinterpret_cast<SnIndTable*>(table);
  if (t->users.load()) return EBUSY;
  for (SnWq* w : t->wqs) w->tables.fetch_sub(1);
  delete t;
  return 0;
}

}  // namespace

void InstallWqOps(verbs_context* v) {
  v->create_wq = CreateWq;
  v->modify_wq = ModifyWq;
  v->destroy_wq = DestroyWq;
  v->create_rwq_ind_table = CreateIndTable;
  v->destroy_rwq_ind_table = DestroyIndTable;
}

uint32_t Toeplitz(const uint8_t* key, uint32_t key_len, const uint8_t* in, uint32_t n) {
  if (!key_len) return 0;
  // The key as a bit stream (repeated when the input outruns it): each set
  // input bit XORs in the 32 key bits starting at its position.
  auto key_bit = [&](uint64_t k) { return (key[(k / 8) % key_len] >> (7 - k % 8)) & 1u; };
  uint32_t window = 0;
  for (uint64_t k = 0; k < 32; ++k) window = (window << 1) | key_bit(k);
  uint32_t result = 0;
  for (uint64_t bit = 0; bit < uint64_t{n} * 8; ++bit) {
    if ((in[bit / 8] >> (7 - bit % 8)) & 1u) result ^= window;
    window = (window << 1) | key_bit(bit + 32);
  }
  return result;
}

int SetupRssLocked(Process* p, SnQp* qp, const ibv_qp_init_attr_ex* a) {
  const ibv_rx_hash_conf& c = a->rx_hash_conf;
  auto* t = reinterpret_cast<SnIndTable*>(a->rwq_ind_tbl);
  ShmHeader* h = p->fab->hdr();
  const uint32_t slot = FreeSlot(h->rss);
  if (slot == kNone) return ENOMEM;
  ShmRss& r = h->rss[slot];
  r.proc = p->fab->self_proc();
  r.qpn = qp->shm->qpn;
  r.log_size = t->log_size;
  r.fields = c.rx_hash_fields_mask;
  r.key_len = c.rx_hash_key_len;
  memset(r.key, 0, sizeof(r.key));
  memcpy(r.key, c.rx_hash_key, c.rx_hash_key_len);
  for (size_t i = 0; i < t->wqs.size(); ++i) r.wqn[i] = t->wqs[i]->wq.wq_num;
  r.in_use = 1;
  qp->shm->rss = slot;
  qp->ind_table = t;
  t->users.fetch_add(1);
  return 0;
}

int CheckRss(ibv_context* ctx, const ibv_qp_init_attr_ex* a) {
  constexpr uint32_t kBoth = IBV_QP_INIT_ATTR_RX_HASH | IBV_QP_INIT_ATTR_IND_TABLE;
  if ((a->comp_mask & kBoth) != kBoth || a->qp_type != IBV_QPT_RAW_PACKET || !a->rwq_ind_tbl ||
      a->rwq_ind_tbl->context != ctx)
    return EINVAL;
  const ibv_rx_hash_conf& c = a->rx_hash_conf;
  if (c.rx_hash_function != IBV_RX_HASH_FUNC_TOEPLITZ) return EOPNOTSUPP;
  if (c.rx_hash_fields_mask & ~kRssFields) return EOPNOTSUPP;  // inner headers, IPsec SPI
  if (c.rx_hash_key_len == 0 || c.rx_hash_key_len > kRssKeyMax || !c.rx_hash_key) return EINVAL;
  // Ports of one L4 protocol, as a NIC's hash (TCP and UDP ports together: EINVAL).
  constexpr uint64_t kTcp = IBV_RX_HASH_SRC_PORT_TCP | IBV_RX_HASH_DST_PORT_TCP;
  constexpr uint64_t kUdp = IBV_RX_HASH_SRC_PORT_UDP | IBV_RX_HASH_DST_PORT_UDP;
  if ((c.rx_hash_fields_mask & kTcp) && (c.rx_hash_fields_mask & kUdp)) return EINVAL;
  return 0;
}

void ReleaseRssLocked(Process* p, SnQp* qp) {
  ShmHeader* h = p->fab->hdr();
  const uint32_t slot = qp->shm->rss;
  if (slot < kMaxRss && h->rss[slot].proc == p->fab->self_proc()) h->rss[slot].in_use = 0;
  qp->shm->rss = kNone;
  if (qp->ind_table) qp->ind_table->users.fetch_sub(1);
  qp->ind_table = nullptr;
}

uint32_t RssPickLocked(Process* p, const ShmQp& q, const FlowKey& k, uint32_t has) {
  const ShmHeader* h = p->fab->hdr();
  if (q.rss >= kMaxRss) return kNone;
  const ShmRss& r = h->rss[q.rss];
  if (!r.in_use || r.qpn != q.qpn || r.log_size > kMaxIndTableLog || r.key_len > kRssKeyMax) return kNone;
  // The selected fields the frame has, in the order of the RSS
  // specification: source then destination address, then ports.
  uint8_t in[36];
  uint32_t n = 0;
  auto add = [&](const void* v, uint32_t len) {
    memcpy(in + n, v, len);
    n += len;
  };
  const uint64_t f = r.fields;
  if (has & kHasIpv4) {
    if (f & IBV_RX_HASH_SRC_IPV4) add(&k.src_ip4, 4);
    if (f & IBV_RX_HASH_DST_IPV4) add(&k.dst_ip4, 4);
  }
  if (has & kHasIpv6) {
    if (f & IBV_RX_HASH_SRC_IPV6) add(k.src_ip6, 16);
    if (f & IBV_RX_HASH_DST_IPV6) add(k.dst_ip6, 16);
  }
  if (((has & kHasTcp) && (f & IBV_RX_HASH_SRC_PORT_TCP)) ||
      ((has & kHasUdp) && (f & IBV_RX_HASH_SRC_PORT_UDP)))
    add(&k.src_port, 2);
  if (((has & kHasTcp) && (f & IBV_RX_HASH_DST_PORT_TCP)) ||
      ((has & kHasUdp) && (f & IBV_RX_HASH_DST_PORT_UDP)))
    add(&k.dst_port, 2);
  const uint32_t hash = Toeplitz(r.key, r.key_len, in, n);
  const uint32_t wqn = r.wqn[hash & ((1u << r.log_size) - 1)];
  const uint32_t slot = wqn & (kMaxQps - 1);
  const ShmQp& w = h->qps[slot];
  return w.in_use && w.qpn == wqn && w.type == kQptWq ? slot : kNone;
}

}  // namespace rdmasan::softnic
