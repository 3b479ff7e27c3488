// softnic memory windows: allocation, the type-1 bind verb, and what the
// send queue does with BIND_MW, LOCAL_INV and the responder's half of
// SEND_WITH_INV.
//
// A window lives in the fabric's window table (so a requester in any
// process checks its key) and in the owner's own record (LocalMw, access.h),
// which alone says what memory it grants.  The rules are the IB spec's as
// rdma-core's rxe applies them: a type-1 window is bound by ibv_bind_mw,
// unbound by a zero-length bind, and never invalidated; a type-2 window is
// bound by a BIND_MW work request of a QP of its PD only while it is free,
// is bound to that QP, and is freed by LOCAL_INV or a peer's
// SEND_WITH_INV.  A bind may change only the key's tag; the MR must be of
// the window's PD, allow MW_BIND (and LOCAL_WRITE if the window grants
// remote write or atomics) and contain the range.  A bind that breaks a
// rule completes with MW_BIND_ERR, an invalidation with LOC_QP_OP_ERR.
//
// May not: grant a byte the MR does not, or touch application memory.
#include <errno.h>

#include <cstdio>
#include <new>

#include "softnic/internal.h"
#include "softnic/owned.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

constexpr uint32_t kRemoteAccess =
    IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;

int BindError(char* why, size_t n, const char* fmt, uint32_t a = 0, uint32_t b = 0) {
  snprintf(why, n, fmt, a, b);
  return IBV_WC_MW_BIND_ERR;
}

}  // namespace

ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (type != IBV_MW_TYPE_1 && type != IBV_MW_TYPE_2) {
    errno = EINVAL;
    return nullptr;
  }
  auto mw = NewOwned<SnMw>();
  if (!mw) {
    errno = ENOMEM;
    return nullptr;
  }
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  const uint32_t slot = FreeSlot(h->mws);
  if (slot == kNone) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmMw& m = h->mws[slot];
  // The slot keeps its last tag: a new window starts past it, so a key of
  // the slot's last window does not name this one.
  const uint32_t tag = ((m.rkey & 0xff) + 1) & 0xff;
  m = ShmMw{};
  m.in_use = 1;
  m.proc = p->fab->self_proc();
  m.type = type;
  m.pd = PdId(pd);
  m.rkey = (kMwIndexBase + slot) << 8 | tag;
  // A type-1 window is valid from the start, granting nothing until bound.
  m.state = type == IBV_MW_TYPE_1 ? kMwValid : kMwFree;
  LocalMw& own = p->own_mws[slot];
  own.key.store(0, std::memory_order_release);
  own.type = type;
  own.pd = m.pd;
  p->nmws.fetch_add(1, std::memory_order_relaxed);
  mw->slot = slot;
  mw->mw.context = pd->context;
  mw->mw.pd = pd;
  mw->mw.rkey = m.rkey;
  mw->mw.handle = slot;
  mw->mw.type = type;
  return &mw.release()->mw;  // the program's handle now
}

int DeallocMw(ibv_mw* ibmw) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  auto* mw = reinterpret_cast<SnMw*>(ibmw);
  {
    FabricLock lock(p->fab);
    ShmMw& m = p->fab->hdr()->mws[mw->slot];
    if (!m.in_use || m.proc != p->fab->self_proc()) return EINVAL;
    p->own_mws[mw->slot].key.store(0, std::memory_order_release);
    if (m.state == kMwValid && m.length) {
      m.inv_how = kInvDealloc;
      m.inv_key = m.rkey;
      m.inv_pid = p->pid;
      m.inv_wr_id = 0;
    }
    m.state = kMwFree;
    m.in_use = 0;  // keep the key: the slot's next window moves past its tag
    p->nmws.fetch_sub(1, std::memory_order_relaxed);
  }
  delete mw;
  return 0;
}

int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind) {
  if (bind->bind_info.mw_access_flags & IBV_ACCESS_ZERO_BASED) return EINVAL;
  ibv_send_wr wr{};
  wr.wr_id = bind->wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = bind->send_flags;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
  wr.bind_mw.bind_info = bind->bind_info;
  ibv_send_wr* bad = nullptr;
  // Straight to softnic's post_send: the bind is the application's one
  // verb, not a post the interpose layer should see as another.
  int rc = PostSendOp(qp, &wr, &bad);
  if (rc == 0) mw->rkey = wr.bind_mw.rkey;
  return rc;
}

int ExecuteBindLocked(Process* p, SnQp* qp, const SendWqe& w, char* why, size_t n) {
  ShmHeader* h = p->fab->hdr();
  const uint32_t self = p->fab->self_proc();
  if (w.mw_slot >= kMaxMws) return BindError(why, n, "BIND_MW names no window");
  ShmMw& m = h->mws[w.mw_slot];
  LocalMw& own = p->own_mws[w.mw_slot];
  if (!m.in_use || m.proc != self)
    return BindError(why, n, "BIND_MW: window slot %u is not allocated", w.mw_slot);
  const uint32_t qp_pd = qp->shm->pd;
  if (m.pd != qp_pd) return BindError(why, n, "BIND_MW: window 0x%x is of another PD than the QP", m.rkey);
  if ((w.rkey & ~0xffu) != (m.rkey & ~0xffu))
    return BindError(why, n, "BIND_MW: new rkey 0x%x changes more than the tag of window 0x%x", w.rkey,
                     m.rkey);
  if (m.type == IBV_MW_TYPE_2) {
    if (m.state != kMwFree)
      return BindError(
          why, n, "BIND_MW: type-2 window 0x%x is still valid (invalidate it before binding again)", m.rkey);
    if (w.mw_length == 0 || !w.mw_mr_lkey)
      return BindError(why, n, "BIND_MW: a type-2 window 0x%x cannot be bound with zero length", m.rkey);
  }
  ShmMr mr{};
  if (w.mw_length) {
    if (!TrustedMr(h, p->own_mrs, self, w.mw_mr_lkey, &mr) || mr.proc != self)
      return BindError(why, n, "BIND_MW: lkey 0x%x names no MR of this process", w.mw_mr_lkey);
    if (mr.pd != m.pd)
      return BindError(why, n, "BIND_MW: MR lkey 0x%x is of another PD than the window", w.mw_mr_lkey);
    if (!(mr.access & IBV_ACCESS_MW_BIND))
      return BindError(why, n, "BIND_MW: MR lkey 0x%x was registered without IBV_ACCESS_MW_BIND",
                       w.mw_mr_lkey);
    if ((w.mw_access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(mr.access & IBV_ACCESS_LOCAL_WRITE))
      return BindError(why, n,
                       "BIND_MW: window grants remote write/atomic but MR lkey 0x%x lacks LOCAL_WRITE",
                       w.mw_mr_lkey);
    const uint64_t end = w.remote_addr + w.mw_length;
    if (w.remote_addr < mr.iova || end > mr.iova + mr.length || end < w.remote_addr) {
      if (end > mr.iova + mr.length)
        snprintf(why, n, "BIND_MW: range ends %llu bytes past MR lkey 0x%x",
                 static_cast<unsigned long long>(end - (mr.iova + mr.length)), w.mw_mr_lkey);
      else
        snprintf(why, n, "BIND_MW: range starts %llu bytes before MR lkey 0x%x",
                 static_cast<unsigned long long>(mr.iova - w.remote_addr), w.mw_mr_lkey);
      return IBV_WC_MW_BIND_ERR;
    }
  }
  // A bind replaces what the window granted (type 1): the old key is gone.
  if (m.state == kMwValid && m.length) {
    m.inv_how = w.mw_length ? kInvRebind : kInvUnbind;
    m.inv_key = m.rkey;
    m.inv_pid = p->pid;
    m.inv_wr_id = w.wr_id;
  }
  own.key.store(0, std::memory_order_release);
  m.rkey = w.rkey;
  m.state = kMwValid;
  m.mr_key = w.mw_length ? w.mw_mr_lkey : 0;
  m.addr = w.mw_length ? w.remote_addr : 0;
  m.length = w.mw_length;
  m.access = w.mw_access & kRemoteAccess;
  m.qpn = m.type == IBV_MW_TYPE_2 ? qp->shm->qpn : 0;
  own.mr_key = m.mr_key;
  own.addr = m.addr;
  own.length = m.length;
  own.access = m.access;
  own.qpn = m.qpn;
  own.pd = m.pd;
  own.type = m.type;
  if (m.length) own.key.store(m.rkey, std::memory_order_release);
  return IBV_WC_SUCCESS;
}

namespace {

// Takes a window's key away (fabric lock held): LOCAL_INV or SEND_WITH_INV.
void Invalidate(Process* p, ShmMw& m, uint32_t slot, uint32_t how, pid_t by, uint64_t wr_id) {
  if (m.proc == p->fab->self_proc()) p->own_mws[slot].key.store(0, std::memory_order_release);
  m.inv_how = how;
  m.inv_key = m.rkey;
  m.inv_pid = by;
  m.inv_wr_id = wr_id;
  m.state = kMwFree;
}

// Why `rkey` may not be invalidated by a QP of PD `pd` (process `proc`,
// QP `qpn`), or nullptr-text (returns true) if it may.
bool MayInvalidate(Process* p, uint32_t rkey, uint32_t proc, uint32_t pd, uint32_t qpn, bool remote,
                   char* why, size_t n) {
  const char* verb = remote ? "SEND_WITH_INV" : "LOCAL_INV";
  if (!IsMwKey(rkey)) {
    snprintf(why, n, "%s of rkey 0x%x: an MR's key cannot be invalidated (only a type-2 window's)", verb,
             rkey);
    return false;
  }
  const uint32_t slot = MwSlotOf(rkey);
  ShmMw* m = slot < kMaxMws ? &p->fab->hdr()->mws[slot] : nullptr;
  if (!m || !m->in_use || m->proc != proc) {
    snprintf(why, n, "%s of rkey 0x%x: no such window", verb, rkey);
    return false;
  }
  if (m->type != IBV_MW_TYPE_2) {
    snprintf(why, n, "%s of rkey 0x%x: a type-1 window is unbound by a zero-length bind, not invalidated",
             verb, rkey);
    return false;
  }
  if (m->pd != pd) {
    snprintf(why, n, "%s of rkey 0x%x: the window is of another PD", verb, rkey);
    return false;
  }
  if (m->state != kMwValid || m->rkey != rkey) {
    if (m->state == kMwValid)
      snprintf(why, n, "%s of rkey 0x%x: the window is bound with key 0x%x", verb, rkey, m->rkey);
    else
      snprintf(why, n, "%s of rkey 0x%x: the window is not bound", verb, rkey);
    return false;
  }
  if (remote && m->qpn != qpn) {
    snprintf(why, n, "%s of rkey 0x%x: the window is bound to another QP (0x%x)", verb, rkey, m->qpn);
    return false;
  }
  return true;
}

}  // namespace

int ExecuteLocalInvLocked(Process* p, SnQp* qp, const SendWqe& w, char* why, size_t n) {
  const uint32_t rkey = w.imm;
  if (!MayInvalidate(p, rkey, p->fab->self_proc(), qp->shm->pd, qp->shm->qpn, false, why, n))
    return IBV_WC_LOC_QP_OP_ERR;
  const uint32_t slot = MwSlotOf(rkey);
  Invalidate(p, p->fab->hdr()->mws[slot], slot, kInvLocal, p->pid, w.wr_id);
  return IBV_WC_SUCCESS;
}

bool RemoteInvalidateLocked(Process* p, const ShmQp& resp, uint32_t rkey, uint64_t wr_id, char* why,
                            size_t n) {
  if (!MayInvalidate(p, rkey, resp.proc, resp.pd, resp.qpn, true, why, n)) return false;
  const uint32_t slot = MwSlotOf(rkey);
  Invalidate(p, p->fab->hdr()->mws[slot], slot, kInvRemote, p->pid, wr_id);
  return true;
}

uint32_t MwsBoundToMrLocked(Process* p, uint32_t key) {
  if (!p->nmws.load(std::memory_order_relaxed)) return 0;
  const uint32_t self = p->fab->self_proc();
  uint32_t count = 0;
  for (const ShmMw& m : p->fab->hdr()->mws)
    if (m.in_use && m.proc == self && m.state == kMwValid && m.length && m.mr_key == key) ++count;
  return count;
}

uint32_t MwsOfPdLocked(Process* p, uint32_t pd) {
  if (!p->nmws.load(std::memory_order_relaxed)) return 0;
  const uint32_t self = p->fab->self_proc();
  uint32_t count = 0;
  for (const ShmMw& m : p->fab->hdr()->mws)
    if (m.in_use && m.proc == self && m.pd == pd) ++count;
  return count;
}

}  // namespace rdmasan::softnic
