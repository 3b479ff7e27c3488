// fork-with-mrs: fork() while MRs are registered and ibv_fork_init was not
// called: the child's copy-on-write breaks the parent's registered pages.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckForkWithMrs(CheckContext& c) {
  if (c.e.kind != core::EventKind::kFork || c.s.fork_initialized() || c.s.mrs().empty()) return;
  const core::ObjId id = LowestIdWhere(c.s.mrs(), [](const MrState&) { return true; });
  const MrState& mr = *c.s.Mr(id);
  c.Emit(core::CheckId::kForkWithMrs,
         absl::StrFormat("fork() with %d MR(s) registered and no ibv_fork_init()", c.s.mrs().size()),
         {{core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", id), mr.stack}});
}

}  // namespace rdmasan::checkers
