#include "checkers/engine.h"

#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

constexpr CheckFn kChecks[] = {
    CheckPostState,      CheckSqOverflow,      CheckUnsignaledDeadlock, CheckUnsignaledRun,
    CheckRqOverflow,     CheckCqOverrun,       CheckSgeRules,           CheckInlineTooLarge,
    CheckAtomicMisaligned, CheckWrIdDuplicate, CheckDeregInFlight,      CheckDestroyInUse,
    CheckUnackedCqEvents, CheckNotifyWithoutPoll, CheckErrorCompletion, CheckForkWithMrs,
    CheckBufferModifiedInFlight, CheckFreeRange,
};

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
  CheckContext ctx(e, state_, &out);
  for (CheckFn f : kChecks) f(ctx);
  state_.Apply(e);
  return out;
}

}  // namespace rdmasan::checkers
