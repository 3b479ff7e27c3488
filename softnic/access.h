// softnic/access: what a key grants, and the one copy that moves payload.
//
// Every byte the device touches on behalf of a work request is first
// translated here from (key, iova, length) to a range of a live MR that
// grants the access, then moved by Move, which cannot fault: a range that
// is no longer mapped is an EFAULT the caller turns into an error
// completion.  Inline: the data path runs them once per SGE of every WR,
// under the fabric lock.  The fabric's MR table is shared memory any
// process of the user can write: an MR of this process is translated by
// the process's own record of it (LocalMr), so a forged entry can never
// aim a copy at other memory of this process.
//
// May not: take locks (the caller holds the fabric lock), allocate, touch
// a byte outside the ranges a check returned, or report anything but a
// yes/no or an errno (the caller turns it into a completion status).
#ifndef RDMASAN_SOFTNIC_ACCESS_H_
#define RDMASAN_SOFTNIC_ACCESS_H_

#include <errno.h>
#include <sys/types.h>
#include <sys/uio.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "softnic/fabric.h"

namespace rdmasan::softnic {

struct Seg {
  uint64_t va;  // in the owner's address space
  uint32_t len;
  // The lkey it was validated against (receive SGEs).  No default member
  // initializer: arrays of kMaxSge on the data path stay uninitialized until
  // written (aggregate initialization still zeroes a key not given).
  uint32_t key;
};

// An MR of this process as it registered it, kept in its own memory.  key
// is written last on registration and cleared first on deregistration.
struct LocalMr {
  std::atomic<uint32_t> key{0};
  uint32_t access = 0;
  uint32_t pd = 0;
  uint64_t addr = 0, length = 0, iova = 0;
};

// A window of this process as it bound it, kept in its own memory: key is
// the key it grants (0: none), written last on a bind and cleared first on
// an invalidation.  A remote invalidation (SEND_WITH_INV from a peer) can
// only clear the fabric's entry, so a window of ours grants an access only
// while both say so, and with the geometry this record holds.
struct LocalMw {
  std::atomic<uint32_t> key{0};
  uint32_t mr_key = 0;
  uint32_t access = 0;
  uint32_t pd = 0;
  uint32_t qpn = 0;  // type 2: the QP it is bound to
  uint32_t type = 0;
  uint64_t addr = 0, length = 0;
};

// The MR `key` names, as this process may trust it: a copy of the fabric's
// entry, or, for an MR of this process (proc == self), of its own record.
// False if no live MR has that key.
inline bool TrustedMr(const ShmHeader* h, const LocalMr* own, uint32_t self, uint32_t key, ShmMr* out) {
  const uint32_t slot = key >> 8;
  if (slot >= kMaxMrs) return false;
  const ShmMr& m = h->mrs[slot];
  *out = m;
  if (!out->in_use || out->key != key) return false;
  if (out->proc != self) return true;
  const LocalMr& l = own[slot];
  if (l.key.load(std::memory_order_acquire) != key) return false;
  out->addr = l.addr;
  out->length = l.length;
  out->iova = l.iova;
  out->access = l.access;
  out->pd = l.pd;
  return true;
}

// Is [addr, addr + len) inside an MR of this process that grants `need`,
// by its own record (staged payloads are scattered only there)?
inline bool OwnRange(const LocalMr* own, uint32_t key, uint64_t addr, uint64_t len, uint32_t need) {
  const uint32_t slot = key >> 8;
  if (slot >= kMaxMrs) return false;
  const LocalMr& l = own[slot];
  if (l.key.load(std::memory_order_acquire) != key || (l.access & need) != need) return false;
  return addr >= l.addr && addr + len >= addr && addr + len <= l.addr + l.length;
}

// The tables a validation reads: the fabric's, and this process's own
// record of its MRs.
struct MrTables {
  const ShmHeader* h;
  const LocalMr* own;
  uint32_t self;  // this process's procs[] slot
  const LocalMw* own_mws;
};

// The window `key` names, as this process may trust it: valid, bound
// (length > 0) with exactly that key (tag included).  For a window of this
// process, the geometry is its own record's, and the record must agree.
inline bool TrustedMw(const MrTables& t, uint32_t key, ShmMw* out) {
  if (!IsMwKey(key)) return false;
  const uint32_t slot = MwSlotOf(key);
  if (slot >= kMaxMws) return false;
  *out = t.h->mws[slot];
  if (!out->in_use || out->state != kMwValid || out->rkey != key || out->length == 0) return false;
  if (out->proc != t.self) return true;
  const LocalMw& l = t.own_mws[slot];
  if (l.key.load(std::memory_order_acquire) != key) return false;
  out->mr_key = l.mr_key;
  out->access = l.access;
  out->pd = l.pd;
  out->qpn = l.qpn;
  out->type = l.type;
  out->addr = l.addr;
  out->length = l.length;
  return true;
}

// Validates a scatter list against the MR tables: every non-empty SGE
// must name a live MR of `pd` owned by `proc`, lie inside it and have the
// access `need`.  Translates to virtual addresses.
inline bool ValidateSges(const MrTables& t, uint32_t proc, uint32_t pd, const ShmSge* sge, uint32_t n,
                         uint32_t need, Seg* out, uint32_t* nout, uint64_t* total) {
  *nout = 0;
  *total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const ShmSge s = sge[i];  // once: `sge` may be in shared memory
    if (s.length == 0) continue;
    ShmMr m;
    if (!TrustedMr(t.h, t.own, t.self, s.lkey, &m) || m.proc != proc || m.pd != pd) return false;
    if ((m.access & need) != need) return false;
    if (s.addr < m.iova || s.addr + s.length > m.iova + m.length || s.addr + s.length < s.addr) return false;
    out[*nout] = {m.addr + (s.addr - m.iova), s.length, s.lkey};
    ++*nout;
    *total += s.length;
  }
  return true;
}

// Validates an rkey access of [addr, addr+len) for the responder QP.  A
// window key: the window must be valid with that very tag, of the
// responder's PD (a type-2 window: bound to the responder QP itself),
// grant `need` and cover the range; the MR it is bound to translates.
// The key must be of process `proc` and PD `pd`: the responder QP's, or
// for an XRC target, those of the SRQ the message names.
inline bool ValidateRkeyIn(const MrTables& t, const ShmQp& resp, uint32_t proc, uint32_t pd, uint32_t rkey,
                           uint64_t addr, uint64_t len, uint32_t need, uint64_t* va) {
  if (len == 0) {
    *va = 0;
    return true;
  }
  ShmMr m;
  if (IsMwKey(rkey)) {
    ShmMw w;
    if (!TrustedMw(t, rkey, &w) || w.proc != proc || w.pd != pd) return false;
    if (w.type == IBV_MW_TYPE_2 && w.qpn != resp.qpn) return false;
    if ((w.access & need) != need || (resp.access & need) != need) return false;
    if (addr < w.addr || addr + len > w.addr + w.length || addr + len < addr) return false;
    if (!TrustedMr(t.h, t.own, t.self, w.mr_key, &m) || m.proc != proc) return false;
    if (addr < m.iova || addr + len > m.iova + m.length) return false;
    *va = m.addr + (addr - m.iova);
    return true;
  }
  if (!TrustedMr(t.h, t.own, t.self, rkey, &m) || m.proc != proc || m.pd != pd) return false;
  if ((m.access & need) != need || (resp.access & need) != need) return false;
  if (addr < m.iova || addr + len > m.iova + m.length || addr + len < addr) return false;
  *va = m.addr + (addr - m.iova);
  return true;
}
inline bool ValidateRkey(const MrTables& t, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len,
                         uint32_t need, uint64_t* va) {
  return ValidateRkeyIn(t, resp, resp.proc, resp.pd, rkey, addr, len, need, va);
}

// Sanitizer builds copy within the process with process_vm_readv/writev
// too (see safe_copy.cc).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RDMASAN_SOFTNIC_VM_COPY 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
#define RDMASAN_SOFTNIC_VM_COPY 1
#endif
#endif

// Copies the bytes of `src` to `dst` within this process; EFAULT instead of
// a fault if either is no longer accessible (safe_copy.cc).
int CopyLocal(const Seg* dst, uint32_t ndst, const Seg* src, uint32_t nsrc);

// Copies from `src` (in process `src_pid`, or ours) to `dst` (in
// `dst_pid`, or ours).  One side is always ours.  Returns 0 or an errno.
// It never faults: memory unmapped (or made read-only) under a live MR
// makes the copy fail with EFAULT, not kill the process with the fabric
// lock held.  Within the process: a memmove with a recovery point
// (CopyLocal); across processes: process_vm_writev/readv.
inline int Move(pid_t self, pid_t dst_pid, const Seg* dst, uint32_t ndst, pid_t src_pid, const Seg* src,
                uint32_t nsrc) {
#ifndef RDMASAN_SOFTNIC_VM_COPY
  if (dst_pid == self && src_pid == self) return CopyLocal(dst, ndst, src, nsrc);
#endif
  iovec liov[kMaxSge + 2], riov[kMaxSge + 2];
  const bool write = src_pid == self;
  const Seg* l = write ? src : dst;
  const Seg* r = write ? dst : src;
  uint32_t nl = write ? nsrc : ndst, nr = write ? ndst : nsrc;
  uint64_t total = 0;
  for (uint32_t i = 0; i < nl; ++i) {
    liov[i] = {reinterpret_cast<void*>(l[i].va), l[i].len};
    total += l[i].len;
  }
  uint64_t rtotal = 0;
  for (uint32_t i = 0; i < nr; ++i) {
    riov[i] = {reinterpret_cast<void*>(r[i].va), r[i].len};
    rtotal += r[i].len;
  }
  total = std::min(total, rtotal);
  if (total == 0) return 0;
  pid_t peer = write ? dst_pid : src_pid;
  ssize_t n =
      write ? process_vm_writev(peer, liov, nl, riov, nr, 0) : process_vm_readv(peer, liov, nl, riov, nr, 0);
  if (n < 0) return errno;
  return static_cast<uint64_t>(n) == total ? 0 : EFAULT;
}

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_ACCESS_H_
