// buffer-modified-in-flight: the bytes of a send-side SGE are unchanged from
// the post until the completion that retires the WR is polled
// (docs/checks.md#buffer-modified-in-flight: only that completion proves
// the NIC is done with the buffer).  The
// interposer hashes each SGE at post and again at retirement and sends both
// in a kRetire event; this check compares them.  The report names where the
// SGE's MR was registered too: whose memory it is (a library's own buffer
// pool, say, registered in its allocator) is what a suppression can tell
// apart from the application's buffers.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckBufferModifiedInFlight(CheckContext& c) {
  for (const auto& w : c.e.send_wrs) {
    for (size_t i = 0; i < w.sges.size(); ++i) {
      const core::Sge& g = w.sges[i];
      // hash_now is 0 when the memory could no longer be read (no longer
      // registered): other checks report that; no claim about the bytes.
      if (!g.hash || !g.hash_now || g.hash == g.hash_now) continue;
      OutstandingWr o;
      o.wr_id = w.wr_id;
      o.opcode = w.opcode;
      std::vector<core::RelatedStack> rel = {{core::StackKind::kPosted, WrLabel(o, "modified"), w.posted_at}};
      if (const core::ObjId mr = c.s.MrByLkey(g.lkey))
        if (const MrState* m = c.s.MrStateByLkey(g.lkey))
          rel.push_back(
              {core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", mr), m->stack});
      c.Emit(core::CheckId::kBufferModifiedInFlight,
             absl::StrFormat("%s: SGE %d [0x%x, +%d) of WR wr_id=0x%x %s changed between its post and the "
                             "completion that retired it",
                             QpName(c.s, c.e.obj), i, g.addr, g.length, w.wr_id, WrOpcodeName(w.opcode)),
             rel);
      break;
    }
  }
}

}  // namespace rdmasan::checkers
