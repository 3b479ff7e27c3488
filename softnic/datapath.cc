// softnic data path: execute a send, complete it, flush (ibv_post_send
// itself is post_send.cc).
//
// The requester executes its own work requests at post time (and retries
// RNR-stalled ones from its later post/poll/wait calls), under the fabric
// lock: it validates every key against the MR tables (access.h), takes the
// responder's receive WQE, moves the payload with one copy (a memmove
// within a process, process_vm_writev/readv across processes, or staged
// inside the completion for small SENDs, scattered by the receiver's poll),
// and writes the completions.  No copy faults (access.h Move): memory
// unmapped under a live MR fails it, and the WR completes with LOC_PROT_ERR
// when the requester's own memory is gone, else with the responder-side
// error.  Hardware semantics kept: a WR occupies its SQ slot until the
// completion that retires it is polled (a signaled completion retires
// every earlier WR of the SQ); receive slots likewise; errors move the QP
// to ERR and every outstanding WR is flushed with WR_FLUSH_ERR.  Posting
// receives is in recv.cc, the ibv_wr_* builder in qp_ex.cc, polling in
// cq.cc; the common small SEND in one frame in small_send.cc; SENDs to a
// tag-matching SRQ in tag_matching.cc; RDMA WRITE, READ
// and the atomics in one_sided.cc (execute.h: what these rooms share);
// windows (BIND_MW, LOCAL_INV, the invalidation of SEND_WITH_INV) in
// mw.cc.  Without chaos IBV_SEND_FENCE needs nothing more: a WR runs only
// after every earlier WR of its QP, RDMA READs and atomics included, has
// landed.  Under
// `--chaos=place` a message may land in chunks over several of those calls
// (placement.h): its WR stays pending, and the WRs behind it wait, until
// its last chunk; `--chaos=gather` reads a source late or twice the same
// way; `--chaos=fence`, `relaxed` and `lag` let a WR run before the READ
// or relaxed WRITE ahead of it, or a QP wait while others run
// (exec_order.h).  An error completion's reason goes to the fabric's ring
// (explain.cc).
//
// May not: touch memory outside what a valid key grants, allocate on the
// post/poll path, or call the application.
#include <endian.h>
#include <errno.h>
#include <unistd.h>

#include <infiniband/tm_types.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "softnic/access.h"
#include "softnic/exec_order.h"
#include "softnic/execute.h"
#include "softnic/fingerprint.h"
#include "softnic/internal.h"
#include "softnic/placement.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace exec {

// Responder's RNR NAK timer (IB spec table 45), in nanoseconds.
uint64_t RnrTimerNs(uint32_t code) {
  static constexpr uint32_t kUs[32] = {655360, 10,    20,    30,     40,     60,     80,     120,
                                       160,    240,   320,   480,    640,    960,    1280,   1920,
                                       2560,   3840,  5120,  7680,   10240,  15360,  20480,  30720,
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
    case IBV_WR_ATOMIC_WRITE:
      return IBV_WC_ATOMIC_WRITE;
    case IBV_WR_BIND_MW:
      return IBV_WC_BIND_MW;
    case IBV_WR_LOCAL_INV:
      return IBV_WC_LOCAL_INV;
    default:
      return IBV_WC_SEND;
  }
}

// Whether a requester of type `me` talks to a responder of type `resp`.
bool Peers(uint32_t me, uint32_t resp) {
  return me == IBV_QPT_XRC_SEND ? resp == IBV_QPT_XRC_RECV : resp == me;
}

// Takes the next receive WQE of the responder (its SRQ or RQ) into `copy`;
// nullptr if none is posted.  *corrupt: the queue's shared fields do not
// describe a ring (its owner sees a dead responder).
ShmRecvWqe* TakeRecv(Exec& x, ShmQp& resp, uint32_t* srq_slot, RecvCopy* copy, bool* corrupt) {
  ShmRq* rq = &resp.rq;
  *srq_slot = kNone;
  *corrupt = false;
  const uint32_t srq = resp.type == IBV_QPT_XRC_RECV ? x.xrc_srq : resp.srq;
  if (srq != kNone) {
    if (srq >= kMaxSrqs) {
      *corrupt = true;
      return nullptr;
    }
    ShmSrq& s = x.h->srqs[srq];
    if (!s.in_use) return nullptr;
    rq = &s.rq;
    *srq_slot = srq;
  }
  switch (TakeFromRing(x, *rq, copy)) {
    case Take::kEmpty:
      return nullptr;
    case Take::kCorrupt:
      *corrupt = true;
      return nullptr;
    case Take::kTaken:
      break;
  }
  if (*srq_slot != kNone) {
    ShmSrq& s = x.h->srqs[*srq_slot];
    if (s.armed_limit && RqHead(*rq) - rq->tail < s.srq_limit) {
      s.armed_limit = 0;
      RaiseAsyncLocked(x.p, s.ctx, IBV_EVENT_SRQ_LIMIT_REACHED, kObjSrq, *srq_slot);
    }
  }
  return copy->wqe();
}

// Gives back the receive WQE TakeRecv just took (fabric lock still held).
void UntakeRecv(Exec& x, ShmQp& resp, uint32_t srq_slot) {
  if (x.tm_handle != kNone) {  // a tagged buffer, not a receive WQE
    UnconsumeTagLocked(x.p->fab, x.tm_srq, x.tm_handle);
    return;
  }
  ShmRq* rq = srq_slot != kNone ? &x.h->srqs[srq_slot].rq : &resp.rq;
  --rq->tail;
}

// After a copy failed with EFAULT: true if the requester's own segments
// (`write`: as a destination) are what is no longer accessible.  Error
// path only: it reads /proc/self/maps.
bool LocalFault(const Seg* lseg, uint32_t nl, bool write) {
  for (uint32_t i = 0; i < nl; ++i)
    if (RangeAccessible(lseg[i].va, lseg[i].len, write)) return true;
  return false;
}

void RecvCompletion(Exec& x, ShmQp& resp, ShmRecvWqe* w, ShmCqe& c, uint32_t status) {
  c.wr_id = w->wr_id;
  c.status = status;
  c.qp_num = resp.qpn;
  c.qp_slot = static_cast<uint32_t>(&resp - x.h->qps);
  c.src_qp = x.qp->shm->qpn;
  if (c.stage_nsge != kStagedInLine) c.slid = 1;  // in one line, the poller knows it
  c.is_send = 0;
  // An XRC message completes on its SRQ's CQ.
  uint32_t cq = resp.recv_cq;
  if (resp.type == IBV_QPT_XRC_RECV && x.xrc_srq < kMaxSrqs) {
    cq = x.h->srqs[x.xrc_srq].cq;
    c.xrc_srq = x.xrc_srq + 1;
  }
  if (PushCqeLocked(x.p, cq, c) && status != IBV_WC_SUCCESS)
    RecordWhyLocked(x.p, cq, resp.qpn, w->wr_id, status, x.why);
}

// Responder-side fatal error: the responder QP goes to ERR (RC class C).
void ResponderError(Exec& x, ShmQp& resp, uint32_t event) {
  if (!IsReliable(resp.type)) return;
  // No completion of the responder's says why; its flushes can ask.
  char text[kWhyText + 80];  // room for all of x.why (the ring's copy is cut at kWhyText)
  snprintf(text, sizeof(text), "%s (requester QP 0x%x, pid %d, wr_id 0x%" PRIx64 ")", x.why, x.qp->shm->qpn,
           x.self, x.wr_id);
  RecordWhyLocked(x.p, resp.recv_cq, resp.qpn, ~0ull, IBV_WC_GENERAL_ERR, text);
  MoveToErrorLocked(x.p, &resp);
  if (event) RaiseAsyncLocked(x.p, resp.ctx, event, kObjQp, static_cast<uint32_t>(&resp - x.h->qps));
}

// Remote peer vanished (or never existed): RC requester sees retry exceeded.
int NoResponder(Exec& x, const char* what) {
  if (IsReliable(x.qp->shm->type)) {
    Why(x, "RETRY_EXC_ERR: the responder QP 0x%x does not answer (%s)", x.qp->shm->dest_qpn, what);
    x.qp->shm->remote_gone = 1;
    return IBV_WC_RETRY_EXC_ERR;
  }
  return IBV_WC_SUCCESS;  // UC/UD: silently dropped on the wire
}

// The longest an RC requester keeps resending to a responder that does not
// answer: timeout 0 (infinite in the spec) and long timers stop here.
constexpr uint64_t kMaxRetryNs = 60ull * 1000 * 1000 * 1000;

// Transport retry time of an RC QP (IB spec 9.7.6.1.3): retry_cnt + 1
// tries of 4.096 us * 2^timeout each.
uint64_t RetryBudgetNs(const ShmQp& me) {
  if (me.timeout == 0) return kMaxRetryNs;
  const uint64_t per_try = 4096ull << std::min(me.timeout, 31u);
  return std::min(per_try * (std::min(me.retry_cnt, 7u) + 1), kMaxRetryNs);
}

// An RC responder that exists but is not yet in RTR drops what it gets, as
// the wire does: the requester retries (the WR stays pending, retried from
// later post/poll/wait calls) until the responder is ready or the retry
// time runs out (RETRY_EXC_ERR).  UC and UD lose the message.
int ResponderNotReady(Exec& x, SendWqe& w) {
  if (!IsReliable(x.qp->shm->type)) return NoResponder(x, "not ready to receive");
  const uint64_t now = NowNs();
  if (!w.retry_since_ns) w.retry_since_ns = now;
  if (now - w.retry_since_ns >= RetryBudgetNs(*x.qp->shm))
    return NoResponder(x, "not ready to receive within the retry time");
  return kPending;
}

// A responder that cannot receive: not yet in RTR (RESET, INIT: retried)
// or past it (ERR, SQE: the requester fails at once, as before).
int NotReadyOrError(Exec& x, const ShmQp& resp, SendWqe& w) {
  auto s = resp.state.load(std::memory_order_relaxed);
  return s == IBV_QPS_RESET || s == IBV_QPS_INIT ? ResponderNotReady(x, w)
                                                 : NoResponder(x, "it is in ERR or SQE");
}

bool PeerAlive(Exec& x, const ShmQp& resp) {
  if (resp.proc == x.p->fab->self_proc()) return true;
  // Every 10 ms, confirm that the peer's process still runs: a SEND staged
  // into a dead process's CQ would otherwise succeed forever.  The coarse
  // clock: a precise one costs a TSC read at every post.
  uint64_t now = CoarseNowNs();
  if (now - x.qp->last_peer_check_ns < 10 * 1000 * 1000ull) return true;
  x.qp->last_peer_check_ns = now;
  return x.p->fab->ProcAlive(resp.proc);
}

// RC with no receive WQE posted: an RNR NAK, retried from later calls until
// rnr_retry runs out (7: forever).  UC and UD drop the message, like the wire.
int NoReceiveWqe(Exec& x, const ShmQp& me, const ShmQp& resp, SendWqe& w) {
  if (!IsReliable(me.type)) return IBV_WC_SUCCESS;
  Why(x, "RNR_RETRY_EXC_ERR: no receive posted at the responder QP 0x%x (RNR, rnr_retry %u)", resp.qpn,
      me.rnr_retry);
  if (me.rnr_retry == 0) return IBV_WC_RNR_RETRY_EXC_ERR;
  uint64_t now = NowNs();
  if (!w.rnr_since_ns) w.rnr_since_ns = now;
  if (me.rnr_retry != 7 && now - w.rnr_since_ns > RnrTimerNs(resp.min_rnr_timer) * me.rnr_retry)
    return IBV_WC_RNR_RETRY_EXC_ERR;
  return kPending;
}

// The responder's completion for a SEND or WRITE_WITH_IMM, before delivery
// decides its status (and, for UD, its GRH).
void InitRecvCqe(const SendWqe& w, uint64_t len, ShmCqe* c) {
  const bool with_imm = w.opcode == IBV_WR_SEND_WITH_IMM || w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  c->opcode = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
  if (with_imm) {
    c->imm_data = w.imm;
    c->wc_flags |= IBV_WC_WITH_IMM;
  }
  c->wc_flags |= (w.flags & IBV_SEND_SOLICITED) ? 0x80000000u : 0;  // solicited marker, stripped at poll
  c->byte_len = static_cast<uint32_t>(len);
}

// WRITE_WITH_IMM: the payload goes where the rkey says; the receive WQE
// only reports the immediate.
int DeliverWriteImm(Exec& x, const SendWqe& w, ShmQp& resp, ShmRecvWqe* rw, uint32_t srq_slot, ShmCqe& c,
                    pid_t dst_pid, uint64_t remote_va, const Seg* lseg, uint32_t nl, uint64_t len) {
  Seg dst{remote_va, static_cast<uint32_t>(len)};
  bool more = false;
  int e = !len ? 0
          : x.place && PlacesInChunks(x, w, len, rw->wr_id, srq_slot == kNone)
              ? PlaceStep(x, dst_pid, &dst, 1, x.self, lseg, nl, &more)
              : Move(x.self, dst_pid, &dst, 1, x.self, lseg, nl);
  if (e == ESRCH) return NoResponder(x, "its process died");
  if (e && LocalFault(lseg, nl, false)) {
    UntakeRecv(x, resp, srq_slot);
    Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
    return IBV_WC_LOC_PROT_ERR;
  }
  if (e) {
    Why(x, "REM_ACCESS_ERR: the target memory is no longer mapped in the responder's process");
    ResponderError(x, resp, IBV_EVENT_QP_ACCESS_ERR);
    return IBV_WC_REM_ACCESS_ERR;
  }
  if (more) {
    UntakeRecv(x, resp, srq_slot);  // taken again, with its completion, at the last step
    return kPending;
  }
  RecvCompletion(x, resp, rw, c, IBV_WC_SUCCESS);
  return IBV_WC_SUCCESS;
}

// The receive WQE cannot take the message (bad key, too short): it completes
// with `recv_status` and a connected responder goes to ERR.  An RC requester
// sees `rc_status`; UC and UD requesters see nothing, like the wire.
int RecvBufferError(Exec& x, ShmQp& resp, ShmRecvWqe* rw, ShmCqe& c, uint32_t recv_status, int rc_status) {
  RecvCompletion(x, resp, rw, c, recv_status);
  if (resp.type == IBV_QPT_UD) return IBV_WC_SUCCESS;
  if (resp.type == IBV_QPT_RAW_PACKET || resp.type == kQptWq) return IBV_WC_SUCCESS;  // as UD
  MoveToErrorLocked(x.p, &resp);
  return IsReliable(resp.type) ? rc_status : IBV_WC_SUCCESS;
}

// Small payloads to another process travel inside the completion; the
// receiver scatters them at poll (one copy, no system call).  False if the
// payload could not be read (the requester's memory is gone).
// `own`: every source is softnic's own memory (an inline WQE's data, a GRH
// built here), which cannot fault: copied straight, not through the
// fault-catching copy the program's buffers need.
bool StageInCqe(Exec& x, const Seg* src, uint32_t ns, const Seg* rseg, uint32_t nr, uint64_t need, ShmCqe* c,
                bool own) {
  if (own) {
    uint64_t off = 0;
    for (uint32_t i = 0; i < ns; ++i) {
      memcpy(c->stage + off, reinterpret_cast<const void*>(src[i].va), src[i].len);
      off += src[i].len;
    }
  } else {
    Seg stage{reinterpret_cast<uint64_t>(c->stage), static_cast<uint32_t>(need)};
    if (Move(x.self, x.self, &stage, 1, x.self, src, ns)) return false;
  }
  c->stage_len = static_cast<uint32_t>(need);
  c->stage_nsge = static_cast<uint8_t>(nr);
  for (uint32_t i = 0; i < nr; ++i) StageSge(*c, i) = {rseg[i].va, rseg[i].len, rseg[i].key};
  return true;
}

// A payload of at most kLineBytes for a WQE of a QP's own receive queue
// (`rq_slot`: its ring slot), RC or UC: the whole completion is one line
// (kStagedInLine), and the poller scatters it into the buffers of its own
// record of the post.  False if the payload could not be read.
bool StageInLine(Exec& x, const Seg* src, uint32_t ns, uint64_t need, ShmCqe* c, bool own) {
  uint8_t* line = LineBytes(*c);
  if (own) {
    uint64_t off = 0;
    for (uint32_t i = 0; i < ns; ++i) {
      memcpy(line + off, reinterpret_cast<const void*>(src[i].va), src[i].len);
      off += src[i].len;
    }
  } else if (need) {
    Seg stage{reinterpret_cast<uint64_t>(line), static_cast<uint32_t>(need)};
    if (Move(x.self, x.self, &stage, 1, x.self, src, ns)) return false;
  }
  c->stage_nsge = kStagedInLine;
  c->sq_index = x.rq_slot;
  return true;
}

// SEND: scatters (GRH for UD +) payload into the receive WQE's buffers,
// validated against the responder's MRs.
int DeliverSend(Exec& x, const SendWqe& w, ShmQp& resp, ShmRecvWqe* rw, uint32_t srq_slot, ShmCqe& c,
                pid_t dst_pid, const Seg* lseg, uint32_t nl, uint64_t len) {
  const bool ud = resp.type == IBV_QPT_UD;
  const uint32_t resp_pd = srq_slot != kNone ? x.h->srqs[srq_slot].pd : resp.pd;
  Seg rseg[kMaxSge + 1];
  uint32_t nr;
  uint64_t cap;
  if (!ValidateSges(x.mrs, x.resp_proc, resp_pd, rw->sge, std::min(rw->num_sge, kMaxSge),
                    IBV_ACCESS_LOCAL_WRITE, rseg, &nr, &cap)) {
    char text[kWhyText - 80];
    WhySges(x.mrs, x.resp_proc, resp_pd, rw->sge, std::min(rw->num_sge, kMaxSge), IBV_ACCESS_LOCAL_WRITE,
            "receive", text, sizeof(text));
    Why(x, "REM_OP_ERR at the requester, LOC_PROT_ERR at the responder QP 0x%x: %s", resp.qpn, text);
    return RecvBufferError(x, resp, rw, c, IBV_WC_LOC_PROT_ERR, IBV_WC_REM_OP_ERR);
  }
  uint64_t need = len + (ud ? 40 : 0);
  if (need > cap) {
    Why(x,
        "LOC_LEN_ERR at the responder QP 0x%x: a %" PRIu64 "-byte message, a %" PRIu64 "-byte receive buffer",
        resp.qpn, need, cap);
    return RecvBufferError(x, resp, rw, c, IBV_WC_LOC_LEN_ERR, IBV_WC_REM_INV_REQ_ERR);
  }
  Seg src[kMaxSge + 1];
  uint32_t ns = 0;
  ibv_grh grh{};
  if (ud) {
    if (w.has_ah && w.ah.is_global) {
      FillGrh(w, len, &grh);
      c.wc_flags |= IBV_WC_GRH;
    }
    src[ns++] = {reinterpret_cast<uint64_t>(&grh), 40};
    c.byte_len = static_cast<uint32_t>(len + 40);
  }
  for (uint32_t i = 0; i < nl; ++i) src[ns++] = lseg[i];
  bool more = false;
  const bool resumed = x.place && x.place->index == x.qp->sq_exec;  // a later placement step
  const bool chunks =
      x.place && PlacesInChunks(x, w, need, rw->wr_id ^ (nr ? rseg[0].va : 0), srq_slot == kNone && !ud);
  // The receive's buffers as the program left them, before anything lands
  // (fingerprint.h); a message placed in steps keeps the first step's word.
  if (rw->pad &&
      (resumed ? x.place->dest_modified : nr && FingerprintSegs(x.self, dst_pid, rseg, nr) != rw->pad)) {
    c.wc_flags |= kWcDestModified;
    if (chunks) x.place->dest_modified = true;
  }
  const bool own = (w.flags & IBV_SEND_INLINE) != 0;
  if (!chunks && dst_pid != x.self && need <= kLineBytes && srq_slot == kNone && rw->num_sge <= kStageSges &&
      (resp.type == IBV_QPT_RC || resp.type == IBV_QPT_UC)) {
    if (!StageInLine(x, src, ns, need, &c, own)) {
      UntakeRecv(x, resp, srq_slot);
      Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
      return IBV_WC_LOC_PROT_ERR;
    }
  } else if (!chunks && dst_pid != x.self && need <= kStageBytes && nr <= kStageSges) {
    if (!StageInCqe(x, src, ns, rseg, nr, need, &c, own)) {
      UntakeRecv(x, resp, srq_slot);
      Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
      return IBV_WC_LOC_PROT_ERR;
    }
  } else if (need) {
    int e = chunks ? PlaceStep(x, dst_pid, rseg, nr, x.self, src, ns, &more)
                   : Move(x.self, dst_pid, rseg, nr, x.self, src, ns);
    if (e == ESRCH) return NoResponder(x, "its process died");
    if (e && LocalFault(lseg, nl, false)) {
      UntakeRecv(x, resp, srq_slot);
      Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
      return IBV_WC_LOC_PROT_ERR;
    }
    if (e) {
      // Unlike a bad key, a failed copy leaves a UC responder running.
      Why(x, "the receive buffer is no longer mapped in the responder's process (QP 0x%x)", resp.qpn);
      RecvCompletion(x, resp, rw, c, IBV_WC_LOC_PROT_ERR);
      if (!IsReliable(resp.type)) return IBV_WC_SUCCESS;
      MoveToErrorLocked(x.p, &resp);
      return IBV_WC_REM_OP_ERR;
    }
  }
  if (more) {
    UntakeRecv(x, resp, srq_slot);  // taken again, with its completion, at the last step
    return kPending;
  }
  RecvCompletion(x, resp, rw, c, IBV_WC_SUCCESS);
  return IBV_WC_SUCCESS;
}

// Where a WR lands at its responder (x.resp_proc, x.resp_pd, x.xrc_srq):
// an XRC message names an SRQ of its target's domain, whose process and PD
// (the domain may be shared between processes) its keys must be of.  False, with the WR's status in *st, if
// the SRQ number names none: the target answers NAK Invalid Request, as a NIC does (REM_INV_REQ_ERR), and
// goes to ERR.
bool Land(Exec& x, const SendWqe& w, ShmQp& resp, int* st) {
  x.resp_proc = resp.proc;
  x.resp_pd = resp.pd;
  x.xrc_srq = kNone;
  if (resp.type != IBV_QPT_XRC_RECV) return true;
  x.xrc_srq = XrcSrqFor(x.p->fab, resp, w.xrc_srqn);
  if (x.xrc_srq == kNone) {
    Why(x, "REM_INV_REQ_ERR: SRQ number 0x%x names no XRC SRQ of the domain of the target QP 0x%x",
        w.xrc_srqn, resp.qpn);
    ResponderError(x, resp, IBV_EVENT_QP_REQ_ERR);
    *st = IBV_WC_REM_INV_REQ_ERR;
    return false;
  }
  const ShmSrq& srq = x.h->srqs[x.xrc_srq];
  x.resp_proc = srq.proc;
  x.resp_pd = srq.pd;
  if (srq.proc != resp.proc && !x.p->fab->ProcAlive(srq.proc)) {
    *st = NoResponder(x, "the process of its shared receive queue died");
    return false;
  }
  return true;
}

// SEND, SEND_WITH_IMM, RDMA_WRITE_WITH_IMM: the WRs that consume a receive
// WQE of the responder, delivered to `resp` (found live and of a matching
// type by the caller).
int SendTo(Exec& x, SendWqe& w, ShmQp* resp, const Seg* lseg, uint32_t nl, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  const bool ud = me.type == IBV_QPT_UD;
  if (!CanReceive(*resp)) return ud ? IBV_WC_SUCCESS : NotReadyOrError(x, *resp, w);
  int st;
  if (!Land(x, w, *resp, &st)) return st;
  if (ud) {
    uint32_t qkey = (w.remote_qkey & 0x80000000u) ? me.qkey : w.remote_qkey;
    if (qkey != resp->qkey) return IBV_WC_SUCCESS;  // dropped, like the wire
    if (len > 4096) return IBV_WC_LOC_LEN_ERR;
  }
  if (resp->type == IBV_QPT_RC && (w.opcode == IBV_WR_SEND || w.opcode == IBV_WR_SEND_WITH_IMM) &&
      IsTmSrq(x.h, resp->srq))
    return ExecuteTmSend(x, w, *resp, lseg, nl, len);
  const bool write_imm = w.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
  uint64_t remote_va = 0;
  if (write_imm) {
    if (!ValidateRkeyIn(x.mrs, *resp, x.resp_proc, x.resp_pd, w.rkey, w.remote_addr, len,
                        IBV_ACCESS_REMOTE_WRITE, &remote_va)) {
      if (me.type == IBV_QPT_UC) return IBV_WC_SUCCESS;
      WhyRkey(x.mrs, *resp, w.rkey, w.remote_addr, len, IBV_ACCESS_REMOTE_WRITE, x.why, sizeof(x.why));
      ResponderError(x, *resp, IBV_EVENT_QP_ACCESS_ERR);
      return IBV_WC_REM_ACCESS_ERR;
    }
  }
  uint32_t srq_slot;
  RecvCopy copy;
  bool corrupt;
  ShmRecvWqe* rw = TakeRecv(x, *resp, &srq_slot, &copy, &corrupt);
  if (corrupt) return NoResponder(x, "its receive queue's shared fields describe no ring");
  if (!rw) return NoReceiveWqe(x, me, *resp, w);
  const pid_t dst_pid = x.resp_proc == x.p->fab->self_proc() ? x.self : x.p->fab->PeerPid(x.resp_proc);
  if (!dst_pid) return NoResponder(x, "its process is gone");
  ShmCqe c;
  ClearCqe(&c);
  InitRecvCqe(w, len, &c);
  if (w.opcode == IBV_WR_SEND_WITH_INV) {
    // The responder takes the key away before the payload lands (a key it
    // may not take away fails the message, touching nothing).
    char text[kWhyText - 24];
    if (!RemoteInvalidateLocked(x.p, *resp, w.imm, w.wr_id, text, sizeof(text))) {
      Why(x, "REM_INV_REQ_ERR: %s", text);
      return RecvBufferError(x, *resp, rw, c, IBV_WC_REM_INV_REQ_ERR, IBV_WC_REM_INV_REQ_ERR);
    }
    c.wc_flags |= IBV_WC_WITH_INV;
    c.imm_data = w.imm;  // wc.invalidated_rkey, host order
  }
  if (write_imm) return DeliverWriteImm(x, w, *resp, rw, srq_slot, c, dst_pid, remote_va, lseg, nl, len);
  return DeliverSend(x, w, *resp, rw, srq_slot, c, dst_pid, lseg, nl, len);
}

// A UD SEND to QPN 0xFFFFFF: a copy to every QP attached to the group its
// AH names, in any process (the sender's own QP too, when attached), as a
// switch replicates it.  Each member takes it or drops it as a unicast
// UD receiver does (Q_Key, no receive posted, too short a buffer); the
// requester's completion fails only for its own faults.  An AH that names
// no group: the message is lost, as on the wire.
int ExecuteMulticast(Exec& x, SendWqe& w, const Seg* lseg, uint32_t nl, uint64_t len) {
  if (len > 4096) return IBV_WC_LOC_LEN_ERR;
  if (!w.has_ah) return IBV_WC_SUCCESS;
  uint32_t members[kMaxMcastQpsPerGroup];
  const uint32_t n = McastMembersLocked(x.p, w.ah, members, kMaxMcastQpsPerGroup);
  for (uint32_t i = 0; i < n; ++i) {
    ShmQp* resp = &x.h->qps[members[i]];
    if (!PeerAlive(x, *resp)) continue;
    const int st = SendTo(x, w, resp, lseg, nl, len);
    if (st != IBV_WC_SUCCESS) return st;  // the requester's own buffer
  }
  return IBV_WC_SUCCESS;
}

// A raw packet QP's SEND: its SGEs are one Ethernet frame, steered by the
// fabric's flow rules (flow.cc; an RSS QP hands it to a WQ, wq.cc) to
// every receiver they name, in any process; each takes it into its next
// receive WQE (byte_len: the frame, no GRH) or drops it, as UD does.  A
// frame nothing takes is lost, and the send still succeeds, as on a wire.
int ExecuteRawSend(Exec& x, SendWqe& w, const Seg* lseg, uint32_t nl, uint64_t len) {
  if (len > kMaxRawFrame) {
    Why(x, "LOC_LEN_ERR: a %" PRIu64 "-byte frame is longer than %u bytes", len, kMaxRawFrame);
    return IBV_WC_LOC_LEN_ERR;
  }
  uint8_t head[kRawHeaderBytes];
  const uint32_t hl = static_cast<uint32_t>(std::min<uint64_t>(len, sizeof(head)));
  Seg hs{reinterpret_cast<uint64_t>(head), hl};
  if (hl && Move(x.self, x.self, &hs, 1, x.self, lseg, nl)) {
    Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
    return IBV_WC_LOC_PROT_ERR;
  }
  uint32_t slots[kMaxRawReceivers];
  const uint32_t n = RawReceiversLocked(x.p, head, hl, slots, kMaxRawReceivers);
  for (uint32_t i = 0; i < n; ++i) {
    ShmQp& resp = x.h->qps[slots[i]];
    if (!CanReceive(resp) || !PeerAlive(x, resp)) continue;
    x.resp_proc = resp.proc;
    x.resp_pd = resp.pd;
    x.xrc_srq = kNone;
    uint32_t srq_slot;
    RecvCopy copy;
    bool corrupt;
    ShmRecvWqe* rw = TakeRecv(x, resp, &srq_slot, &copy, &corrupt);
    if (!rw) continue;  // no receive posted: dropped
    const pid_t dst_pid = x.resp_proc == x.p->fab->self_proc() ? x.self : x.p->fab->PeerPid(x.resp_proc);
    if (!dst_pid) {
      UntakeRecv(x, resp, srq_slot);
      continue;
    }
    ShmCqe c{};
    InitRecvCqe(w, len, &c);
    const int st = DeliverSend(x, w, resp, rw, srq_slot, c, dst_pid, lseg, nl, len);
    if (st != IBV_WC_SUCCESS) return st;  // the requester's own buffer
  }
  return IBV_WC_SUCCESS;
}

int ExecuteSendLike(Exec& x, SendWqe& w, const Seg* lseg, uint32_t nl, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  if (me.type == IBV_QPT_RAW_PACKET) return ExecuteRawSend(x, w, lseg, nl, len);
  const bool ud = me.type == IBV_QPT_UD;
  if (ud && w.remote_qpn == kMcastQpn) return ExecuteMulticast(x, w, lseg, nl, len);
  ShmQp* resp = FindQp(x.h, ud ? w.remote_qpn : me.dest_qpn);
  if (!resp) return NoResponder(x, "no such QP");
  if (!Peers(me.type, resp->type)) return NoResponder(x, "a QP of another transport");
  if (!PeerAlive(x, *resp)) return NoResponder(x, "its process died");
  return SendTo(x, w, resp, lseg, nl, len);
}

// RDMA_WRITE, RDMA_READ and the atomics: one-sided, no receive WQE.
int ExecuteRdma(Exec& x, SendWqe& w, Seg* lseg, uint32_t nl, uint64_t len) {
  ShmQp& me = *x.qp->shm;
  ShmQp* resp = FindQp(x.h, me.dest_qpn);
  if (!resp) return NoResponder(x, "no such QP");
  if (!Peers(me.type, resp->type)) return NoResponder(x, "a QP of another transport");
  if (!PeerAlive(x, *resp)) return NoResponder(x, "its process died");
  if (!CanReceive(*resp)) return NotReadyOrError(x, *resp, w);
  int st;
  if (!Land(x, w, *resp, &st)) return st;
  const pid_t dst_pid = x.resp_proc == x.p->fab->self_proc() ? x.self : x.p->fab->PeerPid(x.resp_proc);
  if (!dst_pid) return NoResponder(x, "its process is gone");
  switch (w.opcode) {
    case IBV_WR_RDMA_WRITE:
      return ExecuteWrite(x, w, *resp, dst_pid, lseg, nl, len);
    case IBV_WR_RDMA_READ:
      return ExecuteRead(x, w, *resp, dst_pid, lseg, nl, len);
    case IBV_WR_ATOMIC_WRITE:
      return ExecuteAtomicWrite(x, w, *resp, dst_pid, lseg, nl, len);
    default:
      return ExecuteAtomic(x, w, *resp, dst_pid, lseg, nl, len);
  }
}

int Execute(Exec& x, SendWqe& w, uint32_t* byte_len) {
  int small;
  if (SmallSend(x, w, byte_len, &small)) return small;  // small_send.cc: the common SEND
  ShmQp& me = *x.qp->shm;
  if (w.opcode == IBV_WR_BIND_MW) return ExecuteBindLocked(x.p, x.qp, w, x.why, sizeof(x.why));
  if (w.opcode == IBV_WR_LOCAL_INV) return ExecuteLocalInvLocked(x.p, x.qp, w, x.why, sizeof(x.why));
  Seg lseg[kMaxSge];
  uint32_t nl = 0;
  uint64_t len = 0;
  const bool to_local = w.opcode == IBV_WR_RDMA_READ || w.opcode == IBV_WR_ATOMIC_CMP_AND_SWP ||
                        w.opcode == IBV_WR_ATOMIC_FETCH_AND_ADD;
  if (w.flags & IBV_SEND_INLINE) {
    if (w.inline_len) lseg[nl++] = {reinterpret_cast<uint64_t>(w.inline_data), w.inline_len};
    len = w.inline_len;
  } else if (!ValidateSges(x.mrs, x.p->fab->self_proc(), me.pd, w.sge, w.num_sge,
                           to_local ? IBV_ACCESS_LOCAL_WRITE : 0, lseg, &nl, &len)) {
    char text[kWhyText - 16];
    WhySges(x.mrs, x.p->fab->self_proc(), me.pd, w.sge, w.num_sge, to_local ? IBV_ACCESS_LOCAL_WRITE : 0,
            "local", text, sizeof(text));
    Why(x, "LOC_PROT_ERR: %s", text);
    return IBV_WC_LOC_PROT_ERR;
  }
  if (len > (1ull << 31)) {
    Why(x, "LOC_LEN_ERR: a %" PRIu64 "-byte message is longer than max_msg_sz", len);
    return IBV_WC_LOC_LEN_ERR;
  }
  *byte_len = static_cast<uint32_t>(len);
  // A READ's or atomic's destination as the program left it, before its
  // result lands (fingerprint.h); a message placed in steps keeps the
  // first step's word.
  const bool resumed = x.place && x.place->index == x.qp->sq_exec;
  if (w.dst_fp)
    x.dest_modified =
        resumed ? x.place->dest_modified : FingerprintSegs(x.self, x.self, lseg, nl) != w.dst_fp;
  switch (w.opcode) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
      return ExecuteSendLike(x, w, lseg, nl, len);
    default: {
      const int st = ExecuteRdma(x, w, lseg, nl, len);
      if (x.dest_modified && x.place && x.place->index == x.qp->sq_exec) x.place->dest_modified = true;
      return st;
    }
  }
}

void SendCompletionLocked(Process* p, SnQp* qp, const SendWqe& w, uint64_t index, uint32_t status,
                          uint32_t byte_len, const char* why = nullptr, bool dest_modified = false) {
  ShmCqe c;
  ClearCqe(&c);
  c.wc_flags = dest_modified && status == IBV_WC_SUCCESS ? kWcDestModified : 0;
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
  if (PushCqeLocked(p, qp->shm->send_cq, c) && why)
    RecordWhyLocked(p, qp->shm->send_cq, c.qp_num, w.wr_id, status, why);
}

// Runs pending WRs in order, fabric lock and sq_mu held.
void RunSqLocked(Process* p, SnQp* qp) {
  Exec x{p, p->fab->hdr(), qp, p->pid, {p->fab->hdr(), p->own_mrs, p->fab->self_proc(), p->own_mws}};
  const uint32_t size = static_cast<uint32_t>(qp->sq.size());
  while (qp->sq_exec < qp->sq_posted) {
    auto state = qp->shm->state.load(std::memory_order_relaxed);
    if (state == IBV_QPS_ERR) break;
    SendWqe& w = qp->sq[qp->sq_exec & (size - 1)];
    uint32_t byte_len = 0;
    x.wr_id = w.wr_id;
    x.why[0] = 0;
    x.tm_srq = x.tm_handle = kNone;
    x.fin_pending = false;
    x.dest_modified = false;
    if (PlacementWaits(x, qp)) return;  // a message partly placed, its next step not due
    int st = kPending;
    switch (OrderBefore(x, qp, w, &st, &byte_len)) {
      case OrderStep::kWait:
        return;  // it lags, or waits for a WR to overtake it
      case OrderStep::kRun:
        st = Execute(x, w, &byte_len);
        break;
      case OrderStep::kRanAhead:
        break;
    }
    if (st == kPending) return;
    const bool signaled = (w.flags & IBV_SEND_SIGNALED) || qp->shm->sq_sig_all;
    if (st != IBV_WC_SUCCESS || signaled)
      SendCompletionLocked(p, qp, w, qp->sq_exec, st, byte_len, st != IBV_WC_SUCCESS ? x.why : nullptr,
                           x.dest_modified);
    if (x.fin_pending) DeliverFinLocked(x);
    ++qp->sq_exec;
    if (st != IBV_WC_SUCCESS) {
      MoveToErrorLocked(p, qp->shm);
      break;
    }
  }
  if (qp->shm->state.load(std::memory_order_relaxed) == IBV_QPS_ERR) {
    while (qp->sq_exec < qp->sq_posted) {
      SendWqe& w = qp->sq[qp->sq_exec & (size - 1)];
      SendCompletionLocked(p, qp, w, qp->sq_exec, IBV_WC_WR_FLUSH_ERR, 0);
      ++qp->sq_exec;
    }
    qp->order.ahead = kNoPlacement;  // a WR that ran ahead is flushed too
  }
}

}  // namespace exec

using exec::FindQp;
using exec::RunSqLocked;

void FlushSq(Process* p, SnQp* qp) {
  FabricLock lock(p->fab);
  RunSqLocked(p, qp);
}

void ProgressCq(Process* p, SnCq* cq) {
  std::lock_guard<std::mutex> g(p->mu);
  bool any_pending = false, others_pending = false;
  const uint64_t now = NowNs();
  const bool check_peers = now - cq->last_peer_check_ns > 100 * 1000 * 1000ull;
  if (check_peers) cq->last_peer_check_ns = now;
  for (uint32_t i = 0; i < p->qp_slots(); ++i) {
    SnQp* qp = p->qps[i];
    if (!qp) continue;
    if (qp->send_cq != cq && qp->recv_cq != cq) {
      // Another QP of the process with WRs pending (a placement step, a
      // chaos wait, an RNR retry) runs too: a NIC progresses by itself, and
      // a correct program may post on one QP and wait on another QP's CQ
      // (a request sent, its answer polled).  Never waits for its lock.
      if (!qp->send_cq) continue;
      if (!qp->sq_mu.try_lock()) {
        others_pending = true;  // busy: it may still have some
        continue;
      }
      std::lock_guard<QueueMutex> sq(qp->sq_mu, std::adopt_lock);
      if (qp->sq_exec < qp->sq_posted) {
        FabricLock lock(p->fab);
        RunSqLocked(p, qp);
        others_pending |= qp->sq_exec < qp->sq_posted;
      }
      continue;
    }
    std::lock_guard<QueueMutex> sq(qp->sq_mu);
    // Nothing to run and no liveness due: no fabric lock (the line its
    // word sits on would move to this core and back to the peer's post).
    if (!check_peers && (!qp->send_cq || qp->sq_exec >= qp->sq_posted)) continue;
    FabricLock lock(p->fab);
    ShmQp& s = *qp->shm;
    if (check_peers && (s.type == IBV_QPT_RC || s.type == IBV_QPT_XRC_SEND) &&
        s.state.load() != IBV_QPS_ERR && s.state.load() >= IBV_QPS_RTR) {
      ShmQp* peer = FindQp(p->fab->hdr(), s.dest_qpn);
      if (!peer || !p->fab->ProcAlive(peer->proc)) {
        // The peer is gone: like a broken connection, the survivor's queues
        // flush instead of waiting forever.
        s.remote_gone = 1;
        MoveToErrorLocked(p, &s);
      }
    }
    if (!qp->send_cq) continue;
    RunSqLocked(p, qp);  // a poller of the receive CQ alone drives its QPs' sends too
    any_pending |= qp->sq_exec < qp->sq_posted;
  }
  cq->stalled.store(any_pending ? 1 : 0, std::memory_order_relaxed);
  p->sq_stalled.store(any_pending || others_pending ? 1 : 0, std::memory_order_relaxed);
}

}  // namespace rdmasan::softnic
