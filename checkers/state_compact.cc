// checkers/state_compact: the books of the compact entries, one post of
// one WR (State::ApplyOneSend, ApplyOneRecv): the same books ApplyPostSend
// and ApplyPostRecv keep for such a post, written from the OneSend or
// OneRecv record instead of an Event; split from state.cc at its seam.
//
// May not: keep any book the event path would not (CheckersCompactEntries
// compares the two), look at anything but the record and the books, or
// report; a post it cannot book as the event path would is declined
// (false) before anything is written.
#include <infiniband/verbs.h>

#include "checkers/state.h"

namespace rdmasan::checkers {

bool State::ApplyOneSend(const OneSend& p, QpState* qp) {
  // ApplyPostSend's work for this one accepted WR (FromSend, the run, the
  // pending count), in the same order; AddSendDests has nothing to do for
  // a OneSendable WR unless its payload was hashed while a READ or atomic
  // is outstanding.
  QpState& q = *qp;
  const bool dests = dests_.local_writes();
  const bool hashed = p.has_sge && p.sge.hash != 0;
  if (__builtin_expect(dests && hashed && dests_.AnyLocalWrite(), 0)) return false;
  const bool sig = q.sq_sig_all || (p.send_flags & IBV_SEND_SIGNALED);
  OutstandingWr& o = q.sq.push_back();
  o.wr_id = p.wr_id;
  o.opcode = p.opcode;
  o.signaled = sig;
  o.is_inline = (p.send_flags & IBV_SEND_INLINE) != 0;
  o.is_recv = false;
  o.stack = p.stack;
  o.rkey = p.imm_data;
  o.ah = 0;
  o.sges.assign_one(p.has_sge ? &p.sge : nullptr);
  o.hashed = hashed;
  if (dests) o.dest_key = 0;
  q.unsignaled_run = sig ? 0 : q.unsignaled_run + 1;
  AdjustPending(q.scq, sig ? 1 : 0);
  q.sq_signaled += sig ? 1 : 0;
  if (__builtin_expect(q.early.n != 0, 0)) MatchEarly(q);
  return true;
}

bool State::ApplyOneRecv(const OneRecv& p, QpState* q) {
  // ApplyPostRecv's work for this one accepted WR (FromRecv, the pending
  // count); AddRecvDest's index is off unless overlapping-destinations is.
  if (__builtin_expect(dests_.receives(), 0)) return false;
  OutstandingWr& o = q->rq.push_back();
  o.wr_id = p.wr_id;
  o.opcode = 0;
  o.signaled = true;
  o.is_inline = false;
  o.is_recv = true;
  o.stack = p.stack;
  o.rkey = 0;
  o.ah = 0;
  o.hashed = false;
  o.sges.assign_one(p.has_sge ? &p.sge : nullptr);
  AdjustPending(q->rcq, 1);
  if (__builtin_expect(q->early.n != 0, 0)) MatchEarly(*q);
  return true;
}

}  // namespace rdmasan::checkers
