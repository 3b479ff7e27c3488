// softnic flow steering: ibv_create_flow / ibv_destroy_flow (the
// verbs_context ops the inline verbs call) on raw packet QPs, and the
// matching of a frame's header fields against the rules of the fabric.
//
// A rule lives in the fabric's flows[] table, so a raw send of any process
// finds it: the spec list (ETH, IPV4, IPV4_EXT, IPV6, TCP, UDP, value and
// mask; any other spec type, an inner spec, or a flag is EOPNOTSUPP) is
// folded into one masked FlowKey and the headers a frame must have.
// Attribute types NORMAL (matched by priority: a lower value wins, and
// every QP with a matching rule of the winning priority gets a copy),
// ALL_DEFAULT and MC_DEFAULT (what no NORMAL rule took: every frame, or
// multicast ones) and SNIFFER (every frame).
//
// May not: trust a rule read from the fabric beyond what it steers to (its
// QP slot and number are checked against the QP table, and a forged one
// can only steer frames to a live raw QP of the user, as a real rule
// could), or allocate under the fabric lock.
#include <endian.h>
#include <errno.h>

#include <algorithm>
#include <cstring>
#include <new>

#include "softnic/internal.h"
#include "softnic/owned.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

struct SnFlow {
  ibv_flow flow;
  uint32_t slot;
  uint32_t gen;
};

template <typename T>
void AndInto(T* v, const T& m) {
  auto* b = reinterpret_cast<uint8_t*>(v);
  const auto* mb = reinterpret_cast<const uint8_t*>(&m);
  for (size_t i = 0; i < sizeof(T); ++i) b[i] &= mb[i];
}

bool AnySet(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  for (size_t i = 0; i < n; ++i)
    if (b[i]) return true;
  return false;
}

// Folds one spec into the rule (`value` unmasked until the end).  0, or
// EOPNOTSUPP / EINVAL.
// The program packs specs one after another, so one need not be aligned
// for its type: it is copied into an aligned union before it is read.
int AddSpec(const uint8_t* at, uint32_t room, FlowKey* v, FlowKey* m, uint32_t* need, uint32_t* used) {
  decltype(ibv_flow_spec::hdr) hdr;
  if (room < sizeof(hdr)) return EINVAL;
  memcpy(&hdr, at, sizeof(hdr));
  const uint32_t type = hdr.type;
  const uint32_t size = hdr.size;
  if (size > room || size < sizeof(hdr)) return EINVAL;
  *used = size;
  ibv_flow_spec copy;
  memset(&copy, 0, sizeof(copy));
  memcpy(&copy, at, std::min<size_t>(size, sizeof(copy)));
  const ibv_flow_spec* spec = &copy;
  switch (type) {
    case IBV_FLOW_SPEC_ETH: {
      if (size != sizeof(ibv_flow_spec_eth)) return EINVAL;
      const auto& s = spec->eth;
      memcpy(v->dst_mac, s.val.dst_mac, 6);
      memcpy(m->dst_mac, s.mask.dst_mac, 6);
      memcpy(v->src_mac, s.val.src_mac, 6);
      memcpy(m->src_mac, s.mask.src_mac, 6);
      v->ether_type = s.val.ether_type;
      m->ether_type = s.mask.ether_type;
      v->vlan_tag = s.val.vlan_tag;
      m->vlan_tag = s.mask.vlan_tag;
      *need |= kHasEth;
      if (s.mask.vlan_tag) *need |= kHasVlan;
      return 0;
    }
    case IBV_FLOW_SPEC_IPV4:
    case IBV_FLOW_SPEC_IPV4_EXT: {
      if (type == IBV_FLOW_SPEC_IPV4 && size != sizeof(ibv_flow_spec_ipv4)) return EINVAL;
      if (type == IBV_FLOW_SPEC_IPV4_EXT && size != sizeof(ibv_flow_spec_ipv4_ext)) return EINVAL;
      if (*need & kHasIpv6) return EINVAL;
      if (type == IBV_FLOW_SPEC_IPV4) {
        const auto& s = spec->ipv4;
        v->src_ip4 = s.val.src_ip;
        m->src_ip4 = s.mask.src_ip;
        v->dst_ip4 = s.val.dst_ip;
        m->dst_ip4 = s.mask.dst_ip;
      } else {
        const auto& s = spec->ipv4_ext;
        v->src_ip4 = s.val.src_ip;
        m->src_ip4 = s.mask.src_ip;
        v->dst_ip4 = s.val.dst_ip;
        m->dst_ip4 = s.mask.dst_ip;
        v->proto = s.val.proto;
        m->proto = s.mask.proto;
        v->tos = s.val.tos;
        m->tos = s.mask.tos;
        v->ttl = s.val.ttl;
        m->ttl = s.mask.ttl;
        v->ip4_flags = s.val.flags;
        m->ip4_flags = s.mask.flags;
      }
      *need |= kHasIpv4;
      return 0;
    }
    case IBV_FLOW_SPEC_IPV6: {
      if (size != sizeof(ibv_flow_spec_ipv6)) return EINVAL;
      if (*need & kHasIpv4) return EINVAL;
      const auto& s = spec->ipv6;
      memcpy(v->src_ip6, s.val.src_ip, 16);
      memcpy(m->src_ip6, s.mask.src_ip, 16);
      memcpy(v->dst_ip6, s.val.dst_ip, 16);
      memcpy(m->dst_ip6, s.mask.dst_ip, 16);
      v->flow_label = s.val.flow_label;
      m->flow_label = s.mask.flow_label;
      v->next_hdr = s.val.next_hdr;
      m->next_hdr = s.mask.next_hdr;
      v->traffic_class = s.val.traffic_class;
      m->traffic_class = s.mask.traffic_class;
      v->hop_limit = s.val.hop_limit;
      m->hop_limit = s.mask.hop_limit;
      *need |= kHasIpv6;
      return 0;
    }
    case IBV_FLOW_SPEC_TCP:
    case IBV_FLOW_SPEC_UDP: {
      if (size != sizeof(ibv_flow_spec_tcp_udp)) return EINVAL;
      if (*need & (kHasTcp | kHasUdp)) return EINVAL;
      const auto& s = spec->tcp_udp;
      v->src_port = s.val.src_port;
      m->src_port = s.mask.src_port;
      v->dst_port = s.val.dst_port;
      m->dst_port = s.mask.dst_port;
      *need |= type == IBV_FLOW_SPEC_TCP ? kHasTcp : kHasUdp;
      return 0;
    }
    default:
      return EOPNOTSUPP;  // tunnels, inner headers, ESP, MPLS, actions
  }
}

bool Matches(const ShmFlow& f, const FlowKey& k, uint32_t has) {
  if ((f.need & has) != f.need) return false;
  const auto* kb = reinterpret_cast<const uint8_t*>(&k);
  const auto* vb = reinterpret_cast<const uint8_t*>(&f.value);
  const auto* mb = reinterpret_cast<const uint8_t*>(&f.mask);
  for (size_t i = 0; i < sizeof(FlowKey); ++i)
    if ((kb[i] & mb[i]) != vb[i]) return false;
  return true;
}

// The rule's QP, if it is still the raw QP the rule was made on.
const ShmQp* RuleQp(const ShmHeader* h, const ShmFlow& f) {
  if (f.qp_slot >= kMaxQps) return nullptr;
  const ShmQp& q = h->qps[f.qp_slot];
  return q.in_use && q.qpn == f.qpn && q.type == IBV_QPT_RAW_PACKET ? &q : nullptr;
}

void AddUnique(uint32_t* slots, uint32_t* n, uint32_t max, uint32_t slot) {
  for (uint32_t i = 0; i < *n; ++i)
    if (slots[i] == slot) return;
  if (*n < max) slots[(*n)++] = slot;
}

ibv_flow* CreateFlow(ibv_qp* qp, ibv_flow_attr* attr) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (!qp || !attr || !IsContext(qp->context)) {
    errno = EINVAL;
    return nullptr;
  }
  if (qp->qp_type != IBV_QPT_RAW_PACKET) {
    errno = EOPNOTSUPP;  // steering is an Ethernet port's, to raw packet QPs
    return nullptr;
  }
  if (attr->comp_mask || attr->flags) {
    errno = EOPNOTSUPP;  // DONT_TRAP, EGRESS
    return nullptr;
  }
  if (attr->port != 1) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->type != IBV_FLOW_ATTR_NORMAL && attr->type != IBV_FLOW_ATTR_ALL_DEFAULT &&
      attr->type != IBV_FLOW_ATTR_MC_DEFAULT && attr->type != IBV_FLOW_ATTR_SNIFFER) {
    errno = EINVAL;
    return nullptr;
  }
  FlowKey v{}, m{};
  uint32_t need = 0;
  // The specs follow the attribute, each as long as its size says.
  uint32_t room = 0xffff;
  const auto* at = reinterpret_cast<const uint8_t*>(attr + 1);
  for (uint32_t i = 0; i < attr->num_of_specs; ++i) {
    uint32_t used = 0;
    if (int e = AddSpec(at, room, &v, &m, &need, &used)) {
      errno = e;
      return nullptr;
    }
    room -= used;
    at += used;
  }
  if (attr->type != IBV_FLOW_ATTR_NORMAL && (attr->num_of_specs || AnySet(&m, sizeof(m)))) {
    errno = EINVAL;  // default and sniffer rules take every frame
    return nullptr;
  }
  AndInto(&v, m);
  auto f = NewOwned<SnFlow>();
  if (!f) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  const uint32_t slot = FreeSlot(h->flows);
  if (slot == kNone) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmFlow& s = h->flows[slot];
  s.gen = s.gen + 1;
  s.proc = p->fab->self_proc();
  s.qp_slot = Qp(qp)->slot;
  s.qpn = qp->qp_num;
  s.type = attr->type;
  s.priority = attr->priority;
  s.need = need;
  s.value = v;
  s.mask = m;
  s.in_use = 1;
  f->slot = slot;
  f->gen = s.gen;
  f->flow.context = qp->context;
  f->flow.handle = slot;
  return &f.release()->flow;  // the program's handle now
}

int DestroyFlow(ibv_flow* flow) {
  Process* p = GetProcess();
  if (!p) return ENODEV;
  auto* f = reinterpret_cast<SnFlow*>(flow);
  {
    FabricLock lock(p->fab);
    ShmFlow& s = p->fab->hdr()->flows[f->slot];
    // Gone already if its QP was destroyed first.
    if (s.in_use && s.gen == f->gen && s.proc == p->fab->self_proc()) s.in_use = 0;
  }
  delete f;
  return 0;
}

}  // namespace

void InstallFlowOps(verbs_context* v) {
  v->ibv_create_flow = CreateFlow;
  v->ibv_destroy_flow = DestroyFlow;
}

void DetachAllFlowsLocked(Process* p, uint32_t qp_slot) {
  const uint32_t self = p->fab->self_proc();
  for (ShmFlow& f : p->fab->hdr()->flows)
    if (f.in_use && f.proc == self && f.qp_slot == qp_slot) f.in_use = 0;
}

uint32_t ParseFrame(const uint8_t* b, uint32_t len, FlowKey* k) {
  *k = {};
  if (len < 14) return 0;
  uint32_t has = kHasEth;
  memcpy(k->dst_mac, b, 6);
  memcpy(k->src_mac, b + 6, 6);
  uint32_t off = 12;
  uint16_t type;
  memcpy(&type, b + off, 2);
  off += 2;
  if (be16toh(type) == 0x8100 && len >= off + 4) {
    memcpy(&k->vlan_tag, b + off, 2);
    memcpy(&type, b + off + 2, 2);
    off += 4;
    has |= kHasVlan;
  }
  k->ether_type = type;
  uint8_t l4 = 0;
  if (be16toh(type) == 0x0800 && len >= off + 20 && (b[off] >> 4) == 4 && (b[off] & 0xf) >= 5) {
    const uint8_t* ip = b + off;
    k->tos = ip[1];
    k->ip4_flags = ip[6] >> 5;
    k->ttl = ip[8];
    k->proto = ip[9];
    memcpy(&k->src_ip4, ip + 12, 4);
    memcpy(&k->dst_ip4, ip + 16, 4);
    has |= kHasIpv4;
    const bool first_fragment = ((ip[6] & 0x1f) | ip[7]) == 0;
    if (first_fragment) l4 = ip[9];
    off += (ip[0] & 0xf) * 4;
  } else if (be16toh(type) == 0x86dd && len >= off + 40 && (b[off] >> 4) == 6) {
    const uint8_t* ip = b + off;
    uint32_t vtf;
    memcpy(&vtf, ip, 4);
    k->traffic_class = static_cast<uint8_t>(be32toh(vtf) >> 20);
    k->flow_label = htobe32(be32toh(vtf) & 0xfffff);
    k->next_hdr = ip[6];
    k->hop_limit = ip[7];
    memcpy(k->src_ip6, ip + 8, 16);
    memcpy(k->dst_ip6, ip + 24, 16);
    has |= kHasIpv6;
    l4 = ip[6];
    off += 40;
  }
  if ((l4 == 6 || l4 == 17) && len >= off + 4) {
    memcpy(&k->src_port, b + off, 2);
    memcpy(&k->dst_port, b + off + 2, 2);
    has |= l4 == 6 ? kHasTcp : kHasUdp;
  }
  return has;
}

uint32_t RawReceiversLocked(Process* p, const uint8_t* frame, uint32_t len, uint32_t* slots, uint32_t max) {
  const ShmHeader* h = p->fab->hdr();
  FlowKey k;
  const uint32_t has = ParseFrame(frame, len, &k);
  // The winning NORMAL priority, then every QP with a rule at it.
  uint32_t best = kNone;
  for (const ShmFlow& f : h->flows)
    if (f.in_use && f.type == IBV_FLOW_ATTR_NORMAL && f.priority < best && Matches(f, k, has) && RuleQp(h, f))
      best = f.priority;
  uint32_t qps[kMaxRawReceivers];
  uint32_t n = 0;
  const bool multicast = (has & kHasEth) && (k.dst_mac[0] & 1);
  for (const ShmFlow& f : h->flows) {
    if (!f.in_use || !RuleQp(h, f)) continue;
    bool take = false;
    switch (f.type) {
      case IBV_FLOW_ATTR_NORMAL:
        take = best != kNone && f.priority == best && Matches(f, k, has);
        break;
      case IBV_FLOW_ATTR_ALL_DEFAULT:
        take = best == kNone;
        break;
      case IBV_FLOW_ATTR_MC_DEFAULT:
        take = best == kNone && multicast;
        break;
      case IBV_FLOW_ATTR_SNIFFER:
        take = true;
        break;
      default:
        break;
    }
    if (take) AddUnique(qps, &n, kMaxRawReceivers, f.qp_slot);
  }
  // An RSS QP hands the frame to the WQ its hash picks.
  uint32_t out = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const ShmQp& q = h->qps[qps[i]];
    const uint32_t slot = q.rss == kNone ? qps[i] : RssPickLocked(p, q, k, has);
    if (slot != kNone) AddUnique(slots, &out, max, slot);
  }
  return out;
}

}  // namespace rdmasan::softnic
