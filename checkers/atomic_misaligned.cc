// atomic-misaligned: an atomic's remote address is 8-aligned and its local
// buffer (an atomic write's value) is exactly 8 bytes.
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
  for (const core::SendWr& w : c.e.send_wrs) {
    uint64_t total = 0;
    if (AtomicMisaligned(w, &total)) ReportAtomicMisaligned(c, w, total);
  }
}

}  // namespace rdmasan::checkers
