// error-completion: the first error completion of each QP (flushes aside),
// reported with the stack where the failed WR was posted.
#include "checkers/check.h"

#include "absl/strings/str_cat.h"

#include <infiniband/verbs.h>

namespace rdmasan::checkers {
namespace {

const char* StatusName(uint32_t s) {
  switch (s) {
    case IBV_WC_LOC_LEN_ERR:
      return "LOC_LEN_ERR";
    case IBV_WC_LOC_QP_OP_ERR:
      return "LOC_QP_OP_ERR";
    case IBV_WC_LOC_PROT_ERR:
      return "LOC_PROT_ERR";
    case IBV_WC_MW_BIND_ERR:
      return "MW_BIND_ERR";
    case IBV_WC_BAD_RESP_ERR:
      return "BAD_RESP_ERR";
    case IBV_WC_LOC_ACCESS_ERR:
      return "LOC_ACCESS_ERR";
    case IBV_WC_REM_INV_REQ_ERR:
      return "REM_INV_REQ_ERR";
    case IBV_WC_REM_ACCESS_ERR:
      return "REM_ACCESS_ERR";
    case IBV_WC_REM_OP_ERR:
      return "REM_OP_ERR";
    case IBV_WC_RETRY_EXC_ERR:
      return "RETRY_EXC_ERR";
    case IBV_WC_RNR_RETRY_EXC_ERR:
      return "RNR_RETRY_EXC_ERR";
    case IBV_WC_REM_ABORT_ERR:
      return "REM_ABORT_ERR";
    case IBV_WC_FATAL_ERR:
      return "FATAL_ERR";
    case IBV_WC_RESP_TIMEOUT_ERR:
      return "RESP_TIMEOUT_ERR";
    case IBV_WC_GENERAL_ERR:
      return "GENERAL_ERR";
    default:
      return "error";
  }
}

}  // namespace

void CheckErrorCompletion(CheckContext& c) {
  absl::flat_hash_set<core::ObjId> reported;
  for (const auto& wc : c.e.wcs) {
    if (wc.status == IBV_WC_SUCCESS || wc.status == IBV_WC_WR_FLUSH_ERR) continue;
    core::ObjId id;
    const QpState* q = c.s.QpOnCq(wc.qp_num, c.e.obj, &id);
    if (!q || q->known_error || !reported.insert(id).second) continue;
    std::vector<core::RelatedStack> rel;
    auto queue = c.s.Classify(wc, *q, c.e.obj);
    const SrqState* srq = q->srq ? c.s.Srq(q->srq) : nullptr;
    auto name_failed = [&](const auto& wrs) {
      for (const auto& w : wrs)
        if (w.wr_id == wc.wr_id) {
          rel.push_back({core::StackKind::kPosted, WrLabel(w, "failed"), w.stack});
          break;
        }
    };
    if (queue == State::Queue::kSend)
      name_failed(q->sq);
    else if (queue == State::Queue::kRecv)
      name_failed(q->rq);
    else if (srq)
      name_failed(srq->rq);
    std::string msg = absl::StrFormat(
        "%s: completion with status %s (%d), vendor_err 0x%x, wr_id=0x%x; the QP is now in ERR",
        QpName(c.s, id), StatusName(wc.status), wc.status, wc.vendor_err, wc.wr_id);
    // The device's own reason (softnic says why it refused), and the
    // window it names if that is one of ours.
    if (const WcReason* why = c.s.Reason(wc.qp_num, wc.wr_id, wc.status)) {
      absl::StrAppend(&msg, "\n  reason (softnic): ", why->text);
      for (const auto& [mw_id, m] : c.s.mws())
        if (m.invalidated_at && why->text.find(absl::StrFormat("rkey 0x%x ", m.rkey)) != std::string::npos) {
          rel.push_back({core::StackKind::kInvalidated,
                         absl::StrFormat("rkey 0x%x invalidated (%s) at", m.rkey, m.invalidated_by),
                         m.invalidated_at});
          break;
        }
    }
    c.Emit(core::CheckId::kErrorCompletion, std::move(msg), std::move(rel));
  }
}

}  // namespace rdmasan::checkers
