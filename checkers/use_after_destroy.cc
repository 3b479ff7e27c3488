// use-after-destroy: no verb is called on a handle after its successful
// destroy (ibv_destroy_qp/cq/srq/ah, ibv_dealloc_pd/mw, ibv_dereg_mr,
// ibv_destroy_comp_channel, ibv_close_device): a second destroy, a post to
// a destroyed QP or SRQ, a poll or arm of a destroyed CQ, an object made
// on a deallocated PD or a closed device, a query or modify of a destroyed
// object, a UD send through a destroyed AH, a call on an object of a
// closed device (checkers/use_after_destroy.h lists every verb).  The
// interposer recognizes the stale handle, refuses the call (EINVAL, the
// provider is not called with freed memory) and names the object by the
// id it had; this check reports it with the stack of its destruction.
#include "checkers/use_after_destroy.h"

#include <errno.h>

#include "checkers/check.h"

namespace rdmasan::checkers {
namespace {

[[gnu::noinline, gnu::cold]] void ReportUseAfterDestroy(CheckContext& c, core::ObjId id,
                                                        const DestroyedObj& d, const char* prep) {
  const char* gone = std::string(d.what) == "device context" ? "closed" : "destroyed";
  std::vector<core::RelatedStack> related = {
      {core::StackKind::kDestroyed, absl::StrFormat("%s %s at", d.what, gone), d.destroyed}};
  if (d.created)
    related.push_back({core::StackKind::kCreated, absl::StrFormat("%s created at", d.what), d.created});
  const char* verb = UadVerbName(c.e.attr_mask);
  c.Emit(core::CheckId::kUseAfterDestroy,
         absl::StrFormat("ibv_%s %s %s 0x%x, which was already %s",
                         verb ? verb : core::EventKindName(c.e.kind), prep, d.what, id, gone),
         std::move(related));
}

}  // namespace

void CheckUseAfterDestroy(CheckContext& c) {
  const auto& e = c.e;
  // The interposer refuses every such call with EINVAL before the provider
  // sees it; only its events name a destroyed object.
  if (e.ret == 0 || e.err != EINVAL) return;
  // The handle the call acts on, the one it would create under, then the
  // others it names.
  const std::pair<core::ObjId, const char*> named[] = {{e.obj, "of"},       {e.parent, "on"},
                                                       {e.send_cq, "with"}, {e.recv_cq, "with"},
                                                       {e.srq, "with"},     {e.channel, "with"}};
  for (const auto& [id, prep] : named)
    if (id)
      if (const DestroyedObj* d = c.s.Destroyed(id)) return ReportUseAfterDestroy(c, id, *d, prep);
  for (const core::SendWr& w : e.send_wrs) {
    if (w.ah)
      if (const DestroyedObj* d = c.s.Destroyed(w.ah)) return ReportUseAfterDestroy(c, w.ah, *d, "through");
    if (w.bind.mw)
      if (const DestroyedObj* d = c.s.Destroyed(w.bind.mw))
        return ReportUseAfterDestroy(c, w.bind.mw, *d, "of");
  }
}

}  // namespace rdmasan::checkers
