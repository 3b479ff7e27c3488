// sq-overflow: outstanding WRs plus the posted chain fit in the max_send_wr
// the provider returned (docs/checks.md#sq-overflow: track SQEs directly, check every post).
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportSqOverflow(CheckContext& c, const QpState& q, uint64_t outstanding,
                                                   uint64_t chain) {
  if (c.Repeated(core::CheckId::kSqOverflow)) return;
  std::vector<core::RelatedStack> rel;
  if (!q.sq.empty())
    rel.push_back(
        {core::StackKind::kPosted, WrLabel(q.sq.front(), "oldest outstanding"), q.sq.front().stack});
  rel.push_back({core::StackKind::kCreated, "QP created at", q.stack});
  c.Emit(core::CheckId::kSqOverflow,
         absl::StrFormat("post_send of %d WR(s) to %s with %d outstanding exceeds max_send_wr=%d", chain,
                         QpName(c.s, c.e.obj), outstanding, q.caps.max_send_wr),
         std::move(rel));
}

}  // namespace

void CheckSqOverflow(CheckContext& c) {
  const QpState* q = c.qp;
  if (!q) return;
  if (q->type == IBV_QPT_XRC_RECV) {
    if (c.Repeated(core::CheckId::kSqOverflow)) return;
    c.Emit(core::CheckId::kSqOverflow,
           absl::StrFormat("post_send to %s, an XRC_RECV QP, which has no send queue (an XRC target only "
                           "receives; send from an XRC_SEND QP)",
                           QpName(c.s, c.e.obj)),
           {{core::StackKind::kCreated, "QP created at", q->stack}});
    return;
  }
  const uint64_t outstanding = q->sq.size(), chain = c.e.send_wrs.size();
  if (outstanding + chain > q->caps.max_send_wr) ReportSqOverflow(c, *q, outstanding, chain);
}

}  // namespace rdmasan::checkers
