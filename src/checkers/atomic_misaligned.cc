// atomic-misaligned: an atomic's remote address is 8-aligned and its local
// buffer is exactly 8 bytes.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckAtomicMisaligned(CheckContext& c) {
  if (c.e.kind != core::EventKind::kPostSend) return;
  for (const auto& w : c.e.send_wrs) {
    if (!IsAtomic(w.opcode)) continue;
    uint64_t total = 0;
    for (const auto& g : w.sges) total += g.length;
    if (w.remote_addr % 8 != 0 || total != 8)
      c.Emit(core::CheckId::kAtomicMisaligned,
             absl::StrFormat("post_send to %s: %s wr_id=0x%x has remote address 0x%x and a %d-byte local buffer "
                             "(needs 8-aligned and 8 bytes)",
                             QpName(c.s, c.e.obj), WrOpcodeName(w.opcode), w.wr_id, w.remote_addr, total));
  }
}

}  // namespace rdmasan::checkers
