// softnic multicast: ibv_attach_mcast / ibv_detach_mcast, and the group
// membership the data path fans a multicast UD send out to.
//
// Membership lives in the fabric's mcasts table (one entry per attached
// (QP, group) pair, whichever process owns the QP), so a sender in one
// process reaches the QPs another attached.  A group is keyed by its GID,
// as rxe and mlx5 key theirs; the LID is kept for AHs that name the group
// by LID alone.  The checks are the kernel's (ib_attach_mcast): a UD QP, a
// multicast GID (ff00::/8, or an IPv4-mapped 224.0.0.0/4 one), a multicast
// LID on an InfiniBand port (softnic0's is).  Detaching a QP that is not
// attached is EINVAL, as rxe answers.  A QP's attachments go when it is
// destroyed (as uverbs detaches them), a dead process's when it is reaped.
//
// May not: trust an entry read from the table (its QP slot is checked, and
// its QP must still be the one that attached: same QPN, UD, in use), or
// take the fabric lock on the data path (the data path calls in with it
// held).
#include <errno.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <vector>

#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

bool IsMcastGid(const ibv_gid& g) {
  if (g.raw[0] == 0xff) return true;
  // ::ffff:a.b.c.d with a.b.c.d in 224.0.0.0/4 (RoCE's IPv4 groups).
  static constexpr uint8_t kV4Mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
  return memcmp(g.raw, kV4Mapped, sizeof(kV4Mapped)) == 0 && (g.raw[12] & 0xf0) == 0xe0;
}

bool IsMcastLid(uint16_t lid) { return lid >= kMcastLidFirst && lid <= kMcastLidLast; }

// The checks ib_attach_mcast and ib_detach_mcast make before the provider.
int Validate(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  if (!qp || !gid || qp->qp_type != IBV_QPT_UD || Qp(qp)->opened) return EINVAL;
  // An InfiniBand group has a multicast LID; RoCE has no LIDs (ignored).
  if (!IsMcastGid(*gid) || (!PortIsEthernet() && !IsMcastLid(lid))) return EINVAL;
  return 0;
}

// Whether entry `m` is a live attachment of the QP in `slot` (QPN `qpn`).
bool IsOf(const ShmMcast& m, uint32_t slot, uint32_t qpn) {
  return m.in_use && m.qp_slot == slot && m.qpn == qpn;
}

}  // namespace

int AttachMcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid) {
  if (int e = Validate(ibqp, gid, lid)) return e;
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnQp* qp = Qp(ibqp);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  const uint32_t qpn = qp->shm->qpn;
  uint32_t free_slot = kNone, members = 0;
  bool group_exists = false;
  for (uint32_t i = 0; i < kMaxMcastAttach; ++i) {
    const ShmMcast& m = h->mcasts[i];
    if (!m.in_use) {
      if (free_slot == kNone) free_slot = i;
      continue;
    }
    if (memcmp(m.gid, gid->raw, sizeof(m.gid)) != 0) continue;
    if (IsOf(m, qp->slot, qpn)) return 0;  // attached already: one attachment
    group_exists = true;
    ++members;
  }
  if (free_slot == kNone || members >= kMaxMcastQpsPerGroup) return ENOMEM;
  if (!group_exists) {
    // A new group: within max_mcast_grp distinct groups.
    std::vector<std::array<uint8_t, 16>> groups;
    groups.reserve(kMaxMcastAttach);
    for (const ShmMcast& m : h->mcasts) {
      if (!m.in_use) continue;
      std::array<uint8_t, 16> g;
      memcpy(g.data(), m.gid, g.size());
      groups.push_back(g);
    }
    std::sort(groups.begin(), groups.end());
    if (std::unique(groups.begin(), groups.end()) - groups.begin() >= kMaxMcastGroups) return ENOMEM;
  }
  ShmMcast& m = h->mcasts[free_slot];
  m.proc = p->fab->self_proc();
  m.qp_slot = qp->slot;
  m.qpn = qpn;
  memcpy(m.gid, gid->raw, sizeof(m.gid));
  m.lid = lid;
  m.in_use = 1;
  return 0;
}

int DetachMcast(ibv_qp* ibqp, const ibv_gid* gid, uint16_t lid) {
  if (int e = Validate(ibqp, gid, lid)) return e;
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnQp* qp = Qp(ibqp);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  for (ShmMcast& m : h->mcasts) {
    if (IsOf(m, qp->slot, qp->shm->qpn) && memcmp(m.gid, gid->raw, sizeof(m.gid)) == 0) {
      m.in_use = 0;
      return 0;
    }
  }
  return EINVAL;
}

void DetachAllMcastLocked(Process* p, uint32_t qp_slot) {
  ShmHeader* h = p->fab->hdr();
  const uint32_t self = p->fab->self_proc();
  for (ShmMcast& m : h->mcasts)
    if (m.in_use && m.qp_slot == qp_slot && m.proc == self) m.in_use = 0;
}

uint32_t McastMembersLocked(Process* p, const ibv_ah_attr& ah, uint32_t* slots, uint32_t max) {
  const bool by_gid = ah.is_global && IsMcastGid(ah.grh.dgid);
  if (!by_gid && !IsMcastLid(ah.dlid)) return 0;
  ShmHeader* h = p->fab->hdr();
  uint32_t n = 0;
  for (const ShmMcast& m : h->mcasts) {
    if (n == max) break;
    if (!m.in_use) continue;
    if (by_gid ? memcmp(m.gid, ah.grh.dgid.raw, sizeof(m.gid)) != 0 : m.lid != ah.dlid) continue;
    const uint32_t slot = m.qp_slot;  // shared memory: checked before use
    if (slot >= kMaxQps) continue;
    const ShmQp& q = h->qps[slot];
    if (!q.in_use || q.qpn != m.qpn || q.type != IBV_QPT_UD) continue;
    if (std::find(slots, slots + n, slot) != slots + n) continue;  // listed twice
    slots[n++] = slot;
  }
  return n;
}

}  // namespace rdmasan::softnic
