// The exported PD and MR verbs (interpose/exports_internal.h): alloc and
// dealloc, the registration entry points, rereg, import and unimport.
// Every one that takes a PD or an MR refuses a dead one (use-after-destroy).
#include "interpose/domains.h"
#include "interpose/exports_internal.h"

namespace {

ibv_mr* AfterRegMr(const Reentry& re, rdmasan::core::StackId stack, ibv_pd* pd, ibv_mr* mr, void* addr,
                   size_t length, uint64_t iova, unsigned access) {
  if (!Watch(re)) {
    ip::ForgetDestroyed(mr);  // a new object at a destroyed one's address, with checking off too
    return mr;
  }
  Event e = Ev(EventKind::kRegMr, stack);
  e.parent = ip::Id(pd);
  e.addr = reinterpret_cast<uintptr_t>(addr);
  e.length = length;
  e.iova = iova;
  e.access = access;
  if (mr) {
    e.obj = ip::Assign(mr);
    e.lkey = mr->lkey;
    e.rkey = mr->rkey;
    ip::NoteRegistered(addr, length);
  }
  Done(e, mr ? 0 : -1);
  return mr;
}

}  // namespace

// --------------------------------------------------------------- PD / MR --

RDMASAN_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  VERB_PROLOGUE(kAllocPd, kByKind, context, nullptr, kParent, -1, nullptr);
  const auto stack = CALLER_STACK();
  ibv_pd* pd = Fails(re, Point::kAllocPd, context) ? nullptr : ip::TableOf(context).alloc_pd(context);
  return AfterCreate(re, stack, EventKind::kAllocPd, context, pd);
}

RDMASAN_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  VERB_PROLOGUE(kDeallocPd, kByKind, pd, pd->context, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  // A parent domain is a handle of its PD to the books (interpose/domains.h):
  // deallocating it ends no PD.
  if (ip::IsParentDomain(pd)) {
    const int rc = ip::TableOf(pd->context).dealloc_pd(pd);
    if (!rc) ip::ForgetParentDomain(pd);
    return rc;
  }
  return Destroy(EventKind::kDeallocPd, pd, stack, re, &DispatchTable::dealloc_pd);
}

// An imported object is a handle of the object the books already know
// (interpose/domains.h); unimport forgets the handle, nothing else.
RDMASAN_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  VERB_PROLOGUE(kOpenDevice, kImportPd, context, nullptr, kObj, -1, nullptr);
  ibv_pd* original = nullptr;
  ibv_pd* pd = ip::TableOf(context).import_pd(context, pd_handle, &original);
  if (pd && re.outer()) ip::NoteAlias(pd, original);  // none for a real provider's
  return pd;
}

RDMASAN_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  VERB_PROLOGUE(kDeallocPd, kUnimportPd, pd, pd->context, kObj, EINVAL);
  ip::Forget(pd);
  ip::TableOf(pd->context).unimport_pd(pd);
}

RDMASAN_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  VERB_PROLOGUE(kRegMr, kByKind, pd, pd->context, kParent, -1, nullptr);
  const auto stack = REG_STACK();
  ibv_mr* mr =
      Fails(re, Point::kRegMr, pd) ? nullptr : ip::TableOf(pd->context).reg_mr(pd, addr, length, access);
  return AfterRegMr(re, stack, pd, mr, addr, length, reinterpret_cast<uintptr_t>(addr), access);
}

RDMASAN_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  VERB_PROLOGUE(kRegMr, kRegMrIova, pd, pd->context, kParent, -1, nullptr);
  const auto stack = REG_STACK();
  ibv_mr* mr = Fails(re, Point::kRegMr, pd)
                   ? nullptr
                   : ip::TableOf(pd->context).reg_mr_iova(pd, addr, length, iova, access);
  return AfterRegMr(re, stack, pd, mr, addr, length, iova, access);
}

RDMASAN_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                        unsigned access) {
  VERB_PROLOGUE(kRegMr, kRegMrIova, pd, pd->context, kParent, -1, nullptr);
  const auto stack = REG_STACK();
  ibv_mr* mr = Fails(re, Point::kRegMr, pd)
                   ? nullptr
                   : ip::TableOf(pd->context).reg_mr_iova2(pd, addr, length, iova, access);
  return AfterRegMr(re, stack, pd, mr, addr, length, iova, access);
}

RDMASAN_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                         int access) {
  VERB_PROLOGUE(kRegMr, kRegDmabufMr, pd, pd->context, kParent, -1, nullptr);
  // A device without it (softnic) answers before the fault point.
  const auto reg = ip::TableOf(pd->context).reg_dmabuf_mr.Find();
  if (!reg) return errno = EOPNOTSUPP, nullptr;
  if (Fails(re, Point::kRegMr, pd)) return nullptr;
  return reg(pd, offset, length, iova, fd, access);
}

RDMASAN_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  VERB_PROLOGUE(kRegMr, kImportMr, pd, pd->context, kParent, -1, nullptr);
  ibv_mr* original = nullptr;
  ibv_mr* mr = ip::TableOf(pd->context).import_mr(pd, mr_handle, &original);
  if (mr && re.outer()) ip::NoteAlias(mr, original);  // none for a real provider's
  return mr;
}

RDMASAN_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  VERB_PROLOGUE(kDeregMr, kUnimportMr, mr, mr->context, kObj, EINVAL);
  ip::Forget(mr);
  ip::TableOf(mr->context).unimport_mr(mr);
}

RDMASAN_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  VERB_PROLOGUE(kReregMr, kByKind, mr, mr->context, kObj, IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_ERR_INPUT);
  REFUSE_IF_DEAD(kReregMr, kByKind, (flags & IBV_REREG_MR_CHANGE_PD) ? pd : nullptr, nullptr, kParent,
                 IBV_REREG_MR_ERR_INPUT, IBV_REREG_MR_ERR_INPUT);
  const auto stack = REG_STACK();
  void* const old_addr = mr->addr;
  const size_t old_length = mr->length;
  const uint32_t old_lkey = mr->lkey;
  const int rc = ip::TableOf(mr->context).rereg_mr(mr, flags, pd, addr, length, access);
  const rdmasan::core::ObjId id = ip::Id(mr);
  if (Watch(re) && id) {
    Event e = Ev(EventKind::kReregMr, stack);
    e.obj = id;
    e.count = static_cast<uint32_t>(flags);
    if (flags & IBV_REREG_MR_CHANGE_PD) e.parent = ip::Id(pd);
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
      e.addr = e.iova = reinterpret_cast<uintptr_t>(addr);
      e.length = length;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) e.access = static_cast<uint32_t>(access);
    e.lkey = mr->lkey;
    e.rkey = mr->rkey;
    Done(e, rc);
  }
  // The memory the registration covers moved (free-registered watches it;
  // after ERR_DO_FORK_OLD too: "New MR is valid").  The old range stays
  // watched while WRs posted through the old registration are outstanding
  // (rereg-in-flight was just reported; free-in-flight still applies to
  // that memory), as after ibv_dereg_mr.
  if ((rc == 0 || rc == IBV_REREG_MR_ERR_DO_FORK_OLD) && id && (flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
    if (!(re.outer() && ip::LkeyInFlight(old_lkey))) ip::NoteDeregistered(old_addr, old_length);
    ip::NoteRegistered(addr, length);
  }
  return rc;
}

RDMASAN_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  VERB_PROLOGUE(kDeregMr, kByKind, mr, mr->context, kObj, EINVAL, EINVAL);
  const auto stack = REG_STACK();
  Event e = Ev(EventKind::kDeregMr, stack);
  e.obj = ip::Id(mr);
  e.lkey = mr->lkey;
  void* const addr = mr->addr;
  const size_t length = mr->length;
  const bool tracked = e.obj != 0;
  int rc = DestroyHolding(mr, e.obj, [&] { return ip::TableOf(mr->context).dereg_mr(mr); });
  if (Watch(re)) Done(e, rc);
  // The memory of WRs still in flight stays watched (free-in-flight) after
  // their MR is gone (dereg-in-flight was just reported): the NIC may still
  // use it until the retiring completion.  Its free then drops it.
  if (!rc && tracked && !(re.outer() && ip::LkeyInFlight(e.lkey))) ip::NoteDeregistered(addr, length);
  if (!rc) ip::Forget(mr);
  return rc;
}

RDMASAN_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  VERB_PROLOGUE(kOpenDevice, kImportDm, context, nullptr, kObj, -1, nullptr);
  return ip::TableOf(context).import_dm(context, dm_handle);
}

RDMASAN_EXPORT void ibv_unimport_dm(ibv_dm* dm) {
  Reentry re;
  ip::TableOf(dm->context).unimport_dm(dm);
}
