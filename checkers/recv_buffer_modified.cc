// recv-buffer-modified: the program writes nothing into a posted receive's
// buffers, or into the local destination of an outstanding RDMA READ or
// atomic, before the data lands there (docs/checks/memory.md).  The NIC
// owns that memory from the post until the completion is polled
// (ibv_post_recv(3), ibv_post_send(3)): a write in between races the NIC's
// and is lost, or leaves the buffer half old, half new.  Only the device
// sees the moment of placement, so the finding comes from softnic
// (softnic/fingerprint.h) as a kDestModified event before the poll that
// returns the completion; on a real NIC this check is silent.  The report
// is at that poll, with the stack that posted the WR.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

template <typename Queue>
const OutstandingWr* FindWr(const Queue& q, uint64_t wr_id) {
  for (const OutstandingWr& w : q)
    if (w.wr_id == wr_id && !w.is_tag) return &w;
  return nullptr;
}

}  // namespace

void CheckRecvBufferModified(CheckContext& c) {
  constexpr core::CheckId kId = core::CheckId::kRecvBufferModified;
  if (c.e.wcs.empty() || c.Repeated(kId)) return;
  const core::Completion& wc = c.e.wcs[0];
  const bool recv = c.e.count != 0;
  const ObjId qp_id = c.s.QpByNum(wc.qp_num);
  const QpState* qp = c.s.Qp(qp_id);
  const OutstandingWr* w = nullptr;
  if (qp && recv && qp->srq) {
    if (const SrqState* srq = c.s.Srq(qp->srq)) w = FindWr(srq->rq, wc.wr_id);
  } else if (qp) {
    w = recv ? FindWr(qp->rq, wc.wr_id) : FindWr(qp->sq, wc.wr_id);
  }
  std::string where = "[unknown buffer]";
  if (w && !w->sges.empty()) {
    const core::Sge& g = *w->sges.begin();
    uint64_t total = 0;
    for (const core::Sge& s : w->sges) total += s.length;
    where = w->sges.size() == 1 ? absl::StrFormat("[0x%x, +%d)", g.addr, g.length)
                                : absl::StrFormat("%d SGEs from [0x%x, +%d), %d bytes", w->sges.size(),
                                                  g.addr, g.length, total);
  }
  const std::string wr =
      recv ? absl::StrFormat("receive wr_id=0x%x", wc.wr_id)
           : absl::StrFormat("%s wr_id=0x%x", w ? WrOpcodeName(w->opcode) : "READ/atomic", wc.wr_id);
  const std::string qp_name = qp ? QpName(c.s, qp_id) : absl::StrFormat("QP number 0x%x", wc.qp_num);
  std::vector<core::RelatedStack> related;
  if (w) related.push_back({core::StackKind::kPosted, WrLabel(*w, "the"), w->stack});
  c.Emit(kId,
         absl::StrFormat(
             "poll_cq of CQ 0x%x returned the completion of %s on %s, whose %s %s the program wrote "
             "into after the post and before the data landed: the NIC owns it until this "
             "completion, so what the program wrote is lost or mixed with the %s",
             c.e.obj, wr, qp_name, recv ? "receive buffer" : "destination", where, recv ? "message" : "data"),
         std::move(related));
}

}  // namespace rdmasan::checkers
