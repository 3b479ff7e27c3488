// softnic protection domains, memory regions and address handles.
//
// A PD is process-local (an id); an MR lives in the fabric's MR table,
// where any requester checks its keys (access.h).  The key's low byte is a
// generation, so a key of a deregistered MR fails even after its slot is
// reused.  ibv_rereg_mr keeps the slot: a new translation moves the key to
// the slot's next generation (a NIC's new registration, so keys of the old
// range stop working); a new PD or access keeps the keys.  An MR with
// windows bound to it cannot be deregistered or re-registered (EBUSY), a
// PD with windows cannot be deallocated.
//
// Registration checks the range the way a provider's page pinning does:
// every page must be mapped, and writable when the access flags let the
// device write (LOCAL_WRITE, which REMOTE_WRITE/ATOMIC require); else NULL
// with EFAULT.  The check reads /proc/self/maps up to the end of the range
// (one read per 4 KiB of map text, no per-page work, so a 1 TiB region
// costs what a 4 KiB one does).  Memory unmapped after registration is the
// data path's problem: its copies fail with EFAULT instead of faulting
// (access.h), and RangeAccessible tells which side was at fault.
//
// On-demand paging (IBV_ACCESS_ON_DEMAND) is what softnic does anyway: it
// copies through the owner's address space at the time of each access and
// pins nothing.  An ODP MR is therefore registered without the mapping
// check (its pages may be mapped later, as a NIC faults them in); an access
// to a page still unmapped then is an error completion, as a failed fault
// is.  Implicit ODP (addr NULL, length SIZE_MAX) registers the whole
// address space, iova = va.  ibv_advise_mr validates its SGEs against ODP
// MRs of the PD and, being advice, prefetches nothing: there is no device
// page table to fill.  HUGETLB is accepted with ON_DEMAND only.
#include "softnic/softnic.h"

#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "softnic/internal.h"
#include "softnic/owned.h"

namespace rdmasan::softnic {
namespace {

// ibv_reg_mr(pd, NULL, SIZE_MAX, ... | IBV_ACCESS_ON_DEMAND): every address.
bool IsImplicitOdp(const void* addr, size_t length, unsigned access) {
  return !addr && length == SIZE_MAX && (access & IBV_ACCESS_ON_DEMAND);
}

// One line of /proc/self/maps: "lo-hi perms ...".  False if malformed.
bool ParseMapsLine(const char* line, uint64_t* lo, uint64_t* hi, bool* r, bool* w) {
  char* end;
  *lo = strtoull(line, &end, 16);
  if (*end != '-') return false;
  *hi = strtoull(end + 1, &end, 16);
  if (*end != ' ' || !end[1] || !end[2]) return false;
  *r = end[1] == 'r';
  *w = end[2] == 'w';
  return true;
}

// Walks the maps lines of `fd` from `*covered` on; true once the range up
// to `end` is covered, false at a gap or a page without the access.
bool CoverFromMaps(int fd, uint64_t end, bool write, uint64_t* covered) {
  char buf[4096];
  size_t have = 0;
  for (;;) {
    ssize_t n = read(fd, buf + have, sizeof(buf) - 1 - have);
    if (n <= 0) return false;
    have += n;
    buf[have] = 0;
    char* line = buf;
    for (char* nl; (nl = strchr(line, '\n')); line = nl + 1) {
      *nl = 0;
      uint64_t lo, hi;
      bool r, w;
      if (!ParseMapsLine(line, &lo, &hi, &r, &w)) return false;
      if (hi <= *covered) continue;
      if (lo > *covered || !r || (write && !w)) return false;
      *covered = hi;
      if (*covered >= end) return true;
    }
    have = buf + have - line;
    memmove(buf, line, have);
    if (have == sizeof(buf) - 1) return false;  // a line longer than the buffer
  }
}

}  // namespace

int RangeAccessible(uint64_t addr, uint64_t len, bool write) {
  if (len == 0) return 0;
  if (addr + len < addr) return EFAULT;
  int fd = open("/proc/self/maps", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;  // cannot tell (no /proc): the copies still fail safely
  uint64_t covered = addr;
  bool ok = CoverFromMaps(fd, addr + len, write, &covered);
  close(fd);
  return ok ? 0 : EFAULT;
}

ibv_pd* AllocPd(ibv_context* ctx) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto* pd = new (std::nothrow) SnPd();
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.context = ctx;
  FabricLock lock(p->fab);
  pd->id = p->fab->hdr()->next_pd++;
  if (pd->id == 0) pd->id = p->fab->hdr()->next_pd++;
  pd->pd.handle = pd->id;
  NotePd(&pd->pd);
  return &pd->pd;
}

int DeallocPd(ibv_pd* pd) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  if (IsParentDomain(pd)) return DeallocParentDomain(pd);
  if (HasParentDomains(pd)) return EBUSY;
  const uint32_t id = PdId(pd);
  {
    // Only the slots this process ever used can hold its MRs and QPs: the
    // walk stops there, not at the ends of the fabric's tables (16,384 MRs
    // and 4,096 QPs, whose pages a short program never touched).
    std::lock_guard<std::mutex> g(p->mu);  // qp_end
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    const uint32_t me = p->fab->self_proc();
    for (uint32_t i = 0; i < p->mr_slots(); ++i) {
      const ShmMr& m = h->mrs[i];
      if (m.in_use && m.proc == me && m.pd == id) return EBUSY;
    }
    for (uint32_t i = 0; i < p->qp_slots(); ++i) {
      const ShmQp& q = h->qps[i];
      if (q.in_use && q.proc == me && q.pd == id) return EBUSY;
    }
    for (auto& s : h->srqs)
      if (s.in_use && s.proc == me && s.pd == id) return EBUSY;
    if (MwsOfPdLocked(p, id)) return EBUSY;
  }
  ForgetPd(pd);
  delete reinterpret_cast<SnPd*>(pd);
  return 0;
}

namespace {

// 0 if `access` is one softnic registers, else the errno.
int CheckAccess(unsigned access) {
  constexpr unsigned kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ON_DEMAND |
                                  IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING |
                                  IBV_ACCESS_OPTIONAL_RANGE;
  if (access & ~kSupported) return (access & IBV_ACCESS_ZERO_BASED) ? EOPNOTSUPP : EINVAL;
  // HUGETLB tells an ODP registration its pages are huge; nothing else.
  if ((access & IBV_ACCESS_HUGETLB) && !(access & IBV_ACCESS_ON_DEMAND)) return EINVAL;
  // Remote write/atomic require local write (IB spec 10.6.3.1).
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE))
    return EINVAL;
  return 0;
}

// 0 if [addr, addr + length) may be registered with `access`, else the errno.
int CheckRange(void* addr, size_t length, unsigned access) {
  if (IsImplicitOdp(addr, length, access)) return 0;
  if (length == 0 || length > (1ull << 40) || !addr) return EINVAL;
  const uint64_t va = reinterpret_cast<uint64_t>(addr);
  if (va + length < va) return EINVAL;
  if (access & IBV_ACCESS_ON_DEMAND) return 0;  // faulted in at access, not pinned now
  return RangeAccessible(va, length, access & IBV_ACCESS_LOCAL_WRITE);
}

// The key after `key` in its slot (generation 0 is never used).
uint32_t NextKey(uint32_t slot, uint32_t key) {
  uint32_t gen = ((key & 0xff) + 1) & 0xff;
  if (gen == 0) gen = 1;
  return slot << 8 | gen;
}

}  // namespace

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  if (!GetProcess()) return nullptr;
  if (int e = CheckAccess(access)) {
    errno = e;
    return nullptr;
  }
  if (int e = CheckRange(addr, length, access)) {
    errno = e;
    return nullptr;
  }
  return RegRange(pd, reinterpret_cast<uint64_t>(addr), length, iova, access, addr);
}

ibv_mr* RegRange(ibv_pd* pd, uint64_t va, size_t length, uint64_t iova, unsigned access, void* addr) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto mr = NewOwned<SnMr>();
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->mrs, 1);
  if (slot == kNone) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmMr& m = h->mrs[slot];
  p->mr_end = std::max(p->mr_end, slot + 1);
  m.in_use = 1;
  m.proc = p->fab->self_proc();
  m.key = NextKey(slot, m.key);
  m.dereg_pid = 0;
  m.pd = PdId(pd);
  m.addr = va;
  m.length = length;
  m.iova = iova;
  m.access = access;
  mr->slot = slot;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = slot;
  mr->mr.lkey = m.key;
  mr->mr.rkey = m.key;
  LocalMr& own = p->own_mrs[slot];
  own.addr = m.addr;
  own.length = length;
  own.iova = iova;
  own.access = access;
  own.pd = m.pd;
  own.key.store(m.key, std::memory_order_release);
  NoteMr(&mr->mr);
  return &mr.release()->mr;  // the program's handle now
}

int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  if (advice != IBV_ADVISE_MR_ADVICE_PREFETCH && advice != IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
      advice != IBV_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
    return EOPNOTSUPP;
  if (flags & ~static_cast<uint32_t>(IBV_ADVISE_MR_FLAG_FLUSH)) return EOPNOTSUPP;
  if (!sg_list || num_sge == 0) return EINVAL;
  const uint32_t pd_id = PdId(pd);
  for (uint32_t i = 0; i < num_sge; ++i) {
    const ibv_sge& g = sg_list[i];
    const uint32_t slot = g.lkey >> 8;
    if (slot >= kMaxMrs) return EINVAL;
    const LocalMr& l = p->own_mrs[slot];  // only this process's MRs can be advised
    if (l.key.load(std::memory_order_acquire) != g.lkey || l.pd != pd_id) return EINVAL;
    if (!(l.access & IBV_ACCESS_ON_DEMAND)) return EINVAL;  // advice is for ODP MRs
    if (advice == IBV_ADVISE_MR_ADVICE_PREFETCH_WRITE && !(l.access & IBV_ACCESS_LOCAL_WRITE)) return EPERM;
    if (g.addr < l.iova || g.addr + g.length < g.addr || g.addr + g.length > l.iova + l.length) return EINVAL;
  }
  return 0;
}

int DeregMr(ibv_mr* ibmr) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  auto* mr = reinterpret_cast<SnMr*>(ibmr);
  {
    FabricLock lock(p->fab);
    ShmMr& m = p->fab->hdr()->mrs[mr->slot];
    if (!m.in_use || m.key != ibmr->lkey) return EINVAL;
    if (MwsBoundToMrLocked(p, m.key)) return EBUSY;
    p->own_mrs[mr->slot].key.store(0, std::memory_order_release);
    m.dereg_pid = p->pid;
    m.in_use = 0;  // keep the key: the next registration of the slot bumps it
  }
  ForgetMr(ibmr);
  delete mr;
  return 0;
}

int ReregMr(ibv_mr* ibmr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  // libibverbs' own checks of the arguments first (IBV_REREG_MR_ERR_INPUT),
  // then the device's (IBV_REREG_MR_ERR_CMD), as ibv_rereg_mr reports them.
  constexpr int kFlags =
      IBV_REREG_MR_CHANGE_TRANSLATION | IBV_REREG_MR_CHANGE_PD | IBV_REREG_MR_CHANGE_ACCESS;
  if ((flags & ~kFlags) || ((flags & IBV_REREG_MR_CHANGE_TRANSLATION) && (!addr || !length)) ||
      (access && !(flags & IBV_REREG_MR_CHANGE_ACCESS))) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_INPUT;
  }
  Process* p = GetProcess();
  if (!p) return IBV_REREG_MR_ERR_CMD;
  auto* mr = reinterpret_cast<SnMr*>(ibmr);
  const bool move = flags & IBV_REREG_MR_CHANGE_TRANSLATION;
  const bool new_pd = flags & IBV_REREG_MR_CHANGE_PD;
  const bool new_access = flags & IBV_REREG_MR_CHANGE_ACCESS;
  if (new_pd && (!pd || pd->context != ibmr->context)) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_CMD;
  }
  LocalMr& own = p->own_mrs[mr->slot];
  const unsigned acc = new_access ? static_cast<unsigned>(access) : own.access;
  void* const to = move ? addr : ibmr->addr;
  const size_t len = move ? length : ibmr->length;
  int e = CheckAccess(acc);
  // A new range, or more rights on the old one, is pinned anew.
  if (!e && (move || new_access)) e = CheckRange(to, len, acc);
  if (e) {
    errno = e;
    return IBV_REREG_MR_ERR_CMD;
  }
  FabricLock lock(p->fab);
  ShmMr& m = p->fab->hdr()->mrs[mr->slot];
  if (!m.in_use || m.key != ibmr->lkey || own.key.load(std::memory_order_relaxed) != m.key) {
    errno = EINVAL;
    return IBV_REREG_MR_ERR_CMD;
  }
  if (MwsBoundToMrLocked(p, m.key)) {
    errno = EBUSY;
    return IBV_REREG_MR_ERR_CMD;
  }
  // The old registration stops granting anything before the new one
  // starts: the record's key is cleared first and written last.
  own.key.store(0, std::memory_order_release);
  if (move) {
    m.key = NextKey(mr->slot, m.key);
    m.addr = m.iova = reinterpret_cast<uint64_t>(addr);
    m.length = length;
  }
  if (new_pd) m.pd = PdId(pd);
  m.access = acc;
  own.addr = m.addr;
  own.iova = m.iova;
  own.length = m.length;
  own.access = m.access;
  own.pd = m.pd;
  own.key.store(m.key, std::memory_order_release);
  ibmr->lkey = ibmr->rkey = m.key;
  if (move) {
    ibmr->addr = addr;
    ibmr->length = length;
  }
  if (new_pd) ibmr->pd = pd;
  return 0;
}

ibv_ah* CreateAh(ibv_pd* pd, ibv_ah_attr* attr) {
  if (const int e = CheckAddressVector(*attr)) {
    errno = e;
    return nullptr;
  }
  auto* ah = new (std::nothrow) SnAh();
  if (!ah) {
    errno = ENOMEM;
    return nullptr;
  }
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->attr = *attr;
  return &ah->ah;
}

int DestroyAh(ibv_ah* ah) {
  delete reinterpret_cast<SnAh*>(ah);
  return 0;
}

}  // namespace rdmasan::softnic
