// atomic-misaligned: an atomic's remote address is 8-aligned and its local
// buffer is exactly 8 bytes.
#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportAtomicMisaligned(CheckContext& c, const core::SendWr& w,
                                                         uint64_t total) {
  c.Emit(core::CheckId::kAtomicMisaligned,
         absl::StrFormat("post_send to %s: %s wr_id=0x%x has remote address 0x%x and a %d-byte local buffer "
                         "(needs 8-aligned and 8 bytes)",
                         QpName(c.s, c.e.obj), WrOpcodeName(w.opcode), w.wr_id, w.remote_addr, total));
}

}  // namespace

void CheckAtomicMisaligned(CheckContext& c) {
  if (c.e.kind != core::EventKind::kPostSend) return;
  for (const core::SendWr& w : c.e.send_wrs) {
    if (!IsAtomic(w.opcode)) continue;
    uint64_t total = 0;
    for (const auto& g : w.sges) total += g.length;
    if (w.remote_addr % 8 != 0 || total != 8) ReportAtomicMisaligned(c, w, total);
  }
}

}  // namespace rdmasan::checkers
