// checkers/state_tm: the books of tag matching (a TM SRQ's tagged buffers
// and list operations), split from state.cc at its seam; see state.h.
//
// May not: look at anything but Events, or report.
#include <infiniband/verbs.h>

#include "checkers/state.h"

namespace rdmasan::checkers {

using core::Event;

// ------------------------------------------------------- tag matching --
// A TM SRQ's tagged buffers are in the device's hands from TAG_ADD until
// the completion that ends its use of them; a signaled list operation
// waits in tm_ops for its own completion (TAG_DEL's removes the tag).

void State::ApplyPostSrqOps(const Event& e) {
  SrqState* srq = MutableSrq(e.obj);
  if (!srq) return;
  const size_t n = std::min<size_t>(e.send_wrs.size(), e.bad_index);
  for (size_t i = 0; i < n; ++i) {
    const core::SendWr& w = e.send_wrs[i];
    const bool signaled = w.send_flags & IBV_OPS_SIGNALED;
    const uint32_t handle = w.imm_data;
    if (w.opcode == IBV_WR_TAG_ADD) {
      TmTag& t = srq->tags[handle];
      t = TmTag{};
      t.tag = w.compare_add;
      t.seq = ++srq->tm_seq;
      OutstandingWr& o = t.wr;
      o.wr_id = w.remote_addr;
      o.signaled = true;
      o.is_recv = true;
      o.is_tag = true;
      o.stack = e.stack;
      o.sges.assign(w.sges.data(), w.sges.data() + w.sges.size());
    } else if (w.opcode == IBV_WR_TAG_DEL && !signaled) {
      // Nothing will say when an unsignaled removal took effect: the
      // buffer is the program's again from here (a removal that fails, of
      // a buffer a message already took, completes TM_ERR and changes
      // nothing).
      if (auto t = srq->tags.find(handle); t != srq->tags.end() && !t->second.matched) srq->tags.erase(t);
    }
    if (signaled) {
      srq->tm_ops.push_back({w.wr_id, w.opcode, handle, true});
      if (srq->tm_ops.size() > 4096) srq->tm_ops.pop_front();  // a program that never polls
    }
  }
}

namespace {

// The oldest tag (by post) with this recv_wr_id whose match state is
// `matched`, or end.
absl::btree_map<uint32_t, TmTag>::iterator OldestTag(absl::btree_map<uint32_t, TmTag>& tags, uint64_t wr_id,
                                                     bool matched) {
  auto best = tags.end();
  for (auto it = tags.begin(); it != tags.end(); ++it)
    if (it->second.wr.wr_id == wr_id && it->second.matched == matched &&
        (best == tags.end() || it->second.seq < best->second.seq))
      best = it;
  return best;
}

}  // namespace

void State::ApplyTmWc(const Event& e) {
  if (e.wcs.empty()) return;
  const core::Completion& c = e.wcs[0];
  const uint32_t flags = e.count;
  const bool op = c.status == IBV_WC_TM_ERR ||
                  (c.status == IBV_WC_SUCCESS &&
                   (c.opcode == IBV_WC_TM_ADD || c.opcode == IBV_WC_TM_DEL || c.opcode == IBV_WC_TM_SYNC));
  // The SRQ: the one of the QP the completion names (a receive), else a
  // TM SRQ whose operations complete on this CQ and wait for this wr_id
  // (the lowest id first, so a replay decides alike).
  SrqState* srq = nullptr;
  ObjId qid = 0;
  if (const QpState* q = QpOnCq(c.qp_num, e.obj, &qid); q && q->srq && !op) srq = MutableSrq(q->srq);
  if (!srq && op) {
    ObjId best = 0;
    for (auto& [id, s] : srqs_) {
      if (!s.tm || s.tm_cq != e.obj || (best && id > best)) continue;
      for (const TmOp& o : s.tm_ops)
        if (o.wr_id == c.wr_id) {
          best = id;
          break;
        }
    }
    srq = best ? MutableSrq(best) : nullptr;
  }
  if (!srq) return;
  auto& tags = srq->tags;
  if (op) {
    auto it = srq->tm_ops.begin();
    while (it != srq->tm_ops.end() && it->wr_id != c.wr_id) ++it;
    if (it == srq->tm_ops.end()) return;
    const TmOp o = *it;
    srq->tm_ops.erase(it);
    // A removal that succeeded: the buffer is the program's again.
    if (c.status == IBV_WC_SUCCESS && o.opcode == IBV_WR_TAG_DEL)
      if (auto t = tags.find(o.handle); t != tags.end() && !t->second.matched) tags.erase(t);
    return;
  }
  if (c.status == IBV_WC_TM_RNDV_INCOMPLETE) {  // the data phase of a match ended
    auto t = OldestTag(tags, c.wr_id, true);
    if (t == tags.end()) t = OldestTag(tags, c.wr_id, false);
    if (t != tags.end()) tags.erase(t);
    return;
  }
  if (c.status != IBV_WC_SUCCESS) return;
  bool match = flags & IBV_WC_TM_MATCH, data = flags & IBV_WC_TM_DATA_VALID;
  if (c.opcode == IBV_WC_TM_RECV && (flags & kTmFlagsUnknown)) {
    // No flags to go by: a tagged buffer with this wr_id takes it.
    if (OldestTag(tags, c.wr_id, true) != tags.end())
      match = false, data = true;
    else if (OldestTag(tags, c.wr_id, false) != tags.end())
      match = data = true;
  }
  if (c.opcode == IBV_WC_TM_RECV && (match || data)) {
    auto t = OldestTag(tags, c.wr_id, !match);
    if (t == tags.end()) return;
    if (data)
      tags.erase(t);
    else
      t->second.matched = true;
    return;
  }
  // An unexpected message (TM_RECV without TM flags) or a NO_TAG one: an
  // ordinary receive of the SRQ took it.
  auto gone = [this](OutstandingWr& w) { DropDests(w); };
  if (!srq->rq.empty() && !srq->rq.Retire(c.wr_id, gone)) srq->rq.pop_front(gone);
}

}  // namespace rdmasan::checkers
