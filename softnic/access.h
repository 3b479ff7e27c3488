// softnic/access: what a key grants, and the one copy that moves payload.
//
// Every byte the device touches on behalf of a work request is first
// translated here from (key, iova, length) to a range of a live MR that
// grants the access, then moved by Move, which cannot fault: a range that
// is no longer mapped is an EFAULT the caller turns into an error
// completion.  Inline: the data path runs them
// once per SGE of every WR, under the fabric lock.
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
};

// Validates a local scatter list against the MR table: every non-empty SGE
// must name a live MR of `pd` owned by `proc`, lie inside it and have the
// access `need`.  Translates to virtual addresses.
inline bool ValidateSges(ShmHeader* h, uint32_t proc, uint32_t pd, const ShmSge* sge, uint32_t n,
                         uint32_t need, Seg* out, uint32_t* nout, uint64_t* total) {
  *nout = 0;
  *total = 0;
  for (uint32_t i = 0; i < n; ++i) {
    if (sge[i].length == 0) continue;
    uint32_t slot = sge[i].lkey >> 8;
    if (slot >= kMaxMrs) return false;
    const ShmMr& m = h->mrs[slot];
    if (!m.in_use || m.key != sge[i].lkey || m.proc != proc || m.pd != pd) return false;
    if ((m.access & need) != need) return false;
    if (sge[i].addr < m.iova || sge[i].addr + sge[i].length > m.iova + m.length ||
        sge[i].addr + sge[i].length < sge[i].addr)
      return false;
    out[*nout] = {m.addr + (sge[i].addr - m.iova), sge[i].length};
    ++*nout;
    *total += sge[i].length;
  }
  return true;
}

// Validates an rkey access of [addr, addr+len) for the responder QP.
inline bool ValidateRkey(ShmHeader* h, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len,
                         uint32_t need, uint64_t* va) {
  if (len == 0) {
    *va = 0;
    return true;
  }
  uint32_t slot = rkey >> 8;
  if (slot >= kMaxMrs) return false;
  const ShmMr& m = h->mrs[slot];
  if (!m.in_use || m.key != rkey || m.proc != resp.proc || m.pd != resp.pd) return false;
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
