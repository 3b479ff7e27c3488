// Device-memory MRs, parent domains and imported objects in the shim (see
// domains.h).  The providers' reg_dm_mr and alloc_parent_domain are saved
// with the context's other ops (wrap_ops.inc); off the data path, a mutex
// guards the set of parent domains.
#include "interpose/domains.h"

#include <errno.h>

#include <mutex>

#include "absl/container/flat_hash_set.h"
#include "core/event.h"
#include "core/stack.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/thread_domains.h"
#include "interpose/wrap_internal.h"

namespace rdmasan::interpose {
namespace {

constinit std::mutex g_parents_mu;
absl::flat_hash_set<const void*>& Parents() {  // made on first use
  static auto* const parents = new absl::flat_hash_set<const void*>();
  return *parents;
}

}  // namespace

ibv_mr* wrap::RegDmMr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned access) {
  const Saved* s = Find(pd->context);
  const auto reg_dm_mr = s ? s->reg_dm_mr : nullptr;
  if (!reg_dm_mr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer() || !Checking()) return reg_dm_mr(pd, dm, offset, length, access);
  core::Event e;
  e.kind = core::EventKind::kRegMr;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_mr* mr = reg_dm_mr(pd, dm, offset, length, access);
  const int err = errno;
  e.parent = Id(pd);
  e.addr = 0;  // the device's memory: no address of the program's
  e.iova = 0;  // zero-based
  e.length = length;
  e.access = access;
  if (mr) {
    e.obj = Assign(mr);
    e.lkey = mr->lkey;
    e.rkey = mr->rkey;
  }
  e.ret = mr ? 0 : -1;
  e.err = mr ? 0 : err;
  Emit(e);
  errno = err;
  return mr;
}

ibv_pd* wrap::AllocParentDomain(ibv_context* ctx, ibv_parent_domain_init_attr* attr) {
  const Saved* s = Find(ctx);
  const auto alloc_parent_domain = s ? s->alloc_parent_domain : nullptr;
  if (!alloc_parent_domain) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  // thread-domain-race names where a thread domain's parent domain was made.
  const core::StackId stack =
      re.outer() && attr && attr->td && Checking() ? RDMASAN_CAPTURE_CALLER_STACK() : 0;
  ibv_pd* pd = alloc_parent_domain(ctx, attr);
  if (pd && re.outer() && attr) {
    NoteAlias(pd, attr->pd);
    if (Checking()) td::NoteParentDomain(pd, attr->td, stack);
    std::lock_guard<std::mutex> g(g_parents_mu);
    Parents().insert(pd);
  }
  return pd;
}

void NoteAlias(const void* obj, const void* of) {
  // An untracked object's handles stay untracked too.
  if (const core::ObjId id = Id(of)) AssignAlias(obj, id);
}

bool IsParentDomain(const void* pd) {
  std::lock_guard<std::mutex> g(g_parents_mu);
  return Parents().contains(pd);
}

void ForgetParentDomain(const void* pd) {
  Forget(pd);
  td::ForgetParentDomain(static_cast<const ibv_pd*>(pd));
  std::lock_guard<std::mutex> g(g_parents_mu);
  Parents().erase(pd);
}

}  // namespace rdmasan::interpose
