// Device-memory MRs, parent domains and imported objects in the shim (see
// domains.h).  Off the data path: a mutex guards both tables.
#include "interpose/domains.h"

#include <errno.h>

#include <mutex>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "core/event.h"
#include "core/stack.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"

namespace rdmasan::interpose {
namespace {

struct SavedOps {
  ibv_mr* (*reg_dm_mr)(ibv_pd*, ibv_dm*, uint64_t, size_t, unsigned) = nullptr;
  ibv_pd* (*alloc_parent_domain)(ibv_context*, ibv_parent_domain_init_attr*) = nullptr;
};

struct Tables {
  std::mutex mu;
  absl::flat_hash_map<const ibv_context*, SavedOps> ops;
  absl::flat_hash_set<const void*> parents;  // parent domains
};
Tables& T() {
  static Tables* t = new Tables();
  return *t;
}

SavedOps OpsOf(const ibv_context* ctx) {
  std::lock_guard<std::mutex> g(T().mu);
  auto it = T().ops.find(ctx);
  return it == T().ops.end() ? SavedOps{} : it->second;
}

// verbs_get_ctx_op's rule: the op exists if the provider's struct holds it.
bool HasOp(const verbs_context* v, size_t offset) { return v && v->sz >= sizeof(*v) - offset; }

ibv_mr* RegDmMr(ibv_pd* pd, ibv_dm* dm, uint64_t offset, size_t length, unsigned access) {
  const SavedOps s = OpsOf(pd->context);
  if (!s.reg_dm_mr) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  if (!re.outer() || !Checking()) return s.reg_dm_mr(pd, dm, offset, length, access);
  core::Event e;
  e.kind = core::EventKind::kRegMr;
  e.stack = RDMASAN_CAPTURE_CALLER_STACK();
  ibv_mr* mr = s.reg_dm_mr(pd, dm, offset, length, access);
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

ibv_pd* AllocParentDomain(ibv_context* ctx, ibv_parent_domain_init_attr* attr) {
  const SavedOps s = OpsOf(ctx);
  if (!s.alloc_parent_domain) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  Reentry re;
  ibv_pd* pd = s.alloc_parent_domain(ctx, attr);
  if (pd && re.outer() && attr) {
    NoteAlias(pd, attr->pd);
    std::lock_guard<std::mutex> g(T().mu);
    T().parents.insert(pd);
  }
  return pd;
}

}  // namespace

void WrapDomainOps(ibv_context* ctx) {
  verbs_context* v = verbs_get_ctx(ctx);
  if (!v) return;
  std::lock_guard<std::mutex> g(T().mu);
  if (T().ops.contains(ctx)) return;
  SavedOps s;
  if (HasOp(v, offsetof(verbs_context, reg_dm_mr))) s.reg_dm_mr = v->reg_dm_mr;
  if (HasOp(v, offsetof(verbs_context, alloc_parent_domain))) s.alloc_parent_domain = v->alloc_parent_domain;
  T().ops[ctx] = s;
  if (s.reg_dm_mr) v->reg_dm_mr = RegDmMr;
  if (s.alloc_parent_domain) v->alloc_parent_domain = AllocParentDomain;
}

void UnwrapDomainOps(ibv_context* ctx) {
  std::lock_guard<std::mutex> g(T().mu);
  auto it = T().ops.find(ctx);
  if (it == T().ops.end()) return;
  if (verbs_context* v = verbs_get_ctx(ctx)) {
    if (it->second.reg_dm_mr) v->reg_dm_mr = it->second.reg_dm_mr;
    if (it->second.alloc_parent_domain) v->alloc_parent_domain = it->second.alloc_parent_domain;
  }
  T().ops.erase(it);
}

void NoteAlias(const void* obj, const void* of) {
  // An untracked object's handles stay untracked too.
  if (const core::ObjId id = Id(of)) AssignAlias(obj, id);
}

bool IsParentDomain(const void* pd) {
  std::lock_guard<std::mutex> g(T().mu);
  return T().parents.contains(pd);
}

void ForgetParentDomain(const void* pd) {
  Forget(pd);
  std::lock_guard<std::mutex> g(T().mu);
  T().parents.erase(pd);
}

}  // namespace rdmasan::interpose
