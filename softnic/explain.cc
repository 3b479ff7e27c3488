// softnic error reasons: why an error completion happened, in one line.
//
// softnic knows why it refused an access, where a NIC says nothing useful
// (vendor_err).  Whoever pushes an error completion (the requester, into
// its own CQ or the responder's, in any process) records the reason in a
// ring in the fabric, keyed by CQ slot and generation, QP number, wr_id and
// status, so the process that polls it can ask (ExplainCompletion).  A
// refused key is diagnosed after the refusal (WhyRkey, WhySges: error path
// only), naming the process and verb that took a key away.
//
// May not: run on a success path, trust the ring's text (any process of
// the user writes the segment: it is bounded and terminated before use), or
// take any lock but the fabric's.
#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "core/decision.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

const char* AccessName(uint32_t need) {
  switch (need) {
    case IBV_ACCESS_REMOTE_WRITE:
      return "REMOTE_WRITE";
    case IBV_ACCESS_REMOTE_READ:
      return "REMOTE_READ";
    case IBV_ACCESS_REMOTE_ATOMIC:
      return "REMOTE_ATOMIC";
    case IBV_ACCESS_LOCAL_WRITE:
      return "LOCAL_WRITE";
    default:
      return "access";
  }
}

// What took a window's key away, as "invalidated by LOCAL_INV (pid 4242,
// wr_id 0x7)".
void InvalidatedBy(const ShmMw& m, char* out, size_t n) {
  switch (m.inv_how) {
    case kInvLocal:
      snprintf(out, n, "invalidated by LOCAL_INV (pid %d, wr_id 0x%" PRIx64 ")", m.inv_pid, m.inv_wr_id);
      return;
    case kInvRemote:
      snprintf(out, n, "invalidated by a SEND_WITH_INV from pid %d (wr_id 0x%" PRIx64 ")", m.inv_pid,
               m.inv_wr_id);
      return;
    case kInvDealloc:
      snprintf(out, n, "invalidated by ibv_dealloc_mw (pid %d)", m.inv_pid);
      return;
    case kInvRebind:
      snprintf(out, n, "replaced by a new bind of its window (pid %d, wr_id 0x%" PRIx64 ")", m.inv_pid,
               m.inv_wr_id);
      return;
    case kInvUnbind:
      snprintf(out, n, "unbound by a zero-length bind (pid %d, wr_id 0x%" PRIx64 ")", m.inv_pid, m.inv_wr_id);
      return;
    default:
      snprintf(out, n, "not bound");
  }
}

void WhyMwKey(const MrTables& t, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
              char* out, size_t n) {
  const uint32_t slot = MwSlotOf(rkey);
  if (slot >= kMaxMws) {
    snprintf(out, n, "rkey 0x%x names no window", rkey);
    return;
  }
  const ShmMw m = t.h->mws[slot];
  char by[128];
  if (!m.in_use || m.proc != resp.proc) {
    if (m.inv_key == rkey) {
      InvalidatedBy(m, by, sizeof(by));
      snprintf(out, n, "rkey 0x%x was %s; its window is deallocated", rkey, by);
    } else {
      snprintf(out, n, "rkey 0x%x names no window of the responder", rkey);
    }
    return;
  }
  if (m.state != kMwValid || m.rkey != rkey || m.length == 0) {
    if (m.inv_key == rkey) {
      InvalidatedBy(m, by, sizeof(by));
      snprintf(out, n, "rkey 0x%x was %s", rkey, by);
    } else if ((m.rkey & 0xff) != (rkey & 0xff) && m.state == kMwValid && m.length) {
      snprintf(out, n, "rkey 0x%x has a stale tag: the window is bound with key 0x%x", rkey, m.rkey);
    } else {
      snprintf(out, n, "rkey 0x%x: window not bound", rkey);
    }
    return;
  }
  if (m.pd != resp.pd) {
    snprintf(out, n, "rkey 0x%x: window of another PD than responder QP 0x%x", rkey, resp.qpn);
  } else if (m.type == IBV_MW_TYPE_2 && m.qpn != resp.qpn) {
    snprintf(out, n, "rkey 0x%x: type-2 window bound to QP 0x%x, not the responder QP 0x%x", rkey, m.qpn,
             resp.qpn);
  } else if ((m.access & need) != need) {
    snprintf(out, n, "rkey 0x%x: window does not grant %s", rkey, AccessName(need));
  } else if ((resp.access & need) != need) {
    snprintf(out, n, "responder QP 0x%x does not allow %s (qp_access_flags)", resp.qpn, AccessName(need));
  } else if (addr + len > m.addr + m.length) {
    snprintf(out, n, "rkey 0x%x: access ends %" PRIu64 " bytes past the window", rkey,
             addr + len - (m.addr + m.length));
  } else if (addr < m.addr) {
    snprintf(out, n, "rkey 0x%x: access starts %" PRIu64 " bytes before the window", rkey, m.addr - addr);
  } else {
    snprintf(out, n, "rkey 0x%x: the window's MR is no longer valid", rkey);
  }
}

}  // namespace

void WhyRkey(const MrTables& t, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
             char* out, size_t n) {
  const int k = snprintf(out, n, "REM_ACCESS_ERR: ");
  out += k;
  n -= k;
  if (IsMwKey(rkey)) return WhyMwKey(t, resp, rkey, addr, len, need, out, n);
  const uint32_t slot = rkey >> 8;
  if (slot >= kMaxMrs) {
    snprintf(out, n, "rkey 0x%x names no MR", rkey);
    return;
  }
  const ShmMr m = t.h->mrs[slot];
  if (!m.in_use && m.key == rkey && m.dereg_pid) {
    snprintf(out, n, "rkey 0x%x: its MR was deregistered by ibv_dereg_mr (pid %d)", rkey, m.dereg_pid);
  } else if (m.in_use && m.key != rkey && m.proc == resp.proc && (m.key & 0xff) != (rkey & 0xff)) {
    snprintf(out, n, "rkey 0x%x is a stale key of MR slot %u, now registered with key 0x%x (re-registered)",
             rkey, slot, m.key);
  } else if (!m.in_use || m.key != rkey || m.proc != resp.proc) {
    snprintf(out, n, "rkey 0x%x names no MR of the responder (deregistered, or a stale key)", rkey);
  } else if (m.pd != resp.pd) {
    snprintf(out, n, "rkey 0x%x: MR of another PD than responder QP 0x%x", rkey, resp.qpn);
  } else if ((m.access & need) != need) {
    snprintf(out, n, "rkey 0x%x: MR was registered without %s", rkey, AccessName(need));
  } else if ((resp.access & need) != need) {
    snprintf(out, n, "responder QP 0x%x does not allow %s (qp_access_flags)", resp.qpn, AccessName(need));
  } else if (addr + len > m.iova + m.length) {
    snprintf(out, n, "rkey 0x%x: access ends %" PRIu64 " bytes past the MR", rkey,
             addr + len - (m.iova + m.length));
  } else if (addr < m.iova) {
    snprintf(out, n, "rkey 0x%x: access starts %" PRIu64 " bytes before the MR", rkey, m.iova - addr);
  } else {
    snprintf(out, n, "rkey 0x%x refused", rkey);
  }
}

void WhySges(const MrTables& t, uint32_t proc, uint32_t pd, const ShmSge* sge, uint32_t nsge, uint32_t need,
             const char* what, char* out, size_t n) {
  for (uint32_t i = 0; i < nsge; ++i) {
    const ShmSge s = sge[i];
    if (s.length == 0) continue;
    const uint32_t slot = s.lkey >> 8;
    if (slot >= kMaxMrs) {
      snprintf(out, n, "%s SGE %u: lkey 0x%x names no MR%s", what, i, s.lkey,
               IsMwKey(s.lkey) ? " (a window's key is not an lkey)" : "");
      return;
    }
    const ShmMr m = t.h->mrs[slot];
    if (!m.in_use || m.key != s.lkey || m.proc != proc) {
      snprintf(out, n, "%s SGE %u: lkey 0x%x names no live MR (deregistered, or a stale key)", what, i,
               s.lkey);
      return;
    }
    if (m.pd != pd) {
      snprintf(out, n, "%s SGE %u: MR lkey 0x%x is of another PD than the QP", what, i, s.lkey);
      return;
    }
    if ((m.access & need) != need) {
      snprintf(out, n, "%s SGE %u: MR lkey 0x%x lacks %s", what, i, s.lkey, AccessName(need));
      return;
    }
    if (s.addr + s.length > m.iova + m.length) {
      snprintf(out, n, "%s SGE %u ends %" PRIu64 " bytes past MR lkey 0x%x", what, i,
               s.addr + s.length - (m.iova + m.length), s.lkey);
      return;
    }
    if (s.addr < m.iova) {
      snprintf(out, n, "%s SGE %u starts %" PRIu64 " bytes before MR lkey 0x%x", what, i, m.iova - s.addr,
               s.lkey);
      return;
    }
  }
  snprintf(out, n, "%s scatter/gather list refused", what);
}

void RecordWhyLocked(Process* p, uint32_t cq_slot, uint32_t qp_num, uint64_t wr_id, uint32_t status,
                     const char* text) {
  ShmHeader* h = p->fab->hdr();
  if (cq_slot >= kMaxCqs) return;
  const uint64_t seq = ++h->why_next;
  ShmWhy& w = h->whys[seq % kMaxWhys];
  w.seq = seq;
  w.cq_slot = cq_slot;
  w.cq_gen = h->cqs[cq_slot].gen;
  w.qp_num = qp_num;
  w.status = status;
  w.wr_id = wr_id;
  snprintf(w.text, sizeof(w.text), "%s", text && *text ? text : core::WcStatusName(status));
}

bool ExplainCompletion(ibv_cq* ibcq, uint32_t qp_num, uint64_t wr_id, uint32_t status, std::string* why) {
  if (!ibcq || !IsContext(ibcq->context) || status == IBV_WC_SUCCESS) return false;
  Process* p = GetProcess();
  if (!p) return false;
  SnCq* cq = Cq(ibcq);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  const uint32_t gen = cq->shm->gen;
  const uint64_t last = h->why_next;
  // The WR's own record, newest first; for a flush, the error that put the
  // QP in ERR.
  const ShmWhy* found = nullptr;
  const ShmWhy* cause = nullptr;
  for (uint64_t i = 0; i < kMaxWhys && i < last; ++i) {
    const ShmWhy& w = h->whys[(last - i) % kMaxWhys];
    if (w.seq != last - i || w.qp_num != qp_num) continue;
    if (w.cq_slot == cq->slot && w.cq_gen == gen && w.wr_id == wr_id && w.status == status) {
      found = &w;
      break;
    }
    if (!cause && w.status != IBV_WC_WR_FLUSH_ERR) cause = &w;
  }
  char text[kWhyText + 1];
  if (found) {
    memcpy(text, found->text, kWhyText);
    text[kWhyText] = 0;
    *why = text;
    return true;
  }
  if (status != IBV_WC_WR_FLUSH_ERR) return false;
  *why = "flushed: QP in the error state";
  if (cause) {
    memcpy(text, cause->text, kWhyText);
    text[kWhyText] = 0;
    char head[96];
    if (cause->wr_id == ~0ull)  // the responder's own error (ResponderError): no WR of its failed
      snprintf(head, sizeof(head), "flushed: QP 0x%x went to ERR as a responder: ", qp_num);
    else
      snprintf(head, sizeof(head), "flushed: QP 0x%x went to ERR after wr_id 0x%" PRIx64 " failed: ", qp_num,
               cause->wr_id);
    *why = std::string(head) + text;
  }
  return true;
}

}  // namespace rdmasan::softnic
