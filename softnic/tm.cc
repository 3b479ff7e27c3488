// softnic tag matching: TM SRQs (ibv_create_srq_ex, IBV_SRQT_TM), their tag
// list operations (ibv_post_srq_ops: IBV_WR_TAG_ADD, TAG_DEL, TAG_SYNC),
// and what the data path asks of a tag list (datapath.cc delivers the
// messages: a SEND whose payload starts with struct ibv_tmh).
//
// The list lives in the fabric's heap, where requesters of any process
// match against it under the fabric lock.  A matched entry is consumed at
// once (a later TAG_DEL of it completes with IBV_WC_TM_ERR) and freed when
// its owner polls the buffer's last completion.  Phase: the SRQ counts the
// tagged messages it found unexpected; an ADD whose unexpected_cnt is
// behind that count adds an entry that never matches and completes with
// IBV_WC_TM_SYNC_REQ (software must account for those messages first).
// A tag list operation completes on the SRQ's CQ when signaled or failed;
// the signaled ones not yet polled count against max_ops.
//
// May not: trust an entry, index or count read from shared memory without
// bounding it, or allocate on the data path.
#include <errno.h>

#include <cstring>

#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

// The tag list of SRQ `slot`, or nullptr if its shared fields do not
// describe one inside the heap; *n its entry count.
ShmTag* Tags(Fabric* f, uint32_t slot, uint32_t* n) {
  if (slot >= kMaxSrqs) return nullptr;
  const ShmSrq& s = f->hdr()->srqs[slot];
  const uint32_t max = s.max_tags;
  const uint64_t off = s.tags_off;
  if (s.srq_type != IBV_SRQT_TM || max == 0 || max > kTmMaxTags ||
      !f->InHeap(off, uint64_t(max) * sizeof(ShmTag)))
    return nullptr;
  *n = max;
  return f->At<ShmTag>(off);
}

ibv_wc_opcode OpsWcOpcode(uint32_t op) {
  switch (op) {
    case IBV_WR_TAG_ADD:
      return IBV_WC_TM_ADD;
    case IBV_WR_TAG_DEL:
      return IBV_WC_TM_DEL;
    default:
      return IBV_WC_TM_SYNC;
  }
}

}  // namespace

ibv_srq* CreateTmSrq(ibv_context* ctx, ibv_srq_init_attr_ex* attr) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  constexpr uint32_t kNeed =
      IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD | IBV_SRQ_INIT_ATTR_CQ | IBV_SRQ_INIT_ATTR_TM;
  const ibv_tm_cap& tm = attr->tm_cap;
  if ((attr->comp_mask & kNeed) != kNeed || attr->srq_type != IBV_SRQT_TM || !attr->pd || !attr->cq ||
      attr->pd->context != ctx || attr->cq->context != ctx || tm.max_num_tags < 1 ||
      tm.max_num_tags > kTmMaxTags || tm.max_ops < 1 || tm.max_ops > kTmMaxOps) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_srq_init_attr basic{};
  basic.srq_context = attr->srq_context;
  basic.attr = attr->attr;
  ibv_srq* srq = CreateSrqCommon(attr->pd, &basic, nullptr, Cq(attr->cq));
  if (!srq) return nullptr;
  SnSrq* s = Srq(srq);
  {
    FabricLock lock(p->fab);
    const uint64_t bytes = uint64_t(tm.max_num_tags) * sizeof(ShmTag);
    const uint64_t off = p->fab->Alloc(bytes);
    if (off) {
      memset(p->fab->At<ShmTag>(off), 0, bytes);
      s->shm->tags_off = off;
      s->shm->max_tags = tm.max_num_tags;
      s->shm->srq_type = IBV_SRQT_TM;
    }
  }
  if (!s->shm->tags_off) {
    DestroySrq(srq);
    errno = ENOMEM;
    return nullptr;
  }
  s->tm_max_ops = tm.max_ops;
  return srq;
}

int PostSrqOps(ibv_srq* ibsrq, ibv_ops_wr* wr, ibv_ops_wr** bad) {
  Process* p = GetProcess();
  SnSrq* srq = Srq(ibsrq);
  if (!p) {
    *bad = wr;
    return ENODEV;
  }
  FabricLock lock(p->fab);
  ShmSrq& s = *srq->shm;
  uint32_t n = 0;
  ShmTag* tags = Tags(p->fab, srq->slot, &n);
  if (!tags) {  // not a TM SRQ
    *bad = wr;
    return EINVAL;
  }
  for (; wr; wr = wr->next) {
    const bool signaled = wr->flags & IBV_OPS_SIGNALED;
    if ((wr->flags & ~(IBV_OPS_SIGNALED | IBV_OPS_TM_SYNC)) ||
        (wr->opcode != IBV_WR_TAG_ADD && wr->opcode != IBV_WR_TAG_DEL && wr->opcode != IBV_WR_TAG_SYNC)) {
      *bad = wr;
      return EINVAL;
    }
    if (srq->tm_ops.load(std::memory_order_relaxed) >= srq->tm_max_ops) {
      *bad = wr;
      return ENOMEM;
    }
    ShmCqe c{};
    c.status = IBV_WC_SUCCESS;
    if (wr->opcode == IBV_WR_TAG_ADD) {
      const int nsge = wr->tm.add.num_sge;
      if (nsge < 0 || static_cast<uint32_t>(nsge) > kTmMaxSge || (nsge > 0 && !wr->tm.add.sg_list)) {
        *bad = wr;
        return EINVAL;
      }
      uint32_t i = 0;
      while (i < n && tags[i].state != kTagFree) ++i;
      if (i == n) {  // the list is full
        *bad = wr;
        return ENOMEM;
      }
      ShmTag& t = tags[i];
      t.state = kTagPosted;
      t.in_phase = wr->tm.unexpected_cnt == s.tm_unexpected;
      t.seq = s.tm_seq++;
      t.tag = wr->tm.add.tag;
      t.mask = wr->tm.add.mask;
      t.recv_wr_id = wr->tm.add.recv_wr_id;
      t.num_sge = static_cast<uint32_t>(nsge);
      for (int k = 0; k < nsge; ++k)
        t.sge[k] = {wr->tm.add.sg_list[k].addr, wr->tm.add.sg_list[k].length, wr->tm.add.sg_list[k].lkey};
      wr->tm.handle = i;
      if (!t.in_phase) c.wc_flags = IBV_WC_TM_SYNC_REQ;
    } else if (wr->opcode == IBV_WR_TAG_DEL) {
      const uint32_t h = wr->tm.handle;
      if (h >= n || tags[h].state == kTagFree) {
        *bad = wr;
        return EINVAL;
      }
      // A message took the buffer first: it stays until that completion is
      // polled, and the removal fails.
      if (tags[h].state == kTagConsumed)
        c.status = IBV_WC_TM_ERR;
      else
        tags[h].state = kTagFree;
    }
    if (!signaled && c.status == IBV_WC_SUCCESS) continue;
    c.wr_id = wr->wr_id;
    c.opcode = OpsWcOpcode(wr->opcode);
    c.qp_slot = kNone;
    c.tm = kTmOp;
    c.tm_srq = srq->slot;
    if (PushCqeLocked(p, s.cq, c)) srq->tm_ops.fetch_add(1, std::memory_order_relaxed);
  }
  return 0;
}

uint32_t MatchTagLocked(Fabric* f, uint32_t srq, uint64_t tag, ShmTag* out) {
  uint32_t n = 0;
  ShmTag* tags = Tags(f, srq, &n);
  if (!tags) return kNone;
  uint32_t best = kNone;
  for (uint32_t i = 0; i < n; ++i) {
    const ShmTag& t = tags[i];
    if (t.state != kTagPosted || !t.in_phase || (tag & t.mask) != t.tag) continue;
    if (best == kNone || t.seq < tags[best].seq) best = i;
  }
  if (best == kNone) return kNone;
  memcpy(out, &tags[best], sizeof(*out));
  out->num_sge = std::min(out->num_sge, kTmMaxSge);
  tags[best].state = kTagConsumed;
  return best;
}

void UnconsumeTagLocked(Fabric* f, uint32_t srq, uint32_t handle) {
  uint32_t n = 0;
  ShmTag* tags = Tags(f, srq, &n);
  if (tags && handle < n && tags[handle].state == kTagConsumed) tags[handle].state = kTagPosted;
}

void RetireTmCqe(Process* p, const ShmCqe& c) {
  const uint32_t slot = c.tm_srq;
  SnSrq* srq = slot < kMaxSrqs ? p->srqs[slot] : nullptr;
  if (!srq) return;
  if (c.tm == kTmOp) {
    if (srq->tm_ops.load(std::memory_order_relaxed) > 0) srq->tm_ops.fetch_sub(1, std::memory_order_relaxed);
  } else if (c.tm == kTmTagLast) {
    FabricLock lock(p->fab);
    uint32_t n = 0;
    ShmTag* tags = Tags(p->fab, slot, &n);
    if (tags && c.tm_handle < n && tags[c.tm_handle].state == kTagConsumed)
      tags[c.tm_handle].state = kTagFree;
  }
}

}  // namespace rdmasan::softnic
