// softnic ibv_qp_ex work-request builder: ibv_wr_start, the ibv_wr_* and
// ibv_wr_set_* calls, ibv_wr_complete.
//
// The calls build ordinary ibv_send_wrs in SnQp::batch; ibv_wr_complete
// posts the chain through post_send, so both ways of posting share one
// path.  ibv_wr_atomic_write copies its 8 bytes into the WR at the call
// (they travel as an inline payload).  What softnic does not do (TSO)
// fails the batch with EOPNOTSUPP at complete.
//
// May not: grow the batch past max_send_wr, or post anything before
// ibv_wr_complete.
#include <errno.h>

#include <cstring>

#include "softnic/internal.h"

namespace rdmasan::softnic {
namespace {

SnQp* QpX(ibv_qp_ex* x) { return reinterpret_cast<SnQp*>(x); }

ibv_send_wr* NewWr(ibv_qp_ex* x, ibv_wr_opcode op) {
  SnQp* qp = QpX(x);
  if (qp->batch.size() >= qp->max_send_wr) {
    qp->batch_error = ENOMEM;
    return nullptr;
  }
  qp->batch.emplace_back();
  BatchWr& b = qp->batch.back();
  b.wr = {};
  b.wr.wr_id = x->wr_id;
  b.wr.send_flags = x->wr_flags;
  b.wr.opcode = op;
  return &b.wr;
}

BatchWr* Last(ibv_qp_ex* x) {
  SnQp* qp = QpX(x);
  return qp->batch.empty() ? nullptr : &qp->batch.back();
}

void WrStart(ibv_qp_ex* x) {
  SnQp* qp = QpX(x);
  qp->batch.clear();
  qp->batch_error = 0;
}

void WrSend(ibv_qp_ex* x) { NewWr(x, IBV_WR_SEND); }
void WrSendImm(ibv_qp_ex* x, __be32 imm) {
  if (auto* w = NewWr(x, IBV_WR_SEND_WITH_IMM)) w->imm_data = imm;
}
void WrRdmaWrite(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  if (auto* w = NewWr(x, IBV_WR_RDMA_WRITE)) w->wr.rdma = {addr, rkey};
}
void WrRdmaWriteImm(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, __be32 imm) {
  if (auto* w = NewWr(x, IBV_WR_RDMA_WRITE_WITH_IMM)) {
    w->wr.rdma = {addr, rkey};
    w->imm_data = imm;
  }
}
void WrRdmaRead(ibv_qp_ex* x, uint32_t rkey, uint64_t addr) {
  if (auto* w = NewWr(x, IBV_WR_RDMA_READ)) w->wr.rdma = {addr, rkey};
}
void WrCas(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t compare, uint64_t swap) {
  if (auto* w = NewWr(x, IBV_WR_ATOMIC_CMP_AND_SWP)) w->wr.atomic = {addr, compare, swap, rkey};
}
void WrFaa(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, uint64_t add) {
  if (auto* w = NewWr(x, IBV_WR_ATOMIC_FETCH_AND_ADD)) w->wr.atomic = {addr, add, 0, rkey};
}
void WrUnsupported(ibv_qp_ex* x) { QpX(x)->batch_error = EOPNOTSUPP; }
void WrBindMw(ibv_qp_ex* x, ibv_mw* mw, uint32_t rkey, const ibv_mw_bind_info* info) {
  if (auto* w = NewWr(x, IBV_WR_BIND_MW)) {
    w->bind_mw.mw = mw;
    w->bind_mw.rkey = rkey;
    w->bind_mw.bind_info = *info;
  }
}
void WrLocalInv(ibv_qp_ex* x, uint32_t rkey) {
  if (auto* w = NewWr(x, IBV_WR_LOCAL_INV)) w->invalidate_rkey = rkey;
}
void WrSendInv(ibv_qp_ex* x, uint32_t rkey) {
  if (auto* w = NewWr(x, IBV_WR_SEND_WITH_INV)) w->invalidate_rkey = rkey;
}
void WrSendTso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { WrUnsupported(x); }
void WrSetXrc(ibv_qp_ex* x, uint32_t remote_srqn) {
  if (BatchWr* b = Last(x)) b->wr.qp_type.xrc.remote_srqn = remote_srqn;
}
void WrAtomicWrite(ibv_qp_ex* x, uint32_t rkey, uint64_t addr, const void* value) {
  if (!NewWr(x, IBV_WR_ATOMIC_WRITE)) return;
  BatchWr* b = Last(x);
  b->wr.wr.rdma = {addr, rkey};
  memcpy(b->inl, value, kAtomicWriteBytes);
  b->sge[0] = {reinterpret_cast<uint64_t>(b->inl), kAtomicWriteBytes, 0};
  b->nsge = 1;
  b->wr.send_flags |= IBV_SEND_INLINE;
}

void WrSetUdAddr(ibv_qp_ex* x, ibv_ah* ah, uint32_t qpn, uint32_t qkey) {
  if (BatchWr* b = Last(x)) b->wr.wr.ud = {ah, qpn, qkey};
}
void WrSetSge(ibv_qp_ex* x, uint32_t lkey, uint64_t addr, uint32_t length) {
  if (BatchWr* b = Last(x)) {
    b->sge[0] = {addr, length, lkey};
    b->nsge = 1;
  }
}
void WrSetSgeList(ibv_qp_ex* x, size_t n, const ibv_sge* list) {
  BatchWr* b = Last(x);
  if (!b) return;
  if (n > kMaxSge) {
    QpX(x)->batch_error = EINVAL;
    return;
  }
  for (size_t i = 0; i < n; ++i) b->sge[i] = list[i];
  b->nsge = static_cast<uint32_t>(n);
}
void WrSetInlineList(ibv_qp_ex* x, size_t n, const ibv_data_buf* bufs) {
  BatchWr* b = Last(x);
  if (!b) return;
  size_t total = 0;
  for (size_t i = 0; i < n; ++i) total += bufs[i].length;
  if (total > kMaxInline) {
    QpX(x)->batch_error = EINVAL;
    return;
  }
  size_t off = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bufs[i].length) memcpy(b->inl + off, bufs[i].addr, bufs[i].length);  // a null addr may come with 0
    off += bufs[i].length;
  }
  b->sge[0] = {reinterpret_cast<uint64_t>(b->inl), static_cast<uint32_t>(total), 0};
  b->nsge = 1;
  b->wr.send_flags |= IBV_SEND_INLINE;
}
void WrSetInline(ibv_qp_ex* x, void* addr, size_t length) {
  ibv_data_buf buf{addr, length};
  WrSetInlineList(x, 1, &buf);
}

int WrComplete(ibv_qp_ex* x) {
  SnQp* qp = QpX(x);
  int err = qp->batch_error;
  if (!err && !qp->batch.empty()) {
    for (size_t i = 0; i < qp->batch.size(); ++i) {
      BatchWr& b = qp->batch[i];
      b.wr.sg_list = b.sge;
      b.wr.num_sge = static_cast<int>(b.nsge);
      b.wr.next = i + 1 < qp->batch.size() ? &qp->batch[i + 1].wr : nullptr;
    }
    ibv_send_wr* bad = nullptr;
    err = x->qp_base.context->ops.post_send(&x->qp_base, &qp->batch[0].wr, &bad);
  }
  qp->batch.clear();
  qp->batch_error = 0;
  return err;
}

void WrAbort(ibv_qp_ex* x) {
  SnQp* qp = QpX(x);
  qp->batch.clear();
  qp->batch_error = 0;
}

}  // namespace

void InstallQpExOps(SnQp* qp) {
  ibv_qp_ex& x = qp->qpx;
  x.wr_atomic_cmp_swp = WrCas;
  x.wr_atomic_fetch_add = WrFaa;
  x.wr_bind_mw = WrBindMw;
  x.wr_local_inv = WrLocalInv;
  x.wr_rdma_read = WrRdmaRead;
  x.wr_rdma_write = WrRdmaWrite;
  x.wr_rdma_write_imm = WrRdmaWriteImm;
  x.wr_send = WrSend;
  x.wr_send_imm = WrSendImm;
  x.wr_send_inv = WrSendInv;
  x.wr_send_tso = WrSendTso;
  x.wr_set_ud_addr = WrSetUdAddr;
  x.wr_set_xrc_srqn = WrSetXrc;
  x.wr_set_inline_data = WrSetInline;
  x.wr_set_inline_data_list = WrSetInlineList;
  x.wr_set_sge = WrSetSge;
  x.wr_set_sge_list = WrSetSgeList;
  x.wr_start = WrStart;
  x.wr_complete = WrComplete;
  x.wr_abort = WrAbort;
  x.wr_atomic_write = WrAtomicWrite;
}

}  // namespace rdmasan::softnic
