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
  uint32_t key = 0;  // the lkey it was validated against (receive SGEs)
};

// An MR of this process as it registered it, kept in its own memory.  key
// is written last on registration and cleared first on deregistration.
struct LocalMr {
  std::atomic<uint32_t> key{0};
  uint32_t access = 0;
  uint32_t pd = 0;
  uint64_t addr = 0, length = 0, iova = 0;
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
};

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
    *total += sge[i].length;
  }
  return true;
}

// Validates an rkey access of [addr, addr+len) for the responder QP.
inline bool ValidateRkey(const MrTables& t, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len,
                         uint32_t need, uint64_t* va) {
  if (len == 0) {
    *va = 0;
    return true;
  }
  ShmMr m;
  if (!TrustedMr(t.h, t.own, t.self, rkey, &m) || m.proc != resp.proc || m.pd != resp.pd) return false;
  if ((m.access & need) != need || (resp.access & need) != need) return false;
  if (addr < m.iova || addr + len > m.iova + m.length || addr + len < addr) return false;
  *va = m.addr + (addr - m.iova);
  return true;
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
