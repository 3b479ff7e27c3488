// use-after-destroy: no verb is called on a handle after its successful
// destroy (ibv_destroy_qp/cq/srq/ah, ibv_dealloc_pd, ibv_dereg_mr,
// ibv_close_device): a second destroy, a post to a destroyed QP or SRQ, a
// poll or arm of a destroyed CQ, or an object created on a closed device.
// The interposer recognizes the stale handle, refuses the call (EINVAL, the
// provider is not called with freed memory) and names the object by the id
// it had; this check reports it with the stack of its destruction.
#include <errno.h>

#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportUseAfterDestroy(CheckContext& c, core::ObjId id,
                                                        const DestroyedObj& d, bool as_parent) {
  const char* gone = std::string(d.what) == "device context" ? "closed" : "destroyed";
  std::vector<core::RelatedStack> related = {
      {core::StackKind::kDestroyed, absl::StrFormat("%s %s at", d.what, gone), d.destroyed}};
  if (d.created)
    related.push_back({core::StackKind::kCreated, absl::StrFormat("%s created at", d.what), d.created});
  c.Emit(core::CheckId::kUseAfterDestroy,
         absl::StrFormat("ibv_%s %s %s 0x%x, which was already %s", core::EventKindName(c.e.kind),
                         as_parent ? "on" : "of", d.what, id, gone),
         std::move(related));
}

}  // namespace

void CheckUseAfterDestroy(CheckContext& c) {
  const auto& e = c.e;
  // Creation verbs name the destroyed object as their parent.
  const bool create = e.kind == core::EventKind::kAllocPd || e.kind == core::EventKind::kCreateCq ||
                      e.kind == core::EventKind::kCreateCompChannel;
  const core::ObjId id = create ? e.parent : e.obj;
  // The interposer refuses every such call with EINVAL before the provider
  // sees it; only its events name a destroyed object.
  if (!id || e.ret == 0 || e.err != EINVAL) return;
  if (const DestroyedObj* d = c.s.Destroyed(id)) ReportUseAfterDestroy(c, id, *d, create);
}

}  // namespace rdmasan::checkers
