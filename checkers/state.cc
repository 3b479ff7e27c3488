#include "checkers/state.h"

#include <infiniband/verbs.h>

#include <algorithm>

#include "absl/container/inlined_vector.h"

namespace rdmasan::checkers {

using core::Event;
using core::EventKind;

bool WritesLocal(uint32_t op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

bool IsAtomic(uint32_t op) { return op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD; }

bool AtomicMisaligned(const core::SendWr& w, uint64_t* total) {
  *total = 0;
  for (const auto& g : w.sges) *total += g.length;
  if (IsAtomic(w.opcode)) return w.remote_addr % 8 != 0 || *total != 8;
  // ibv_wr_atomic_write copies its 8 bytes at the call (no SGE);
  // ibv_post_send takes them from the WR's SGEs.
  if (w.opcode == IBV_WR_ATOMIC_WRITE) {
    if (w.num_sge == 0) *total = 8;
    return w.remote_addr % 8 != 0 || *total != 8;
  }
  return false;
}

const char* WrOpcodeName(uint32_t op) {
  switch (op) {
    case IBV_WR_RDMA_WRITE:
      return "RDMA_WRITE";
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return "RDMA_WRITE_WITH_IMM";
    case IBV_WR_SEND:
      return "SEND";
    case IBV_WR_SEND_WITH_IMM:
      return "SEND_WITH_IMM";
    case IBV_WR_RDMA_READ:
      return "RDMA_READ";
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return "ATOMIC_CMP_AND_SWP";
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return "ATOMIC_FETCH_AND_ADD";
    case IBV_WR_LOCAL_INV:
      return "LOCAL_INV";
    case IBV_WR_BIND_MW:
      return "BIND_MW";
    case IBV_WR_SEND_WITH_INV:
      return "SEND_WITH_INV";
    case IBV_WR_ATOMIC_WRITE:
      return "ATOMIC_WRITE";
    default:
      return "WR";
  }
}

const char* QpStateName(uint32_t s) {
  static constexpr const char* kNames[] = {"RESET", "INIT", "RTR", "RTS", "SQD", "SQE", "ERR"};
  return s < 7 ? kNames[s] : "UNKNOWN";
}

const MrState* State::MrStateByLkey(uint32_t lkey) const {
  auto it = mr_by_lkey_.find(lkey);
  return it == mr_by_lkey_.end() ? nullptr : it->second;
}

ObjId State::MrByLkey(uint32_t lkey) const {
  const MrState* mr = MrStateByLkey(lkey);
  return mr ? mr->id : 0;
}

const QpState* State::QpOnCq(uint32_t qpn, ObjId cq, ObjId* id) const {
  *id = QpByNum(qpn);
  const QpState* q = Qp(*id);
  return q && (q->send_cq == cq || q->recv_cq == cq) ? q : nullptr;
}

QpState* State::MutableQpOnCq(uint32_t qpn, ObjId cq_id, CqState* cq, ObjId* id) {
  if (cq && cq->last_qp && cq->last_qpn == qpn) {
    *id = cq->last_qp_id;
    return cq->last_qp;
  }
  auto it = qps_.find(QpByNum(qpn));
  if (it == qps_.end() || (it->second.send_cq != cq_id && it->second.recv_cq != cq_id)) return nullptr;
  *id = it->first;
  if (cq) cq->last_qpn = qpn, cq->last_qp_id = it->first, cq->last_qp = &it->second;
  return &it->second;
}

ObjId State::QpByNum(uint32_t qpn) const {
  auto it = qp_by_num_.find(qpn);
  return it == qp_by_num_.end() ? 0 : it->second;
}

uint64_t State::PendingOn(ObjId cq_id) const {
  const CqState* cq = Cq(cq_id);
  return cq ? PendingOn(*cq) : 0;
}

uint64_t State::PendingWithSrqs(const CqState& cq) const {
  uint64_t n = cq.pending;
  for (ObjId s : cq.srqs)
    if (const SrqState* srq = Srq(s)) n += srq->rq.size() + srq->tags.size();
  return n;
}

void State::ForgetOutstanding(QpState& qp) {
  AdjustPending(qp.scq, -static_cast<int64_t>(qp.sq_signaled));
  qp.sq_signaled = 0;
  AdjustPending(qp.rcq, -static_cast<int64_t>(qp.rq.size()));
}

State::Queue State::ClassifyError(const core::Completion& wc, const QpState& qp, ObjId cq) const {
  const bool send_here = qp.send_cq == cq, recv_here = qp.recv_cq == cq;
  // The opcode of an error completion is undefined: decide by CQ, then by
  // the wr_id at the head of each queue.
  if (send_here && !recv_here) return Queue::kSend;
  if (recv_here && !send_here) return qp.srq ? Queue::kSrq : Queue::kRecv;
  if (!qp.sq.empty() && qp.sq.front().wr_id == wc.wr_id) return Queue::kSend;
  if (!qp.srq && !qp.rq.empty() && qp.rq.front().wr_id == wc.wr_id) return Queue::kRecv;
  if (!qp.sq.empty()) return Queue::kSend;
  if (qp.srq) return Queue::kSrq;
  if (!qp.rq.empty()) return Queue::kRecv;
  return Queue::kNone;
}

void State::Retire(const core::Completion& wc, ObjId cq, CqState* cq_state, std::vector<RetiredWr>* retired) {
  // Tag matching's completions are retired by their kTmWc events.
  if (__builtin_expect(IsTmCompletion(wc.status, wc.opcode), 0)) return;
  ObjId qid;
  QpState* found = MutableQpOnCq(wc.qp_num, cq, cq_state, &qid);
  if (!found) {
    RetireXrc(wc, cq, cq_state);
    return;
  }
  QpState& qp = *found;
  const Queue q = Classify(wc, qp, cq);
  if (q == Queue::kNone) {
    // An error completion on a CQ both queues share, both empty.
    if (wc.status != IBV_WC_SUCCESS) NoteEarly(qp.early, wc, true, true);
    return;
  }
  if (wc.status != IBV_WC_SUCCESS) {
    qp.known_error = true;
    qp.state = IBV_QPS_ERR;
  }
  switch (q) {
    case Queue::kNone:
      return;
    case Queue::kSend: {
      const size_t n = qp.sq.size();
      size_t i = 0;
      if (wc.status != IBV_WC_SUCCESS) {
        // Error and flush completions retire one each, in order; unsignaled
        // WRs before it completed successfully and go with it.
        if (n == 0) return NoteEarly(qp.early, wc, true, false);
        while (i < n && qp.sq[i].wr_id != wc.wr_id) ++i;
        if (i == n) i = 0;
      } else {
        // A signaled completion retires its WR and every earlier one.
        while (i < n && !(qp.sq[i].signaled && qp.sq[i].wr_id == wc.wr_id)) ++i;
        if (i == n) return NoteEarly(qp.early, wc, true, false);
      }
      RetireSends(qp, qid, i, retired);
      return;
    }
    case Queue::kRecv:
      if (qp.rq.empty()) return NoteEarly(qp.early, wc, false, true);
      DropDests(qp.rq.front());
      qp.rq.pop_front();
      AdjustPending(qp.rcq, -1);
      return;
    case Queue::kSrq: {
      auto s = srqs_.find(qp.srq);
      if (s == srqs_.end()) return;
      if (s->second.rq.empty()) return NoteEarly(s->second.early, wc, false, true);
      // SRQ receives complete in any order across QPs: retire by wr_id
      // (the oldest with it), or the oldest if none has it.
      auto gone = [this](OutstandingWr& w) { DropDests(w); };
      if (!s->second.rq.Retire(wc.wr_id, gone)) s->second.rq.pop_front(gone);
      return;
    }
  }
}

void State::RetireSends(QpState& q, ObjId qid, size_t i, std::vector<RetiredWr>* retired) {
  uint32_t signaled = 0;
  for (size_t k = 0; k <= i; ++k) {
    OutstandingWr& w = q.sq[k];
    signaled += w.signaled;
    DropDests(w);
    if (retired && w.hashed) retired->push_back({qid, std::move(w)});
  }
  AdjustPending(q.scq, -static_cast<int64_t>(signaled));
  q.sq_signaled -= signaled;
  q.sq.pop_front(i + 1);
}

namespace {

// The books' copy of a posted WR, written into its queue slot in place.
void FromSend(const core::SendWr& w, bool sig_all, StackId stack, OutstandingWr* o) {
  o->wr_id = w.wr_id;
  o->opcode = w.opcode;
  o->signaled = sig_all || (w.send_flags & IBV_SEND_SIGNALED);
  o->is_inline = (w.send_flags & IBV_SEND_INLINE) != 0;
  o->is_recv = false;
  o->stack = stack;
  o->rkey = w.imm_data;
  o->ah = w.ah;
  const core::Sge* g = w.sges.data();
  const size_t n = w.sges.size();
  o->sges.assign(g, g + n);
  if (n == 1) {  // nearly every WR: no loop
    o->hashed = g[0].hash != 0;
    return;
  }
  bool hashed = false;
  for (size_t i = 0; i < n; ++i) hashed |= g[i].hash != 0;
  o->hashed = hashed;
}

void FromRecv(const core::RecvWr& w, StackId stack, OutstandingWr* o) {
  o->wr_id = w.wr_id;
  o->opcode = 0;
  o->signaled = true;
  o->is_inline = false;
  o->is_recv = true;
  o->stack = stack;
  o->rkey = 0;
  o->ah = 0;
  o->hashed = false;
  o->sges.assign(w.sges.data(), w.sges.data() + w.sges.size());
}

}  // namespace

void State::ApplyPostSend(const Event& e, QpState* qp) {
  QpState& q = *qp;
  const size_t n = AcceptedWrs(e, e.send_wrs.size(), q.sq.size(), q.caps.max_send_wr);
  const core::SendWr* wrs = e.send_wrs.data();
  int64_t signaled = 0;
  // What the destinations index needs of this post (AddSendDests): only a
  // READ or atomic, a fence, or a hashed payload while a READ or atomic is
  // outstanding asks more than the WR's dest_key cleared.
  const bool dests = dests_.local_writes();
  const bool any_local_write = dests && dests_.AnyLocalWrite();
  bool dests_work = false;
  for (size_t i = 0; i < n; ++i) {
    OutstandingWr& o = q.sq.push_back();
    FromSend(wrs[i], q.sq_sig_all, e.stack, &o);
    q.unsignaled_run = o.signaled ? 0 : q.unsignaled_run + 1;
    signaled += o.signaled;
    if (dests) {
      o.dest_key = 0;
      dests_work |=
          WritesLocal(o.opcode) || (wrs[i].send_flags & IBV_SEND_FENCE) || (o.hashed && any_local_write);
    }
  }
  AdjustPending(q.scq, signaled);
  q.sq_signaled += static_cast<uint32_t>(signaled);
  if (__builtin_expect(dests_work, 0)) AddSendDests(e, e.obj, q, n);
  // Window WRs change books outside the QP's domain: such a post runs
  // under every lock (Engine::RunData).
  if (!mws_.empty() && HasWindowWrs(e)) ApplyWindowWrs(e, n);
  if (__builtin_expect(q.early.n != 0, 0)) MatchEarly(q);
}

void State::ApplyPollCq(ObjId cq_id, const core::Completion* wcs, size_t n, CqState* cq,
                        std::vector<RetiredWr>* retired) {
  for (size_t i = 0; i < n; ++i)
    if (!cq || !RetireInLine(wcs[i], *cq, retired)) Retire(wcs[i], cq_id, cq, retired);
  if (cq) cq->polled_since_arm = true;
}

void State::ApplyWindowWrs(const Event& e, size_t accepted) {
  for (size_t i = 0; i < accepted; ++i) {
    const core::SendWr& w = e.send_wrs[i];
    if (w.opcode == IBV_WR_BIND_MW) {
      auto it = mws_.find(w.bind.mw);
      if (it == mws_.end()) continue;
      MwState& m = it->second;
      if (auto k = mw_by_rkey_.find(m.rkey); k != mw_by_rkey_.end() && k->second == m.id)
        mw_by_rkey_.erase(k);
      m.rkey = w.rkey;
      mw_by_rkey_[m.rkey] = m.id;
      m.bound_before = true;
      m.qp = e.obj;
      if (w.bind.length == 0) {  // unbinds
        if (m.valid) m.invalidated_by = "a zero-length bind", m.invalidated_at = e.stack;
        m.valid = false;
        continue;
      }
      m.valid = true;
      m.mr = w.bind.mr;
      m.addr = w.bind.addr;
      m.length = w.bind.length;
      m.access = w.bind.access;
      const MrState* mr = Mr(w.bind.mr);
      m.va = mr ? mr->addr + (w.bind.addr - mr->iova) : w.bind.addr;
      m.bound_at = e.stack;
    } else if (w.opcode == IBV_WR_LOCAL_INV) {
      if (MwState* m = MutableMwByRkey(w.imm_data); m && m->valid) {
        m->valid = false;
        m->invalidated_by = "LOCAL_INV";
        m->invalidated_at = e.stack;
      }
    }
  }
}

MwState* State::MutableMwByRkey(uint32_t rkey) {
  auto k = mw_by_rkey_.find(rkey);
  return k == mw_by_rkey_.end() ? nullptr : FindMutable(mws_, k->second);
}

const MwState* State::MwByRkey(uint32_t rkey) const {
  auto k = mw_by_rkey_.find(rkey);
  return k == mw_by_rkey_.end() ? nullptr : Find(mws_, k->second);
}

const OutstandingWr* State::PendingLocalInv(uint32_t rkey, ObjId* qp) const {
  const OutstandingWr* found = nullptr;
  for (const auto& [id, q] : qps_) {
    if (found && id > *qp) continue;
    for (const auto& w : q.sq)
      if (w.opcode == IBV_WR_LOCAL_INV && w.rkey == rkey) {
        found = &w;
        *qp = id;
        break;
      }
  }
  return found;
}

const WcReason* State::Reason(uint32_t qp_num, uint64_t wr_id, uint32_t status) const {
  for (auto it = reasons_.rbegin(); it != reasons_.rend(); ++it)
    if (it->qp_num == qp_num && it->wr_id == wr_id && it->status == status) return &*it;
  return nullptr;
}

void State::ApplyAllocMw(const Event& e) {
  if (e.ret != 0) return;
  MwState& m = mws_[e.obj];
  m = MwState{};
  m.id = e.obj;
  m.pd = e.parent;
  m.type = e.count;
  m.stack = e.stack;
  m.rkey = e.rkey;
  mw_by_rkey_[e.rkey] = e.obj;
}

void State::ApplyDeallocMw(const Event& e) {
  if (e.ret != 0) return;
  auto it = mws_.find(e.obj);
  if (it == mws_.end()) return;
  if (auto k = mw_by_rkey_.find(it->second.rkey); k != mw_by_rkey_.end() && k->second == e.obj)
    mw_by_rkey_.erase(k);
  mws_.erase(it);
}

void State::ApplyReregMr(const Event& e) {
  ++mr_generation_;
  if (!ReregApplied(e.ret)) return;
  auto it = mrs_.find(e.obj);
  if (it == mrs_.end()) return;
  MrState& m = it->second;
  if (e.count & IBV_REREG_MR_CHANGE_TRANSLATION) m.addr = e.addr, m.length = e.length, m.iova = e.iova;
  if (e.count & IBV_REREG_MR_CHANGE_PD) m.pd = e.parent;
  if (e.count & IBV_REREG_MR_CHANGE_ACCESS) m.access = e.access;
  if (m.lkey != e.lkey) {
    auto k = mr_by_lkey_.find(m.lkey);
    if (k != mr_by_lkey_.end() && k->second == &m) mr_by_lkey_.erase(k);
    m.lkey = e.lkey;
    mr_by_lkey_[m.lkey] = &m;
  }
  m.rkey = e.rkey;
}

void State::ApplyRemoteInv(const Event& e) {
  if (MwState* m = MutableMwByRkey(e.rkey); m && m->valid) {
    m->valid = false;
    m->invalidated_by = "SEND_WITH_INV";
    m->invalidated_at = e.stack;
  }
}

void State::ApplyWcReason(const Event& e) {
  if (e.wcs.empty() || e.text.empty()) return;
  reasons_.push_back({e.wcs[0].qp_num, e.wcs[0].wr_id, e.wcs[0].status, e.text});
  if (reasons_.size() > kMaxReasons) reasons_.pop_front();
}

void State::ApplyPostRecv(const Event& e, QpState* q) {
  const size_t n = AcceptedWrs(e, e.recv_wrs.size(), q->rq.size(), q->caps.max_recv_wr);
  for (size_t i = 0; i < n; ++i) {
    OutstandingWr* o = &q->rq.push_back();
    FromRecv(e.recv_wrs[i], e.stack, o);
    if (__builtin_expect(dests_.receives(), 0)) AddRecvDest(e.recv_wrs[i], e.obj, false, e.stack, o);
  }
  AdjustPending(q->rcq, static_cast<int64_t>(n));
  if (__builtin_expect(q->early.n != 0, 0)) MatchEarly(*q);
}

void State::ApplyPostSrqRecv(const Event& e, SrqState* srq) {
  const size_t n = AcceptedWrs(e, e.recv_wrs.size(), srq->rq.size(), srq->max_wr);
  for (size_t i = 0; i < n; ++i) {
    const core::RecvWr& w = e.recv_wrs[i];
    OutstandingWr* o = &srq->rq.push_back(w.wr_id);
    FromRecv(w, e.stack, o);
    if (__builtin_expect(dests_.receives(), 0)) AddRecvDest(w, e.obj, true, e.stack, o);
  }
  if (__builtin_expect(srq->early.n != 0, 0)) MatchEarly(*srq);
}

void State::ApplyRegMr(const Event& e) {
  ++mr_generation_;
  if (e.ret != 0) return;
  MrState& m = mrs_[e.obj];
  m = {e.obj, e.parent, e.addr, e.length, e.iova, e.access, e.lkey, e.rkey, e.stack};
  mr_by_lkey_[e.lkey] = &m;
}

void State::ApplyDeregMr(const Event& e) {
  ++mr_generation_;
  if (e.ret != 0) return;
  auto it = mrs_.find(e.obj);
  if (it == mrs_.end()) return;
  auto k = mr_by_lkey_.find(it->second.lkey);
  if (k != mr_by_lkey_.end() && k->second == &it->second) mr_by_lkey_.erase(k);
  mrs_.erase(it);
  // A NIC refuses this while windows are bound; one that did not leaves
  // them unusable.
  for (auto& [id, m] : mws_)
    if (m.valid && m.mr == e.obj)
      m.valid = false, m.invalidated_by = "ibv_dereg_mr", m.invalidated_at = e.stack;
}

void State::ApplyCreateCq(const Event& e) {
  if (e.ret == 0) cqs_[e.obj] = CqState{.channel = e.channel, .cqe = e.cqe, .stack = e.stack};
}

void State::ApplyDestroyCq(const Event& e) {
  if (e.ret != 0) return;
  auto it = cqs_.find(e.obj);
  if (it == cqs_.end()) return;
  for (ObjId qid : it->second.qps)
    if (auto q = qps_.find(qid); q != qps_.end()) {
      if (q->second.scq == &it->second) q->second.scq = nullptr;
      if (q->second.rcq == &it->second) q->second.rcq = nullptr;
    }
  cqs_.erase(it);
}

void State::ApplyCreateSrq(const Event& e) {
  if (e.ret != 0) return;
  srqs_[e.obj] = SrqState{.pd = e.parent,
                          .cq = e.recv_cq,
                          .max_wr = e.caps.max_recv_wr,
                          .max_sge = e.caps.max_recv_sge,
                          .stack = e.stack,
                          .tm = e.qp_type == IBV_SRQT_TM,
                          .tm_cq = e.qp_type == IBV_SRQT_TM ? e.send_cq : 0};
  // An XRC SRQ is bound to its CQ from the start (no QP binds it).
  if (auto c = cqs_.find(e.recv_cq); e.recv_cq && c != cqs_.end()) c->second.srqs.insert(e.obj);
}

void State::RetireXrc(const core::Completion& wc, ObjId cq, CqState* cq_state) {
  if (!cq_state || cq_state->srqs.empty()) return;
  if (wc.status == IBV_WC_SUCCESS && !(wc.opcode & IBV_WC_RECV)) return;
  // The completion does not name its SRQ: the one (lowest id first, so a
  // replay decides alike) that holds its wr_id, else the oldest receive of
  // the first that holds any.
  absl::InlinedVector<ObjId, 4> ids;
  for (ObjId s : cq_state->srqs)
    if (const SrqState* srq = Srq(s); srq && srq->cq == cq && !srq->rq.empty()) ids.push_back(s);
  if (ids.empty()) return;
  std::sort(ids.begin(), ids.end());
  auto gone = [this](OutstandingWr& w) { DropDests(w); };
  for (ObjId s : ids)
    if (srqs_[s].rq.Retire(wc.wr_id, gone)) return;
  srqs_[ids.front()].rq.pop_front(gone);
}

void State::ApplyCreateQp(const Event& e) {
  if (e.ret != 0) return;
  QpState q;
  q.pd = e.parent;
  q.send_cq = e.send_cq;
  q.recv_cq = e.recv_cq;
  q.srq = e.srq;
  q.type = e.qp_type;
  q.qpn = e.qp_num;
  q.state = IBV_QPS_RESET;
  q.sq_sig_all = e.sq_sig_all;
  q.caps = e.caps;
  q.stack = e.stack;
  if (auto it = cqs_.find(e.send_cq); it != cqs_.end()) q.scq = &it->second;
  if (auto it = cqs_.find(e.recv_cq); it != cqs_.end()) q.rcq = &it->second;
  qps_[e.obj] = std::move(q);
  qp_by_num_[e.qp_num] = e.obj;
  if (auto it = cqs_.find(e.send_cq); it != cqs_.end()) it->second.qps.insert(e.obj);
  if (auto it = cqs_.find(e.recv_cq); it != cqs_.end()) it->second.qps.insert(e.obj);
  if (auto it = srqs_.find(e.srq); it != srqs_.end()) {
    it->second.qps.insert(e.obj);
    if (auto c = cqs_.find(e.recv_cq); c != cqs_.end()) c->second.srqs.insert(e.srq);
  }
}

void State::ApplyModifyQp(const Event& e) {
  if (e.ret != 0 || !(e.attr_mask & IBV_QP_STATE)) return;
  auto it = qps_.find(e.obj);
  if (it == qps_.end()) return;
  QpState& q = it->second;
  q.state = e.qp_state;
  if (e.qp_state == IBV_QPS_RESET) {
    ForgetOutstanding(q);
    DropQpDests(q);
    q.sq.clear();
    q.rq.clear();
    q.unsignaled_run = 0;
    q.known_error = false;
    q.early.n = 0;
  }
}

void State::ApplyDestroyQp(const Event& e) {
  if (e.ret != 0) return;
  auto it = qps_.find(e.obj);
  if (it == qps_.end()) return;
  ForgetOutstanding(it->second);
  DropQpDests(it->second);
  for (ObjId c : {it->second.send_cq, it->second.recv_cq})
    if (auto ci = cqs_.find(c); ci != cqs_.end()) {
      ci->second.qps.erase(e.obj);
      if (ci->second.last_qp == &it->second) ci->second.last_qp = nullptr;
    }
  if (auto si = srqs_.find(it->second.srq); si != srqs_.end()) si->second.qps.erase(e.obj);
  auto n = qp_by_num_.find(it->second.qpn);
  if (n != qp_by_num_.end() && n->second == e.obj) qp_by_num_.erase(n);
  qps_.erase(it);
}

void State::ApplyReqNotifyCq(const Event& e) {
  auto it = cqs_.find(e.obj);
  if (e.ret != 0 || it == cqs_.end()) return;
  CqState& c = it->second;
  c.armed = true;
  c.polled_since_arm = false;
  // Could a completion already be waiting, unseen by this arming?  Only
  // if some bound QP can complete work now.
  bool pending = false;
  for (ObjId qid : c.qps) {
    const QpState* q = Qp(qid);
    if (!q) continue;
    // Unsignaled sends complete silently (unless they fail): only a
    // signaled one can be waiting unseen.
    if (q->send_cq == e.obj && q->state >= IBV_QPS_RTS)
      for (const auto& w : q->sq) pending |= w.signaled;
    if (q->recv_cq == e.obj && q->state >= IBV_QPS_RTR &&
        (!q->rq.empty() || (q->srq && Srq(q->srq) && !Srq(q->srq)->rq.empty())))
      pending = true;
  }
  c.armed_with_pending = pending;
}

void State::ApplyGetCqEvent(const Event& e) {
  auto it = cqs_.find(e.obj);
  if (e.ret != 0 || it == cqs_.end()) return;
  ++it->second.events_got;
  it->second.armed = false;
}

void State::ApplyAckCqEvents(const Event& e) {
  auto it = cqs_.find(e.obj);
  if (it != cqs_.end()) it->second.events_acked += e.count;
}

void State::ApplyAsyncEvent(const Event& e) {
  auto it = qps_.find(e.obj);
  if (it != qps_.end() && e.qp_state == IBV_QPS_ERR) it->second.state = IBV_QPS_ERR;
}

uint64_t CqOutstanding::CouldComplete() const {
  uint64_t n = 0;
  for (const Queue& q : queues)
    n += q.signaled_sends + q.recvs + (q.qp && q.state == IBV_QPS_ERR ? q.unsignaled_sends : 0);
  return n;
}

std::vector<CqOutstanding> State::Outstanding() const {
  std::vector<CqOutstanding> out;
  out.reserve(cqs_.size());
  for (const auto& [id, cq] : cqs_) {
    CqOutstanding o;
    o.cq = id;
    o.channel = cq.channel;
    o.armed = cq.armed;
    o.events_unacked = cq.events_got > cq.events_acked ? cq.events_got - cq.events_acked : 0;
    o.stack = cq.stack;
    for (ObjId q : cq.qps) {
      const QpState* qp = Qp(q);
      if (!qp) continue;
      CqOutstanding::Queue b;
      b.qp = q;
      b.qpn = qp->qpn;
      b.state = qp->state;
      if (qp->send_cq == id) {
        b.signaled_sends = qp->sq_signaled;
        b.unsignaled_sends = static_cast<uint32_t>(qp->sq.size()) - qp->sq_signaled;
      }
      if (qp->recv_cq == id && !qp->srq) b.recvs = static_cast<uint32_t>(qp->rq.size());
      o.queues.push_back(b);
    }
    std::sort(o.queues.begin(), o.queues.end(),
              [](const CqOutstanding::Queue& a, const CqOutstanding::Queue& b) { return a.qp < b.qp; });
    std::vector<ObjId> srqs(cq.srqs.begin(), cq.srqs.end());
    std::sort(srqs.begin(), srqs.end());
    for (ObjId s : srqs)
      if (const SrqState* srq = Srq(s)) {
        CqOutstanding::Queue b;
        b.srq = s;
        b.recvs = static_cast<uint32_t>(srq->rq.size() + srq->tags.size());
        o.queues.push_back(b);
      }
    out.push_back(std::move(o));
  }
  std::sort(out.begin(), out.end(),
            [](const CqOutstanding& a, const CqOutstanding& b) { return a.cq < b.cq; });
  return out;
}

bool State::LkeyInFlight(uint32_t lkey) const {
  auto uses = [lkey](const auto& q) {
    for (const auto& w : q) {
      if (w.is_inline) continue;
      for (const auto& g : w.sges)
        if (g.lkey == lkey && g.length) return true;
    }
    return false;
  };
  for (const auto& [id, q] : qps_)
    if (uses(q.sq) || uses(q.rq)) return true;
  for (const auto& [id, s] : srqs_) {
    if (uses(s.rq)) return true;
    for (const auto& [h, t] : s.tags)
      for (const auto& g : t.wr.sges)
        if (g.lkey == lkey && g.length) return true;
  }
  return false;
}

void State::NoteDestroyed(const Event& e) {
  auto created = [](const auto* books) { return books ? books->stack : StackId{0}; };
  DestroyedObj d;
  // clang-format off
  switch (e.kind) {
    case EventKind::kDestroyQp: d = {"QP", created(Qp(e.obj)), e.stack}; break;
    case EventKind::kDestroyCq: d = {"CQ", created(Cq(e.obj)), e.stack}; break;
    case EventKind::kDestroySrq: d = {"SRQ", created(Srq(e.obj)), e.stack}; break;
    case EventKind::kDestroyAh: d = {"AH", created(Ah(e.obj)), e.stack}; break;
    case EventKind::kDeallocPd: d = {"PD", created(Pd(e.obj)), e.stack}; break;
    case EventKind::kDeregMr: d = {"MR", created(Mr(e.obj)), e.stack}; break;
    case EventKind::kDeallocMw: d = {"MW", created(Mw(e.obj)), e.stack}; break;
    case EventKind::kCloseDevice: d = {"device context", 0, e.stack}; break;
    case EventKind::kDestroyCompChannel: d = {"completion channel", 0, e.stack}; break;
    default: return;
  }
  // clang-format on
  if (!e.obj || !destroyed_.emplace(e.obj, d).second) return;
  destroyed_order_.push_back(e.obj);
  if (destroyed_order_.size() > kMaxDestroyed) {
    destroyed_.erase(destroyed_order_.front());
    destroyed_order_.pop_front();
  }
}

void State::Apply(const Event& e, std::vector<RetiredWr>* retired, void* books) {
  const bool ok = e.ret == 0;
  if (ok) NoteDestroyed(e);
  switch (e.kind) {
    case EventKind::kPostSend:
      if (QpState* q = books ? static_cast<QpState*>(books) : MutableQp(e.obj)) ApplyPostSend(e, q);
      break;
    case EventKind::kPostRecv:
      if (QpState* q = books ? static_cast<QpState*>(books) : MutableQp(e.obj)) ApplyPostRecv(e, q);
      break;
    case EventKind::kPostSrqRecv:
      if (SrqState* s = books ? static_cast<SrqState*>(books) : MutableSrq(e.obj)) ApplyPostSrqRecv(e, s);
      break;
    case EventKind::kPollCq:
      ApplyPollCq(e, books ? static_cast<CqState*>(books) : MutableCq(e.obj), retired);
      break;
    case EventKind::kReqNotifyCq:
      ApplyReqNotifyCq(e);
      break;
    case EventKind::kGetCqEvent:
      ApplyGetCqEvent(e);
      break;
    case EventKind::kAckCqEvents:
      ApplyAckCqEvents(e);
      break;
    case EventKind::kAllocPd:
      if (ok) pds_[e.obj] = {e.stack};
      break;
    case EventKind::kDeallocPd:
      if (ok) pds_.erase(e.obj);
      break;
    case EventKind::kRegMr:
      ApplyRegMr(e);
      break;
    case EventKind::kDeregMr:
      ApplyDeregMr(e);
      break;
    case EventKind::kCreateCq:
      ApplyCreateCq(e);
      break;
    case EventKind::kDestroyCq:
      ApplyDestroyCq(e);
      break;
    case EventKind::kCreateSrq:
      ApplyCreateSrq(e);
      break;
    case EventKind::kDestroySrq:
      if (ok) {
        if (auto it = srqs_.find(e.obj); it != srqs_.end()) {
          for (const auto& w : it->second.rq) DropDests(w);
          if (auto c = cqs_.find(it->second.cq); it->second.cq && c != cqs_.end())
            c->second.srqs.erase(e.obj);
        }
        srqs_.erase(e.obj);
      }
      break;
    case EventKind::kCreateQp:
      ApplyCreateQp(e);
      break;
    case EventKind::kModifyQp:
      ApplyModifyQp(e);
      break;
    case EventKind::kDestroyQp:
      ApplyDestroyQp(e);
      break;
    case EventKind::kCreateAh:
      if (ok) ahs_[e.obj] = {e.parent, e.stack};
      break;
    case EventKind::kDestroyAh:
      if (ok) ahs_.erase(e.obj);
      break;
    case EventKind::kAsyncEvent:
      ApplyAsyncEvent(e);
      break;
    case EventKind::kForkInit:
      if (ok) fork_init_ = true;
      break;
    case EventKind::kAllocMw:
      ApplyAllocMw(e);
      break;
    case EventKind::kDeallocMw:
      ApplyDeallocMw(e);
      break;
    case EventKind::kBindMw:
      // The type-1 verb posts its BIND_MW WR to the QP's send queue.
      if (QpState* q = MutableQp(e.obj)) ApplyPostSend(e, q);
      break;
    case EventKind::kReregMr:
      ApplyReregMr(e);
      break;
    case EventKind::kRemoteInv:
      ApplyRemoteInv(e);
      break;
    case EventKind::kWcReason:
      ApplyWcReason(e);
      break;
    case EventKind::kPostSrqOps:
      ApplyPostSrqOps(e);
      break;
    case EventKind::kTmWc:
      ApplyTmWc(e);
      break;
    case EventKind::kResizeCq:
      if (ok)
        if (auto it = cqs_.find(e.obj); it != cqs_.end()) it->second.cqe = e.cqe;
      break;
    default:
      break;
  }
}

}  // namespace rdmasan::checkers
