// softnic thread domains and parent domains: ibv_alloc_td / ibv_dealloc_td,
// ibv_alloc_parent_domain, and what a parent domain means to the QPs, CQs
// and SRQs made with it.
//
// A thread domain promises the device that one thread uses the objects of
// its parent domains; softnic takes its locks anyway, so it only counts the
// parent domains that name it (ibv_dealloc_td of a used one: EBUSY).  A
// parent domain is a PD (ibv_alloc_parent_domain(3)): it carries the id of
// its protection domain, so MRs, keys and QPs match exactly as the PD's
// own; it is deallocated with ibv_dealloc_pd, EBUSY while a QP, CQ or SRQ
// made with it lives, and the protection domain is EBUSY while a parent
// domain names it.  With IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS, each QP,
// CQ and SRQ created with the parent domain gets its private buffer (the
// memory a provider would take for the queue's ring: softnic's rings live
// in the fabric, which no user allocator can provide, so the block is
// held, not written) from the user's alloc(), and gives it back with the
// user's free() when destroyed; alloc() returning NULL fails the create
// with ENOMEM, IBV_ALLOCATOR_USE_DEFAULT means softnic's own (and no
// free() call), as ibv_alloc_parent_domain(3) says.  The resource_type
// passed is kResQp, kResCq or kResSrq.
//
// May not: call the user's allocators with a softnic lock held, or free
// what the user's allocator did not return.
#include <errno.h>

#include <algorithm>
#include <mutex>
#include <new>

#include "absl/container/flat_hash_map.h"
#include "softnic/internal.h"
#include "softnic/owned.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

struct SnTd {
  ibv_td td;
  uint32_t users = 0;  // parent domains naming it
};

struct SnParentDomain {
  SnPd base;  // first: PdId() reads its id, the protection domain's
  ibv_pd* protection = nullptr;
  SnTd* td = nullptr;
  void* (*alloc)(ibv_pd*, void*, size_t, size_t, uint64_t) = nullptr;
  void (*free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  void* pd_context = nullptr;
  uint32_t users = 0;  // QPs, CQs and SRQs made with it
};

// An object made with a parent domain, and the block it got from the
// user's allocator (null: softnic's own).
struct Use {
  SnParentDomain* domain;
  void* block;
  uint64_t type;
};

struct DomainTable {
  std::mutex mu;
  absl::flat_hash_map<const ibv_pd*, SnParentDomain*> parents;
  absl::flat_hash_map<const ibv_pd*, uint32_t> of_protection;  // parent domains per PD
  absl::flat_hash_map<const void*, Use> uses;
};
DomainTable& Domains() {
  static DomainTable* table = new DomainTable();
  return *table;
}

SnParentDomain* FindLocked(const ibv_pd* pd) {
  auto it = Domains().parents.find(pd);
  return it == Domains().parents.end() ? nullptr : it->second;
}

// Records `obj` as made with `pd` (if a parent domain), taking its block
// from the user's allocator.  False (errno set) if that allocator failed.
bool Attach(ibv_pd* pd, const void* obj, uint64_t type, size_t size) {
  SnParentDomain* d;
  {
    std::lock_guard<std::mutex> g(Domains().mu);
    d = FindLocked(pd);
    if (!d) return true;
  }
  void* block = nullptr;
  if (d->alloc) {
    block = d->alloc(pd, d->pd_context, size, kDomainBlockAlign, type);
    if (!block) {
      errno = ENOMEM;
      return false;
    }
    if (block == IBV_ALLOCATOR_USE_DEFAULT) block = nullptr;
  }
  std::lock_guard<std::mutex> g(Domains().mu);
  ++d->users;
  Domains().uses[obj] = {d, block, type};
  return true;
}

}  // namespace

ibv_td* AllocTd(ibv_context* ctx, ibv_td_init_attr* attr) {
  if (!attr || attr->comp_mask) {
    errno = EINVAL;
    return nullptr;
  }
  auto* td = new (std::nothrow) SnTd();
  if (!td) {
    errno = ENOMEM;
    return nullptr;
  }
  td->td.context = ctx;
  return &td->td;
}

int DeallocTd(ibv_td* ibtd) {
  auto* td = reinterpret_cast<SnTd*>(ibtd);
  {
    std::lock_guard<std::mutex> g(Domains().mu);
    if (td->users) return EBUSY;
  }
  delete td;
  return 0;
}

ibv_pd* AllocParentDomain(ibv_context* ctx, ibv_parent_domain_init_attr* attr) {
  constexpr uint32_t kMask = IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS | IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT;
  if (!attr || !attr->pd || attr->pd->context != ctx || (attr->td && attr->td->context != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask & ~kMask) {
    errno = EINVAL;
    return nullptr;
  }
  const bool allocators = attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS;
  if (allocators && (!attr->alloc || !attr->free)) {
    errno = EINVAL;
    return nullptr;
  }
  auto d = NewOwned<SnParentDomain>();
  if (!d) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(Domains().mu);
  // A parent domain's protection domain is a PD, not another parent domain.
  if (FindLocked(attr->pd)) {
    errno = EINVAL;
    return nullptr;
  }
  d->base.pd.context = ctx;
  d->base.pd.handle = attr->pd->handle;
  d->base.id = PdId(attr->pd);
  d->protection = attr->pd;
  d->td = reinterpret_cast<SnTd*>(attr->td);
  if (allocators) {
    d->alloc = attr->alloc;
    d->free = attr->free;
  }
  if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) d->pd_context = attr->pd_context;
  if (d->td) ++d->td->users;
  ++Domains().of_protection[attr->pd];
  Domains().parents[&d->base.pd] = d.get();
  return &d.release()->base.pd;  // the program's handle now
}

bool IsParentDomain(const ibv_pd* pd) {
  std::lock_guard<std::mutex> g(Domains().mu);
  return FindLocked(pd) != nullptr;
}

ibv_pd* ProtectionDomainOf(ibv_pd* pd) {
  std::lock_guard<std::mutex> g(Domains().mu);
  SnParentDomain* d = FindLocked(pd);
  return d ? d->protection : pd;
}

int DeallocParentDomain(ibv_pd* pd) {
  SnParentDomain* d;
  {
    std::lock_guard<std::mutex> g(Domains().mu);
    d = FindLocked(pd);
    if (!d) return EINVAL;
    if (d->users) return EBUSY;
    Domains().parents.erase(pd);
    auto it = Domains().of_protection.find(d->protection);
    if (it != Domains().of_protection.end() && --it->second == 0) Domains().of_protection.erase(it);
    if (d->td) --d->td->users;
  }
  delete d;
  return 0;
}

bool HasParentDomains(const ibv_pd* pd) {
  std::lock_guard<std::mutex> g(Domains().mu);
  return Domains().of_protection.contains(pd);
}

ibv_qp* QpInDomain(ibv_qp* qp, ibv_pd* pd) {
  if (!qp) return nullptr;
  const SnQp* q = Qp(qp);
  const size_t size = std::max<size_t>(q->sq.size(), 1) * sizeof(SendWqe);
  if (Attach(pd, qp, kResQp, size)) return qp;
  const int e = errno;
  DestroyQp(qp);
  errno = e;
  return nullptr;
}

ibv_cq_ex* CqInDomain(ibv_cq_ex* cq, ibv_pd* pd) {
  if (!cq) return nullptr;
  const size_t size = std::max<size_t>(Cq(ibv_cq_ex_to_cq(cq))->nslots, 1) * sizeof(ShmCqe);
  if (Attach(pd, ibv_cq_ex_to_cq(cq), kResCq, size)) return cq;
  const int e = errno;
  DestroyCq(ibv_cq_ex_to_cq(cq));
  errno = e;
  return nullptr;
}

ibv_srq* SrqInDomain(ibv_srq* srq, ibv_pd* pd) {
  if (!srq) return nullptr;
  // The ring's size as the fabric says (only a size to ask for: bounded).
  const ShmRq& rq = Srq(srq)->shm->rq;
  const size_t size = std::clamp<uint64_t>(uint64_t{rq.nslots} * rq.stride, 1, 1u << 30);
  if (Attach(pd, srq, kResSrq, size)) return srq;
  const int e = errno;
  DestroySrq(srq);
  errno = e;
  return nullptr;
}

void DetachFromDomain(const void* obj) {
  void (*user_free)(ibv_pd*, void*, void*, uint64_t) = nullptr;
  ibv_pd* pd = nullptr;
  void* pd_context = nullptr;
  Use u;
  {
    std::lock_guard<std::mutex> g(Domains().mu);
    auto it = Domains().uses.find(obj);
    if (it == Domains().uses.end()) return;
    u = it->second;
    Domains().uses.erase(it);
    // Read before the count drops: the domain may go as soon as it does.
    user_free = u.domain->free;
    pd = &u.domain->base.pd;
    pd_context = u.domain->pd_context;
    --u.domain->users;
  }
  if (u.block) user_free(pd, pd_context, u.block, u.type);
}

void InstallDmDomainOps(verbs_context* v) {
  v->alloc_dm = AllocDm;
  v->free_dm = FreeDm;
  v->reg_dm_mr = RegDmMr;
  v->alloc_td = AllocTd;
  v->dealloc_td = DeallocTd;
  v->alloc_parent_domain = AllocParentDomain;
}

}  // namespace rdmasan::softnic
