#include "checkers/engine.h"

#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

using core::EventKind;

// Which checks look at which events, in report order.
struct Entry {
  EventKind kind;
  CheckFn fn;
};
constexpr Entry kChecks[] = {
    {EventKind::kPostSend, CheckPostBadQpState},
    {EventKind::kPostSend, CheckPostAfterError},
    {EventKind::kPostSend, CheckSqOverflow},
    {EventKind::kPostSend, CheckUnsignaledDeadlock},
    {EventKind::kPostSend, CheckUnsignaledRun},
    {EventKind::kPostSend, CheckCqOverrun},
    {EventKind::kPostSend, CheckSgeCount},
    {EventKind::kPostSend, CheckInvalidLkey},
    {EventKind::kPostSend, CheckSgeOutOfBounds},
    {EventKind::kPostSend, CheckMrAccess},
    {EventKind::kPostSend, CheckInlineTooLarge},
    {EventKind::kPostSend, CheckAtomicMisaligned},
    {EventKind::kPostSend, CheckWrIdDuplicate},
    {EventKind::kPostRecv, CheckPostBadQpState},
    {EventKind::kPostRecv, CheckPostAfterError},
    {EventKind::kPostRecv, CheckRqOverflow},
    {EventKind::kPostRecv, CheckCqOverrun},
    {EventKind::kPostRecv, CheckSgeCount},
    {EventKind::kPostRecv, CheckInvalidLkey},
    {EventKind::kPostRecv, CheckSgeOutOfBounds},
    {EventKind::kPostRecv, CheckMrAccess},
    {EventKind::kPostSrqRecv, CheckRqOverflow},
    {EventKind::kPostSrqRecv, CheckCqOverrun},
    {EventKind::kCreateQp, CheckCqOverrun},
    {EventKind::kPostSrqRecv, CheckSgeCount},
    {EventKind::kPostSrqRecv, CheckInvalidLkey},
    {EventKind::kPostSrqRecv, CheckSgeOutOfBounds},
    {EventKind::kPostSrqRecv, CheckMrAccess},
    {EventKind::kPollCq, CheckErrorCompletion},
    {EventKind::kRetire, CheckBufferModifiedInFlight},
    {EventKind::kDeregMr, CheckDeregInFlight},
    {EventKind::kDestroyCq, CheckDestroyInUse},
    {EventKind::kDestroyCq, CheckUnackedCqEvents},
    {EventKind::kDeallocPd, CheckDestroyInUse},
    {EventKind::kDestroySrq, CheckDestroyInUse},
    {EventKind::kDestroyAh, CheckDestroyInUse},
    {EventKind::kWaitCqEvent, CheckNotifyWithoutPoll},
    {EventKind::kFreeRange, CheckFreeInFlight},
    {EventKind::kFreeRange, CheckFreeRegistered},
    {EventKind::kFork, CheckForkWithMrs},
};

struct Dispatch {
  std::vector<CheckFn> by_kind[static_cast<size_t>(EventKind::kCount)];
  Dispatch() {
    for (const Entry& e : kChecks) by_kind[static_cast<size_t>(e.kind)].push_back(e.fn);
  }
};

const Dispatch& Table() {
  static const Dispatch* d = new Dispatch();
  return *d;
}

}  // namespace

std::string QpName(const State& s, core::ObjId qp) {
  const QpState* q = s.Qp(qp);
  return q ? absl::StrFormat("QP 0x%x (qpn 0x%x)", qp, q->qpn) : absl::StrFormat("QP 0x%x", qp);
}

std::string WrLabel(const OutstandingWr& w, const char* what) {
  return absl::StrFormat("%s WR wr_id=0x%x %s posted at", what, w.wr_id, w.is_recv ? "RECV" : WrOpcodeName(w.opcode));
}

std::vector<core::Finding> Engine::OnEvent(const core::Event& e) {
  std::vector<core::Finding> out;
  const size_t k = static_cast<size_t>(e.kind);
  if (k < static_cast<size_t>(EventKind::kCount) && !Table().by_kind[k].empty()) {
    CheckContext ctx(e, state_, &out, &emitted_);
    for (CheckFn f : Table().by_kind[k]) f(ctx);
  }
  state_.Apply(e);
  return out;
}

}  // namespace rdmasan::checkers
