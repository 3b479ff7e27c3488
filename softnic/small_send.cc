// softnic's common SEND, in one frame: an RC or UC SEND (with or without
// an immediate) of at most one line (kLineBytes) from an inline WQE or one
// SGE, to a QP of another process that has a receive queue of its own,
// with no chaos placing it.  Latency tools and most request/reply
// programs send nothing else.  Execute's general path for such a WR runs
// through Execute, ExecuteSendLike, SendTo, Land, TakeRecv, DeliverSend
// and StageInLine, each asking about the cases this WR is not (UD,
// multicast, XRC, SRQs, tag matching, WRITE_WITH_IMM, invalidation, the
// steps of a placement, payloads staged in the completion or copied
// across): about 870 instructions of a small SEND's 1,265 (callgrind,
// lean_pingpong).  Here the same steps, in the same order and with the
// same checks of every value read from shared memory, take about half.
//
// May not: differ from the general path in anything a program, a report or
// a test can see.  Whatever is not the common case goes to the general
// path before anything is taken (every check up to the receive WQE has no
// side effect but the liveness check's clock, whose failure is answered
// here as there); once the receive WQE is taken, anything unusual (a
// fingerprinted receive, more SGEs than a line's record holds, a key that
// does not validate, too short a buffer) continues in DeliverSend, which
// reports it as it always has.
#include "softnic/access.h"
#include "softnic/execute.h"
#include "softnic/internal.h"

namespace rdmasan::softnic::exec {

bool SmallSend(Exec& x, SendWqe& w, uint32_t* byte_len, int* st) {
  if ((w.opcode != IBV_WR_SEND && w.opcode != IBV_WR_SEND_WITH_IMM) || x.place || w.dst_fp) return false;
  const ShmQp& me = *x.qp->shm;
  if (me.type != IBV_QPT_RC && me.type != IBV_QPT_UC) return false;
  // The payload, as Execute finds it.
  Seg lseg[1];
  uint32_t nl = 0;
  uint64_t len = 0;
  if (w.flags & IBV_SEND_INLINE) {
    if (w.inline_len) lseg[nl++] = {reinterpret_cast<uint64_t>(w.inline_data), w.inline_len};
    len = w.inline_len;
  } else if (w.num_sge > 1 ||
             !ValidateSges(x.mrs, x.p->fab->self_proc(), me.pd, w.sge, w.num_sge, 0, lseg, &nl, &len)) {
    return false;
  }
  if (len > kLineBytes) return false;
  // The responder, as ExecuteSendLike and SendTo find it: an RC or UC QP
  // like this one (Peers), ready to receive, with its own receive queue
  // (no SRQ: no tag matching either), in another live process.
  ShmQp* resp = FindQp(x.h, me.dest_qpn);
  if (!resp || resp->type != me.type || resp->srq != kNone || !CanReceive(*resp)) return false;
  const uint32_t resp_proc = resp->proc;
  if (resp_proc == x.p->fab->self_proc()) return false;  // a local copy
  *byte_len = static_cast<uint32_t>(len);
  if (!PeerAlive(x, *resp)) {
    *st = NoResponder(x, "its process died");
    return true;
  }
  // Land: no XRC.
  x.resp_proc = resp_proc;
  x.resp_pd = resp->pd;
  x.xrc_srq = kNone;
  // TakeRecv of a QP's own queue.  No WQE, or fields that describe no
  // ring: the general path takes it from here (it reads them again and
  // answers RNR, or a dead responder).
  RecvCopy copy;
  if (TakeFromRing(x, resp->rq, &copy) != Take::kTaken) return false;
  ShmRecvWqe* rw = copy.wqe();
  const pid_t dst_pid = x.p->fab->PeerPid(resp_proc);
  if (!dst_pid) {
    *st = NoResponder(x, "its process is gone");
    return true;
  }
  ShmCqe c;
  ClearCqe(&c);
  InitRecvCqe(w, len, &c);
  // DeliverSend's line: the receive's keys validated against its owner's
  // MRs, the payload staged in the completion's one line.
  Seg rseg[kMaxSge + 1];
  uint32_t nr = 0;
  uint64_t cap = 0;
  if (rw->pad || rw->num_sge > kStageSges ||
      !ValidateSges(x.mrs, resp_proc, resp->pd, rw->sge, rw->num_sge, IBV_ACCESS_LOCAL_WRITE, rseg, &nr,
                    &cap) ||
      len > cap) {
    *st = DeliverSend(x, w, *resp, rw, kNone, c, dst_pid, lseg, nl, len);
    return true;
  }
  if (!StageInLine(x, lseg, nl, len, &c, (w.flags & IBV_SEND_INLINE) != 0)) {
    UntakeRecv(x, *resp, kNone);
    Why(x, "LOC_PROT_ERR: the local buffer is no longer mapped");
    *st = IBV_WC_LOC_PROT_ERR;
    return true;
  }
  RecvCompletion(x, *resp, rw, c, IBV_WC_SUCCESS);
  *st = IBV_WC_SUCCESS;
  return true;
}

}  // namespace rdmasan::softnic::exec
