// softnic data path: post, execute, complete, poll, flush.
//
// The requester executes its own work requests at post time (and retries
// RNR-stalled ones from its later post/poll/wait calls), under the fabric
// lock: it validates every key against the shared MR table, takes the
// responder's receive WQE, moves the payload with one copy (memcpy within a
// process, process_vm_writev/readv across processes, or staged inside the
// completion for small SENDs, scattered by the receiver's poll), and writes
// the completions.  Hardware semantics kept: a WR occupies its SQ slot until
// the completion that retires it is polled (a signaled completion retires
// every earlier WR of the SQ); receive slots likewise; errors move the QP to
// ERR and every outstanding WR is flushed with WR_FLUSH_ERR.
//
// May not: touch memory outside what a valid key grants, allocate on the
// post/poll path, or call the application.
#include <endian.h>
#include <errno.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "softnic/internal.h"

namespace rdmasan::softnic {
namespace {

constexpr int kPending = -1;  // RNR: stays in the SQ

// Responder's RNR NAK timer (IB spec table 45), in nanoseconds.
uint64_t RnrTimerNs(uint32_t code) {
  static constexpr uint32_t kUs[32] = {655360, 10,    20,    30,    40,    60,    80,     120,
                                       160,    240,   320,   480,   640,   960,   1280,   1920,
                                       2560,   3840,  5120,  7680,  10240, 15360, 20480,  30720,
                                       40960,  61440, 81920, 122880, 163840, 245760, 327680, 491520};
  return uint64_t(kUs[code & 31]) * 1000;
}

ibv_wc_opcode WcOpcode(uint32_t wr_opcode) {
  switch (wr_opcode) {
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return IBV_WC_RDMA_WRITE;
    case IBV_WR_RDMA_READ:
      return IBV_WC_RDMA_READ;
    case IBV_WR_ATOMIC_CMP_AND_SWP:
      return IBV_WC_COMP_SWAP;
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return IBV_WC_FETCH_ADD;
    default:
      return IBV_WC_SEND;
  }
}

struct Seg {
  uint64_t va;  // in the owner's address space
  uint32_t len;
};

// Validates a local scatter list against the MR table: every non-empty SGE
// must name a live MR of `pd` owned by `proc`, lie inside it and have the
// access `need`.  Translates to virtual addresses.
bool ValidateSges(ShmHeader* h, uint32_t proc, uint32_t pd, const ShmSge* sge, uint32_t n, uint32_t need,
                  Seg* out, uint32_t* nout, uint64_t* total) {
  *nout = 0;
  *total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (sge[i].length == 0) continue;
    uint32_t slot = sge[i].lkey >> 8;
    if (slot >= kMaxMrs) return false;
    const ShmMr& m = h->mrs[slot];
    if (!m.in_use || m.key != sge[i].lkey || m.proc != proc || m.pd != pd) return false;
    if ((m.access & need) != need) return false;
    if (sge[i].addr < m.iova || sge[i].addr + sge[i].length > m.iova + m.length ||
        sge[i].addr + sge[i].length < sge[i].addr)
      return false;
    out[*nout] = {m.addr + (sge[i].addr - m.iova), sge[i].length};
    ++*nout;
    *total += sge[i].length;
  }
  return true;
}

// Validates an rkey access of [addr, addr+len) for the responder QP.
bool ValidateRkey(ShmHeader* h, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
                  uint64_t* va) {
  if (len == 0) {
    *va = 0;
    return true;
  }
  uint32_t slot = rkey >> 8;
  if (slot >= kMaxMrs) return false;
  const ShmMr& m = h->mrs[slot];
  if (!m.in_use || m.key != rkey || m.proc != resp.proc || m.pd != resp.pd) return false;
  if ((m.access & need) != need || (resp.access & need) != need) return false;
  if (addr < m.iova || addr + len > m.iova + m.length || addr + len < addr) return false;
  *va = m.addr + (addr - m.iova);
  return true;
}

// Copies `len` bytes from `src` (in process `src_pid`, or ours) to `dst` (in
// `dst_pid`, or ours).  One side is always ours.  Returns 0 or an errno.
int Move(pid_t self, pid_t dst_pid, const Seg* dst, uint32_t ndst, pid_t src_pid, const Seg* src, uint32_t nsrc) {
  if (dst_pid == self && src_pid == self) {
    uint32_t di = 0, si = 0;
    uint64_t doff = 0, soff = 0;
    while (di < ndst && si < nsrc) {
      uint64_t n = std::min<uint64_t>(dst[di].len - doff, src[si].len - soff);
      memmove(reinterpret_cast<void*>(dst[di].va + doff), reinterpret_cast<const void*>(src[si].va + soff), n);
      doff += n;
      soff += n;
      if (doff == dst[di].len) ++di, doff = 0;
      if (soff == src[si].len) ++si, soff = 0;
    }
    return 0;
  }
  iovec liov[kMaxSge + 2], riov[kMaxSge + 2];
  const bool write = src_pid == self;
  const Seg* l = write ? src : dst;
  const Seg* r = write ? dst : src;
  uint32_t nl = write ? nsrc : ndst, nr = write ? ndst : nsrc;
  uint64_t total = 0;
  for (uint32_t i = 0; i < nl; ++i) {
    liov[i] = {reinterpret_cast<void*>(l[i].va), l[i].len};
    total += l[i].len;
  }
  uint64_t rtotal = 0;
  for (uint32_t i = 0; i < nr; ++i) {
    riov[i] = {reinterpret_cast<void*>(r[i].va), r[i].len};
    rtotal += r[i].len;
  }
  total = std::min(total, rtotal);
  if (total == 0) return 0;
  pid_t peer = write ? dst_pid : src_pid;
  ssize_t n = write ? process_vm_writev(peer, liov, nl, riov, nr, 0) : process_vm_readv(peer, liov, nl, riov, nr, 0);
  if (n < 0) return errno;
  return static_cast<uint64_t>(n) == total ? 0 : EFAULT;
}

struct Exec {
  Process* p;
  ShmHeader* h;
  SnQp* qp;
  pid_t self;
};

ShmQp* FindQp(ShmHeader* h, uint32_t qpn) {
  uint32_t slot = qpn & 0xfff;
  if (slot >= kMaxQps) return nullptr;
  ShmQp& q = h->qps[slot];
  return (q.in_use && q.qpn == qpn) ? &q : nullptr;
}

bool CanReceive(const ShmQp& q) {
  auto s = q.state.load(std::memory_order_relaxed);
  return s == IBV_QPS_RTR || s == IBV_QPS_RTS || s == IBV_QPS_SQD;
}

// Takes the next receive WQE of the responder (its SRQ or RQ); nullptr if
// none is posted.
ShmRecvWqe* TakeRecv(Exec& x, ShmQp& resp, uint32_t* srq_slot) {
  ShmRq* rq = &resp.rq;
  *srq_slot = kNone;
  if (resp.srq != kNone) {
    ShmSrq& s = x.h->srqs[resp.srq];
    if (!s.in_use) return nullptr;
    rq = &s.rq;
    *srq_slot = resp.srq;
  }
  if (rq->tail == rq->head) return nullptr;
  auto* w = x.p->fab->At<ShmRecvWqe>(rq->ring_off + (rq->tail % rq->nslots) * rq->stride);
  ++rq->tail;
  if (*srq_slot != kNone) {
    ShmSrq& s = x.h->srqs[*srq_slot];
    if (s.armed_limit && rq->head - rq->tail < s.srq_limit) {
      s.armed_limit = 0;
      RaiseAsyncLocked(x.p, s.ctx, IBV_EVENT_SRQ_LIMIT_REACHED, kObjSrq, *srq_slot);
    }
  }
  return w;
}

void RecvCompletion(Exec& x, ShmQp& resp, ShmRecvWqe* w, ShmCqe& c, uint32_t status) {
  c.wr_id = w->wr_id;
  c.status = status;
  c.qp_num = resp.qpn;
  c.qp_slot = static_cast<uint32_t>(&resp - x.h->qps);
  c.src_qp = x.qp->shm->qpn;
  c.slid = 1;
  c.is_send = 0;
  PushCqeLocked(x.p, resp.recv_cq, c);
}

// Responder-side fatal error: the responder QP goes to ERR (RC class C).
void ResponderError(Exec& x, ShmQp& resp, uint32_t event) {
  if (resp.type != IBV_QPT_RC) return;
  MoveToErrorLocked(x.p, &resp);
  if (event) RaiseAsyncLocked(x.p, resp.ctx, event, kObjQp, static_cast<uint32_t>(&resp - x.h->qps));
}

// Remote peer vanished (or never existed): RC requester sees retry exceeded.
int NoResponder(Exec& x) {
  if (x.qp->shm->type == IBV_QPT_RC) {
    x.qp->shm->remote_gone = 1;
    return IBV_WC_RETRY_EXC_ERR;
  }
  return IBV_WC_SUCCESS;  // UC/UD: silently dropped on the wire
}

bool PeerAlive(Exec& x, const ShmQp& resp) {
  if (resp.proc == x.p->fab->self_proc()) return true;
  // Every 10 ms, confirm that the peer's process still runs: a SEND staged
  // into a dead process's CQ would otherwise succeed forever.
  uint64_t now = NowNs();
  if (now - x.qp->last_peer_check_ns < 10 * 1000 * 1000ull) return true;
  x.qp->last_peer_check_ns = now;
  return x.p->fab->ProcAlive(resp.proc);
}

int ExecuteSendLike(Exec& x, SendWqe& w, const Seg* lseg, uint32_t nl, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  const bool ud = me.type == IBV_QPT_UD;
  ShmQp* resp = FindQp(x.h, ud ? w.remote_qpn : me.dest_qpn);
  if (!resp || resp->type != me.type || !PeerAlive(x, *resp)) return NoResponder(x);
  if (!CanReceive(*resp)) return ud ? IBV_WC_SUCCESS : NoResponder(x);
  if (ud) {
    uint32_t qkey = (w.remote_qkey & 0x80000000u) ? me.qkey : w.remote_qkey;
    if (qkey != resp->qkey) return IBV_WC_SUCCESS;  // dropped, like the wire
    if (len > 4096) return IBV_WC_LOC_LEN_ERR;
  }
  const bool with_imm = w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  const bool write_imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  uint64_t remote_va = 0;
  if (write_imm) {
    if (!ValidateRkey(x.h, *resp, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_WRITE, &remote_va)) {
      if (me.type == IBV_QPT_UC) return IBV_WC_SUCCESS;
      ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
      return IBV_WC_REM_ACCESS_ERR;
    }
  }
  uint32_t srq_slot;
  ShmRecvWqe* rw = TakeRecv(x, *resp, &srq_slot);
  if (!rw) {
    if (me.type != IBV_QPT_RC) return IBV_WC_SUCCESS;
    if (me.rnr_retry == 0) return IBV_WC_RNR_RETRY_EXC_ERR;
    uint64_t now = NowNs();
    if (!w.rnr_since_ns) w.rnr_since_ns = now;
    if (me.rnr_retry != 7 && now - w.rnr_since_ns > RnrTimerNs(resp->min_rnr_timer) * me.rnr_retry)
      return IBV_WC_RNR_RETRY_EXC_ERR;
    return kPending;
  }
  const pid_t rpid = x.h->procs[resp->proc].pid;
  const pid_t dst_pid = resp->proc == x.p->fab->self_proc() ? x.self : rpid;
  ShmCqe c{};
  c.opcode = write_imm ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  if (with_imm) {
    c.imm_data = w.imm;
    c.wc_flags |= IBV_WC_WITH_IMM;
  }
  c.wc_flags |= (w.flags & IBV_SEND_SOLICITED) ? 0x80000000u : 0;  // solicited marker, stripped at poll
  c.byte_len = static_cast<uint32_t>(len);
  const uint32_t resp_pd = srq_slot != kNone ? x.h->srqs[srq_slot].pd : resp->pd;
  if (write_imm) {
    Seg dst{remote_va, static_cast<uint32_t>(len)};
    int e = len ? Move(x.self, dst_pid, &dst, 1, x.self, lseg, nl) : 0;
    if (e == ESRCH) return NoResponder(x);
    if (e) {
      ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
      return IBV_WC_REM_ACCESS_ERR;
    }
    RecvCompletion(x, *resp, rw, c, IBV_WC_SUCCESS);
    return IBV_WC_SUCCESS;
  }
  // Receive buffers: validate against the responder's MRs.
  Seg rseg[kMaxSge + 1];
  uint32_t nr;
  uint64_t cap;
  ShmSge grh_sge;
  if (!ValidateSges(x.h, resp->proc, resp_pd, rw->sge, std::min(rw->num_sge, kMaxSge), IBV_ACCESS_LOCAL_WRITE,
                    rseg, &nr, &cap)) {
    RecvCompletion(x, *resp, rw, c, IBV_WC_LOC_PROT_ERR);
    if (me.type == IBV_QPT_RC) {
      MoveToErrorLocked(x.p, resp);
      return IBV_WC_REM_OP_ERR;
    }
    if (!ud) MoveToErrorLocked(x.p, resp);
    return IBV_WC_SUCCESS;
  }
  (void)grh_sge;
  uint64_t need = len + (ud ? 40 : 0);
  if (need > cap) {
    RecvCompletion(x, *resp, rw, c, IBV_WC_LOC_LEN_ERR);
    if (me.type == IBV_QPT_RC) {
      MoveToErrorLocked(x.p, resp);
      return IBV_WC_REM_INV_REQ_ERR;
    }
    if (me.type == IBV_QPT_UC) MoveToErrorLocked(x.p, resp);
    return IBV_WC_SUCCESS;
  }
  // Source: (GRH for UD) + payload.
  Seg src[kMaxSge + 1];
  uint32_t ns = 0;
  ibv_grh grh{};
  if (ud) {
    if (w.has_ah && w.ah.is_global) {
      grh.version_tclass_flow = htobe32((6u << 28) | (uint32_t(w.ah.grh.traffic_class) << 20) |
                                        (w.ah.grh.flow_label & 0xfffff));
      grh.paylen = htobe16(static_cast<uint16_t>(len));
      grh.next_hdr = 0x1b;
      grh.hop_limit = w.ah.grh.hop_limit;
      grh.sgid.global.subnet_prefix = htobe64(0xfe80000000000000ull);
      grh.sgid.global.interface_id = htobe64(0x0002c9fffe5a0001ull);
      grh.dgid = w.ah.grh.dgid;
      c.wc_flags |= IBV_WC_GRH;
    }
    src[ns++] = {reinterpret_cast<uint64_t>(&grh), 40};
    c.byte_len = static_cast<uint32_t>(len + 40);
  }
  for (uint32_t i = 0; i < nl; ++i) src[ns++] = lseg[i];
  if (dst_pid != x.self && need <= kStageBytes && nr <= kStageSges) {
    // Small: travel inside the completion; the receiver scatters at poll.
    uint64_t off = 0;
    for (uint32_t i = 0; i < ns; ++i) {
      memcpy(c.stage + off, reinterpret_cast<const void*>(src[i].va), src[i].len);
      off += src[i].len;
    }
    c.stage_len = static_cast<uint32_t>(need);
    c.stage_nsge = static_cast<uint8_t>(nr);
    for (uint32_t i = 0; i < nr; ++i) c.stage_sge[i] = {rseg[i].va, rseg[i].len, 0};
  } else if (need) {
    int e = Move(x.self, dst_pid, rseg, nr, x.self, src, ns);
    if (e == ESRCH) return NoResponder(x);
    if (e) {
      RecvCompletion(x, *resp, rw, c, IBV_WC_LOC_PROT_ERR);
      if (me.type == IBV_QPT_RC) {
        MoveToErrorLocked(x.p, resp);
        return IBV_WC_REM_OP_ERR;
      }
      return IBV_WC_SUCCESS;
    }
  }
  RecvCompletion(x, *resp, rw, c, IBV_WC_SUCCESS);
  return IBV_WC_SUCCESS;
}

int ExecuteRdma(Exec& x, SendWqe& w, Seg* lseg, uint32_t nl, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  ShmQp* resp = FindQp(x.h, me.dest_qpn);
  if (!resp || resp->type != me.type || !PeerAlive(x, *resp)) return NoResponder(x);
  if (!CanReceive(*resp)) return NoResponder(x);
  const pid_t dst_pid = resp->proc == x.p->fab->self_proc() ? x.self : x.h->procs[resp->proc].pid;
  uint64_t va = 0;
  switch (w.opcode) {
    case IBV_WR_RDMA_WRITE: {
      if (!ValidateRkey(x.h, *resp, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_WRITE, &va)) {
        if (me.type == IBV_QPT_UC) return IBV_WC_SUCCESS;
        ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
        return IBV_WC_REM_ACCESS_ERR;
      }
      if (!len) return IBV_WC_SUCCESS;
      Seg dst{va, static_cast<uint32_t>(len)};
      int e = Move(x.self, dst_pid, &dst, 1, x.self, lseg, nl);
      if (e == ESRCH) return NoResponder(x);
      if (e) {
        ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
        return IBV_WC_REM_ACCESS_ERR;
      }
      if (dst_pid != x.self) ++x.h->ops;
      return IBV_WC_SUCCESS;
    }
    case IBV_WR_RDMA_READ: {
      if (!ValidateRkey(x.h, *resp, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_READ, &va)) {
        ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
        return IBV_WC_REM_ACCESS_ERR;
      }
      if (!len) return IBV_WC_SUCCESS;
      Seg src{va, static_cast<uint32_t>(len)};
      int e = Move(x.self, x.self, lseg, nl, dst_pid, &src, 1);
      if (e == ESRCH) return NoResponder(x);
      if (e) {
        ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
        return IBV_WC_REM_ACCESS_ERR;
      }
      return IBV_WC_SUCCESS;
    }
    default: {  // atomics
      if (len != 8 || nl != 1) return IBV_WC_LOC_LEN_ERR;
      if (w.remote_addr % 8) {
        ResponderError(x, *resp, IBV_EVENT_QP_REQ_ERR);
        return IBV_WC_REM_INV_REQ_ERR;
      }
      if (!ValidateRkey(x.h, *resp, w.rkey, w.remote_addr, 8, IBV_ACCESS_REMOTE_ATOMIC, &va)) {
        ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
        return IBV_WC_REM_ACCESS_ERR;
      }
      uint64_t old = 0;
      if (dst_pid == x.self) {
        auto* target = reinterpret_cast<uint64_t*>(va);
        if (w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
          old = __atomic_fetch_add(target, w.compare_add, __ATOMIC_SEQ_CST);
        } else {
          old = w.compare_add;
          __atomic_compare_exchange_n(target, &old, w.swap, false, __ATOMIC_SEQ_CST, __ATOMIC_SEQ_CST);
        }
      } else {
        // All softnic atomics run under the fabric lock, so read-modify-write
        // through the peer's memory is atomic with respect to each other.
        Seg rs{va, 8}, ls{reinterpret_cast<uint64_t>(&old), 8};
        int e = Move(x.self, x.self, &ls, 1, dst_pid, &rs, 1);
        if (e == ESRCH) return NoResponder(x);
        if (e) return IBV_WC_REM_ACCESS_ERR;
        uint64_t nv = old;
        if (w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD)
          nv = old + w.compare_add;
        else if (old == w.compare_add)
          nv = w.swap;
        if (nv != old) {
          Seg ns{reinterpret_cast<uint64_t>(&nv), 8};
          e = Move(x.self, dst_pid, &rs, 1, x.self, &ns, 1);
          if (e) return IBV_WC_REM_ACCESS_ERR;
        }
      }
      memcpy(reinterpret_cast<void*>(lseg[0].va), &old, 8);
      return IBV_WC_SUCCESS;
    }
  }
}

int Execute(Exec& x, SendWqe& w, uint32_t* byte_len) {
  ShmQp& me = *x.qp->shm;
  Seg lseg[kMaxSge];
  uint32_t nl = 0;
  uint64_t len = 0;
  const bool to_local = w.opcode == IBV_WR_RDMA_READ || w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                        w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  if (w.flags & IBV_SEND_INLINE) {
    if (w.inline_len) lseg[nl++] = {reinterpret_cast<uint64_t>(w.inline_data), w.inline_len};
    len = w.inline_len;
  } else if (!ValidateSges(x.h, x.p->fab->self_proc(), me.pd, w.sge, w.num_sge,
                           to_local ? IBV_ACCESS_LOCAL_WRITE : 0, lseg, &nl, &len)) {
    return IBV_WC_LOC_PROT_ERR;
  }
  if (len > (1ull << 31)) return IBV_WC_LOC_LEN_ERR;
  *byte_len = static_cast<uint32_t>(len);
  switch (w.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return ExecuteSendLike(x, w, lseg, nl, len);
    default:
      return ExecuteRdma(x, w, lseg, nl, len);
  }
}

void SendCompletionLocked(Process* p, SnQp* qp, const SendWqe& w, uint64_t index, uint32_t status,
                          uint32_t byte_len) {
  ShmCqe c{};
  c.wr_id = w.wr_id;
  c.status = status;
  c.opcode = WcOpcode(w.opcode);
  c.byte_len = (w.opcode == IBV_WR_RDMA_READ || c.opcode == IBV_WC_COMP_SWAP || c.opcode == IBV_WC_FETCH_ADD)
                   ? byte_len
                   : 0;
  c.qp_num = qp->shm->qpn;
  c.qp_slot = qp->slot;
  c.is_send = 1;
  c.sq_index = static_cast<uint32_t>(index);
  PushCqeLocked(p, qp->shm->send_cq, c);
}

// Runs pending WRs in order, fabric lock and sq_mu held.
void RunSqLocked(Process* p, SnQp* qp) {
  Exec x{p, p->fab->hdr(), qp, p->pid};
  const uint32_t size = static_cast<uint32_t>(qp->sq.size());
  while (qp->sq_exec < qp->sq_posted) {
    auto state = qp->shm->state.load(std::memory_order_relaxed);
    if (state == IBV_QPS_ERR) break;
    SendWqe& w = qp->sq[qp->sq_exec % size];
    uint32_t byte_len = 0;
    int st = Execute(x, w, &byte_len);
    if (st == kPending) return;
    const bool signaled = (w.flags & IBV_SEND_SIGNALED) || qp->shm->sq_sig_all;
    if (st != IBV_WC_SUCCESS || signaled) SendCompletionLocked(p, qp, w, qp->sq_exec, st, byte_len);
    ++qp->sq_exec;
    if (st != IBV_WC_SUCCESS) {
      MoveToErrorLocked(p, qp->shm);
      break;
    }
  }
  if (qp->shm->state.load(std::memory_order_relaxed) == IBV_QPS_ERR) {
    while (qp->sq_exec < qp->sq_posted) {
      SendWqe& w = qp->sq[qp->sq_exec % size];
      SendCompletionLocked(p, qp, w, qp->sq_exec, IBV_WC_WR_FLUSH_ERR, 0);
      ++qp->sq_exec;
    }
  }
}

bool OpcodeAllowed(uint32_t type, uint32_t op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
      return true;
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return type == IBV_QPT_RC || type == IBV_QPT_UC;
    case IBV_WR_RDMA_READ:
    case IBV_WR_ATOMIC_CMP_AND_SWP:
    case IBV_WR_ATOMIC_FETCH_AND_ADD:
      return type == IBV_QPT_RC;
    default:
      return false;
  }
}

int PostRecvCommon(Process* p, ShmRq* rq, std::atomic<uint32_t>* outstanding, uint32_t max_wr, uint32_t max_sge,
                   ibv_recv_wr* wr, ibv_recv_wr** bad, ShmQp* flush_qp) {
  FabricLock lock(p->fab);
  for (; wr; wr = wr->next) {
    if (wr->num_sge < 0 || static_cast<uint32_t>(wr->num_sge) > max_sge || (wr->num_sge > 0 && !wr->sg_list)) {
      *bad = wr;
      return EINVAL;
    }
    if (outstanding->load(std::memory_order_relaxed) + 1 > max_wr) {
      *bad = wr;
      return ENOMEM;
    }
    auto* w = p->fab->At<ShmRecvWqe>(rq->ring_off + (rq->head % rq->nslots) * rq->stride);
    w->wr_id = wr->wr_id;
    w->num_sge = wr->num_sge;
    for (int i = 0; i < wr->num_sge; ++i) w->sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    ++rq->head;
    outstanding->fetch_add(1, std::memory_order_relaxed);
  }
  if (flush_qp && flush_qp->state.load(std::memory_order_relaxed) == IBV_QPS_ERR) MoveToErrorLocked(p, flush_qp);
  return 0;
}

}  // namespace

bool PushCqeLocked(Process* p, uint32_t cq_slot, const ShmCqe& in) {
  ShmHeader* h = p->fab->hdr();
  if (cq_slot >= kMaxCqs) return false;
  ShmCq& cq = h->cqs[cq_slot];
  if (!cq.in_use) return false;
  uint64_t cons = cq.cons.load(std::memory_order_acquire);
  if (cq.prod - cons >= cq.cqe) {
    if (!cq.overrun) {
      cq.overrun = 1;
      RaiseAsyncLocked(p, cq.ctx, IBV_EVENT_CQ_ERR, kObjCq, cq_slot);
    }
    return false;
  }
  auto* ring = p->fab->At<ShmCqe>(cq.ring_off);
  ShmCqe& slot = ring[cq.prod & (cq.nslots - 1)];
  const bool solicited = (in.wc_flags & 0x80000000u) || in.status != IBV_WC_SUCCESS;
  // Copy everything but seq, then publish.
  memcpy(reinterpret_cast<uint8_t*>(&slot) + sizeof(slot.seq), reinterpret_cast<const uint8_t*>(&in) + sizeof(in.seq),
         offsetof(ShmCqe, stage) - sizeof(slot.seq));
  if (in.stage_len) memcpy(slot.stage, in.stage, in.stage_len);
  slot.ts_ns = NowNs();
  slot.seq.store(cq.prod + 1, std::memory_order_release);
  ++cq.prod;
  std::atomic_thread_fence(std::memory_order_seq_cst);
  uint32_t armed = cq.armed.load(std::memory_order_relaxed);
  if (armed && (armed == 1 || solicited) && cq.channel != kNone && cq.armed.exchange(0) != 0) {
    uint32_t msg[2] = {cq_slot, cq.gen};
    SendChannelEvent(p, cq.channel, cq.channel_gen, msg, sizeof(msg));
  }
  return true;
}

void MoveToErrorLocked(Process* p, ShmQp* q) {
  ShmHeader* h = p->fab->hdr();
  q->state.store(IBV_QPS_ERR);
  const uint32_t slot = static_cast<uint32_t>(q - h->qps);
  if (q->srq == kNone) {
    ShmRq& rq = q->rq;
    while (rq.tail < rq.head) {
      auto* w = p->fab->At<ShmRecvWqe>(rq.ring_off + (rq.tail % rq.nslots) * rq.stride);
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

void FlushSq(Process* p, SnQp* qp) {
  FabricLock lock(p->fab);
  RunSqLocked(p, qp);
}

int PostSend(ibv_qp* ibqp, ibv_send_wr* wr, ibv_send_wr** bad) {
  Process* p = GetProcess();
  SnQp* qp = Qp(ibqp);
  if (!p) {
    *bad = wr;
    return ENODEV;
  }
  std::lock_guard<std::mutex> g(qp->sq_mu);
  auto state = qp->shm->state.load(std::memory_order_relaxed);
  if (state != IBV_QPS_RTS && state != IBV_QPS_SQD && state != IBV_QPS_ERR) {
    *bad = wr;
    return EINVAL;
  }
  uint64_t retire_to = qp->sq_retire_to.load(std::memory_order_acquire);
  if (retire_to > qp->sq_retired) qp->sq_retired = retire_to;
  const uint32_t type = qp->shm->type;
  const uint32_t size = static_cast<uint32_t>(qp->sq.size());
  int rc = 0;
  for (; wr; wr = wr->next) {
    if (!OpcodeAllowed(type, wr->opcode) || wr->num_sge < 0 ||
        static_cast<uint32_t>(wr->num_sge) > qp->max_send_sge || (wr->num_sge > 0 && !wr->sg_list) ||
        (type == IBV_QPT_UD && !wr->wr.ud.ah)) {
      rc = EINVAL;
      break;
    }
    if (qp->sq_posted - qp->sq_retired + 1 > qp->max_send_wr) {
      rc = ENOMEM;
      break;
    }
    SendWqe& w = qp->sq[qp->sq_posted % size];
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.flags = wr->send_flags;
    w.imm = wr->imm_data;
    w.num_sge = wr->num_sge;
    w.rnr_since_ns = 0;
    w.inline_len = 0;
    w.has_ah = false;
    w.remote_addr = w.rkey = w.compare_add = w.swap = 0;
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.remote_addr = wr->wr.atomic.remote_addr;
      w.rkey = wr->wr.atomic.rkey;
      w.compare_add = wr->wr.atomic.compare_add;
      w.swap = wr->wr.atomic.swap;
    } else if (type != IBV_QPT_UD) {
      w.remote_addr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
    }
    if (type == IBV_QPT_UD) {
      w.remote_qpn = wr->wr.ud.remote_qpn;
      w.remote_qkey = wr->wr.ud.remote_qkey;
      w.ah = reinterpret_cast<SnAh*>(wr->wr.ud.ah)->attr;
      w.has_ah = true;
    }
    if (wr->send_flags & IBV_SEND_INLINE) {
      uint64_t total = 0;
      for (int i = 0; i < wr->num_sge; ++i) total += wr->sg_list[i].length;
      if (total > qp->max_inline || wr->opcode == IBV_WR_RDMA_READ || wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
          wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
        rc = EINVAL;
        break;
      }
      uint32_t off = 0;
      for (int i = 0; i < wr->num_sge; ++i) {
        memcpy(w.inline_data + off, reinterpret_cast<const void*>(wr->sg_list[i].addr), wr->sg_list[i].length);
        off += wr->sg_list[i].length;
      }
      w.inline_len = off;
    } else {
      for (int i = 0; i < wr->num_sge; ++i)
        w.sge[i] = {wr->sg_list[i].addr, wr->sg_list[i].length, wr->sg_list[i].lkey};
    }
    ++qp->sq_posted;
  }
  if (rc) *bad = wr;
  {
    FabricLock lock(p->fab);
    RunSqLocked(p, qp);
  }
  if (qp->sq_exec < qp->sq_posted) qp->send_cq->stalled.store(1, std::memory_order_relaxed);
  return rc;
}

int PostRecv(ibv_qp* ibqp, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Process* p = GetProcess();
  SnQp* qp = Qp(ibqp);
  if (!p || qp->srq) {
    *bad = wr;
    return p ? EINVAL : ENODEV;
  }
  if (qp->shm->state.load(std::memory_order_relaxed) == IBV_QPS_RESET) {
    *bad = wr;
    return EINVAL;
  }
  return PostRecvCommon(p, &qp->shm->rq, &qp->rq_outstanding, qp->max_recv_wr, qp->max_recv_sge, wr, bad,
                        qp->shm);
}

int PostSrqRecv(ibv_srq* ibsrq, ibv_recv_wr* wr, ibv_recv_wr** bad) {
  Process* p = GetProcess();
  SnSrq* srq = Srq(ibsrq);
  if (!p) {
    *bad = wr;
    return ENODEV;
  }
  return PostRecvCommon(p, &srq->shm->rq, &srq->outstanding, srq->shm->rq.max_wr, srq->shm->rq.max_sge, wr, bad,
                        nullptr);
}

namespace {

// Takes one completion (cq->mu held).  Returns false if none.
bool PollOne(Process* p, SnCq* cq, ibv_wc* wc) {
  ShmCq& s = *cq->shm;
  uint64_t cons = s.cons.load(std::memory_order_relaxed);
  ShmCqe& c = cq->ring[cons & (s.nslots - 1)];
  if (c.seq.load(std::memory_order_acquire) != cons + 1) return false;
  wc->wr_id = c.wr_id;
  wc->status = static_cast<ibv_wc_status>(c.status);
  wc->opcode = static_cast<ibv_wc_opcode>(c.opcode);
  wc->vendor_err = c.vendor_err;
  wc->byte_len = c.byte_len;
  wc->imm_data = c.imm_data;
  wc->qp_num = c.qp_num;
  wc->src_qp = c.src_qp;
  wc->wc_flags = c.wc_flags & ~0x80000000u;
  wc->pkey_index = c.pkey_index;
  wc->slid = c.slid;
  wc->sl = c.sl;
  wc->dlid_path_bits = c.dlid_path_bits;
  if (c.stage_nsge && c.status == IBV_WC_SUCCESS) {
    uint32_t off = 0;
    for (uint32_t i = 0; i < c.stage_nsge && off < c.stage_len; ++i) {
      uint32_t n = std::min(c.stage_sge[i].length, c.stage_len - off);
      memcpy(reinterpret_cast<void*>(c.stage_sge[i].addr), c.stage + off, n);
      off += n;
    }
  }
  cq->cur_ts = c.ts_ns;
  // Retire queue slots: the completion is now seen by the application.
  SnQp* qp = c.qp_slot < kMaxQps ? p->qps[c.qp_slot] : nullptr;
  if (qp && qp->shm->qpn == c.qp_num) {
    if (c.is_send) {
      uint64_t to = c.sq_index + 1;
      // sq_index is the low 32 bits of the WQE counter; rebuild the full one.
      uint64_t cur = qp->sq_retire_to.load(std::memory_order_relaxed);
      uint64_t full = (cur & ~0xffffffffull) | (to & 0xffffffffull);
      if (full < cur) full += 1ull << 32;
      qp->sq_retire_to.store(full, std::memory_order_release);
    } else if (qp->srq) {
      qp->srq->outstanding.fetch_sub(1, std::memory_order_relaxed);
    } else {
      qp->rq_outstanding.fetch_sub(1, std::memory_order_relaxed);
    }
  } else if (!c.is_send && c.qp_slot < kMaxQps) {
    // QP destroyed since; nothing to retire.
  }
  s.cons.store(cons + 1, std::memory_order_release);
  return true;
}

}  // namespace

void ProgressCq(Process* p, SnCq* cq) {
  std::lock_guard<std::mutex> g(p->mu);
  bool any_pending = false;
  const uint64_t now = NowNs();
  const bool check_peers = now - cq->last_peer_check_ns > 100 * 1000 * 1000ull;
  if (check_peers) cq->last_peer_check_ns = now;
  for (SnQp* qp : p->qps) {
    if (!qp || (qp->send_cq != cq && qp->recv_cq != cq)) continue;
    std::lock_guard<std::mutex> sq(qp->sq_mu);
    FabricLock lock(p->fab);
    ShmQp& s = *qp->shm;
    if (check_peers && s.type == IBV_QPT_RC && s.state.load() != IBV_QPS_ERR && s.state.load() >= IBV_QPS_RTR) {
      ShmQp* peer = FindQp(p->fab->hdr(), s.dest_qpn);
      if (!peer || !p->fab->ProcAlive(peer->proc)) {
        // The peer is gone: like a broken connection, the survivor's queues
        // flush instead of waiting forever.
        s.remote_gone = 1;
        MoveToErrorLocked(p, &s);
      }
    }
    if (qp->send_cq == cq) {
      RunSqLocked(p, qp);
      any_pending |= qp->sq_exec < qp->sq_posted;
    }
  }
  cq->stalled.store(any_pending ? 1 : 0, std::memory_order_relaxed);
}

int PollCq(ibv_cq* ibcq, int n, ibv_wc* wc) {
  Process* p = GetProcess();
  if (!p || n < 0) return -1;
  SnCq* cq = Cq(ibcq);
  int got = 0;
  {
    std::lock_guard<std::mutex> g(cq->mu);
    while (got < n && PollOne(p, cq, &wc[got])) ++got;
  }
  if (got == 0) {
    uint32_t att = cq->shm->attention.load(std::memory_order_relaxed);
    if (cq->stalled.load(std::memory_order_relaxed) || att != cq->seen_attention || ++cq->empty_polls >= 4096) {
      cq->seen_attention = att;
      cq->empty_polls = 0;
      ProgressCq(p, cq);
      std::lock_guard<std::mutex> g(cq->mu);
      while (got < n && PollOne(p, cq, &wc[got])) ++got;
    }
  }
  return got;
}

int ReqNotifyCq(ibv_cq* ibcq, int solicited_only) {
  SnCq* cq = Cq(ibcq);
  if (!ibcq->channel) return EINVAL;
  cq->shm->armed.store(solicited_only ? 2 : 1, std::memory_order_seq_cst);
  return 0;
}

// ------------------------------------------------------------ cq_ex ops --

namespace {

SnCq* CqX(ibv_cq_ex* x) { return reinterpret_cast<SnCq*>(x); }

int StartPoll(ibv_cq_ex* x, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  Process* p = GetProcess();
  if (!p) return ENODEV;
  SnCq* cq = CqX(x);
  cq->mu.lock();
  if (!PollOne(p, cq, &cq->cur)) {
    cq->mu.unlock();
    // Drive pending work so a later start_poll can find it.
    uint32_t att = cq->shm->attention.load(std::memory_order_relaxed);
    if (cq->stalled.load(std::memory_order_relaxed) || att != cq->seen_attention || ++cq->empty_polls >= 4096) {
      cq->seen_attention = att;
      cq->empty_polls = 0;
      ProgressCq(p, cq);
    }
    return ENOENT;
  }
  x->wr_id = cq->cur.wr_id;
  x->status = cq->cur.status;
  return 0;
}

int NextPoll(ibv_cq_ex* x) {
  Process* p = GetProcess();
  SnCq* cq = CqX(x);
  if (!p || !PollOne(p, cq, &cq->cur)) return ENOENT;
  x->wr_id = cq->cur.wr_id;
  x->status = cq->cur.status;
  return 0;
}

void EndPoll(ibv_cq_ex* x) { CqX(x)->mu.unlock(); }
ibv_wc_opcode ReadOpcode(ibv_cq_ex* x) { return CqX(x)->cur.opcode; }
uint32_t ReadVendorErr(ibv_cq_ex* x) { return CqX(x)->cur.vendor_err; }
uint32_t ReadByteLen(ibv_cq_ex* x) { return CqX(x)->cur.byte_len; }
__be32 ReadImm(ibv_cq_ex* x) { return CqX(x)->cur.imm_data; }
uint32_t ReadQpNum(ibv_cq_ex* x) { return CqX(x)->cur.qp_num; }
uint32_t ReadSrcQp(ibv_cq_ex* x) { return CqX(x)->cur.src_qp; }
unsigned ReadWcFlags(ibv_cq_ex* x) { return CqX(x)->cur.wc_flags; }
uint32_t ReadSlid(ibv_cq_ex* x) { return CqX(x)->cur.slid; }
uint8_t ReadSl(ibv_cq_ex* x) { return CqX(x)->cur.sl; }
uint8_t ReadDlidPathBits(ibv_cq_ex* x) { return CqX(x)->cur.dlid_path_bits; }
uint64_t ReadTs(ibv_cq_ex* x) { return CqX(x)->cur_ts; }
uint64_t ReadWallclock(ibv_cq_ex* x) { return CqX(x)->cur_ts; }

}  // namespace

void InstallCqExOps(SnCq* cq) {
  ibv_cq_ex& x = cq->cqx;
  x.start_poll = StartPoll;
  x.next_poll = NextPoll;
  x.end_poll = EndPoll;
  x.read_opcode = ReadOpcode;
  x.read_vendor_err = ReadVendorErr;
  x.read_byte_len = ReadByteLen;
  x.read_imm_data = ReadImm;
  x.read_qp_num = ReadQpNum;
  x.read_src_qp = ReadSrcQp;
  x.read_wc_flags = ReadWcFlags;
  x.read_slid = ReadSlid;
  x.read_sl = ReadSl;
  x.read_dlid_path_bits = ReadDlidPathBits;
  x.read_completion_ts = ReadTs;
  x.read_completion_wallclock_ns = ReadWallclock;
}

// ------------------------------------------------------------ qp_ex ops --

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
void WrBindMw(ibv_qp_ex* x, ibv_mw*, uint32_t, const ibv_mw_bind_info*) { WrUnsupported(x); }
void WrLocalInv(ibv_qp_ex* x, uint32_t) { WrUnsupported(x); }
void WrSendInv(ibv_qp_ex* x, uint32_t) { WrUnsupported(x); }
void WrSendTso(ibv_qp_ex* x, void*, uint16_t, uint16_t) { WrUnsupported(x); }
void WrSetXrc(ibv_qp_ex* x, uint32_t) { WrUnsupported(x); }
void WrAtomicWrite(ibv_qp_ex* x, uint32_t, uint64_t, const void*) { WrUnsupported(x); }

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
    memcpy(b->inl + off, bufs[i].addr, bufs[i].length);
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
