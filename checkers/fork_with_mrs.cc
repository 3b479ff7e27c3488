// fork-with-mrs: fork() while MRs are registered and ibv_fork_init was not
// called: the child's copy-on-write breaks the parent's registered pages.
// ODP MRs (IBV_ACCESS_ON_DEMAND) pin no pages and follow the process's page
// tables through copy-on-write, so they do not count.
#include "checkers/check.h"

namespace rdmasan::checkers {

void CheckForkWithMrs(CheckContext& c) {
  if (c.s.fork_initialized() || c.s.mrs().empty()) return;
  auto pinned = [](const MrState& m) { return !(m.access & IBV_ACCESS_ON_DEMAND); };
  const core::ObjId id = LowestIdWhere(c.s.mrs(), pinned);
  if (!id) return;
  size_t n = 0;
  for (const auto& [mid, m] : c.s.mrs()) n += pinned(m);
  const MrState& mr = *c.s.Mr(id);
  c.Emit(core::CheckId::kForkWithMrs,
         absl::StrFormat("fork() with %d MR(s) registered and no ibv_fork_init()", n),
         {{core::StackKind::kRegistered, absl::StrFormat("MR 0x%x registered at", id), mr.stack}});
}

}  // namespace rdmasan::checkers
