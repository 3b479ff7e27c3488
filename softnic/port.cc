// softnic/port: softnic0's one port, as an InfiniBand port (the default)
// or, with softnic_port=roce, as a RoCE port.
//
// InfiniBand: LID 1 (every process of the fabric is on the one port: QPs
// are told apart by QPN), one GID (the link-local prefix and the port
// GUID) at index 0, the other entries empty.
//
// RoCE: link layer Ethernet, no LIDs (0), GRH required in every address
// vector (ibv_create_ah and the RC/UC RTR transition refuse one without
// it, EINVAL, as the kernel does).  The GID table is built the way the
// kernel fills a RoCE port's: the default GID (fe80:: and the port GUID as
// its interface id) and then one entry per address of the host's
// interfaces that are up (an IPv4 address as its IPv4-mapped GID), each
// twice, RoCE v1 then RoCE v2, in getifaddrs order.  Each entry names the
// interface it came from (ndev_ifindex, sysfs gid_attrs/ndevs).  The table
// is read once per process, when first asked; addresses added later do not
// appear (a NIC updates its table; softnic's is a snapshot).  Every
// process of a host sees the same addresses, so every process agrees on
// the table.
//
// May not: depend on a network device existing (a host with only
// loopback still gets entries for 127.0.0.1 and ::1), or change what the
// port reports while the process runs.
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <net/if.h>
#include <netinet/in.h>
#include <string.h>

#include <algorithm>
#include <mutex>
#include <vector>

#include "core/options.h"
#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

constexpr uint16_t kLid = 1;

struct GidRow {
  ibv_gid gid;
  uint32_t type;  // ibv_gid_type
  uint32_t ifindex;
};

struct PortTable {
  bool eth = false;
  std::vector<GidRow> rows;  // the populated entries, index = position
};

ibv_gid LinkLocalGid() {
  ibv_gid g{};
  g.global.subnet_prefix = htobe64(0xfe80000000000000ull);
  g.global.interface_id = DeviceGuid();
  return g;
}

void AddBoth(PortTable* t, const ibv_gid& g, uint32_t ifindex) {
  for (const GidRow& r : t->rows)
    if (memcmp(r.gid.raw, g.raw, 16) == 0) return;
  if (t->rows.size() + 2 > kRoceGidTableLen) return;
  t->rows.push_back({g, IBV_GID_TYPE_ROCE_V1, ifindex});
  t->rows.push_back({g, IBV_GID_TYPE_ROCE_V2, ifindex});
}

PortTable Build(bool eth) {
  PortTable t;
  t.eth = eth;
  if (!t.eth) {
    t.rows.push_back({LinkLocalGid(), IBV_GID_TYPE_IB, 0});
    return t;
  }
  const uint32_t lo = if_nametoindex("lo");
  AddBoth(&t, LinkLocalGid(), lo);
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) == 0) {
    for (ifaddrs* i = list; i; i = i->ifa_next) {
      if (!i->ifa_addr || !(i->ifa_flags & IFF_UP)) continue;
      const uint32_t ifindex = if_nametoindex(i->ifa_name);
      if (i->ifa_addr->sa_family == AF_INET) {
        in_addr a = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr;
        AddBoth(&t, GidOfIpv4(a), ifindex);
      } else if (i->ifa_addr->sa_family == AF_INET6) {
        ibv_gid g;
        memcpy(g.raw, &reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, 16);
        AddBoth(&t, g, ifindex);
      }
    }
    freeifaddrs(list);
  }
  // A host whose interfaces could not be read still reaches itself.
  in_addr loop{htonl(INADDR_LOOPBACK)};
  AddBoth(&t, GidOfIpv4(loop), lo);
  return t;
}

// Both tables are built on first use and kept; the option picks one at
// each call (it is set once, at start, except in unit tests).
const PortTable& Table() {
  static std::once_flag once[2];
  static PortTable* table[2];
  const int eth = core::GlobalOptions().softnic_port == "roce" ? 1 : 0;
  std::call_once(once[eth], [eth] { table[eth] = new PortTable(Build(eth != 0)); });
  return *table[eth];
}

}  // namespace

bool PortIsEthernet() { return Table().eth; }

uint32_t GidTableLen() { return PortIsEthernet() ? kRoceGidTableLen : kGidTableLen; }

ibv_gid GidOfIpv4(in_addr a) {
  ibv_gid g{};
  g.raw[10] = 0xff;
  g.raw[11] = 0xff;
  memcpy(&g.raw[12], &a.s_addr, 4);
  return g;
}

bool PortGidEntry(uint32_t index, ibv_gid* gid, uint32_t* type, uint32_t* ifindex) {
  const PortTable& t = Table();
  if (index >= t.rows.size()) {
    if (gid) *gid = ibv_gid{};
    return false;
  }
  if (gid) *gid = t.rows[index].gid;
  if (type) *type = t.rows[index].type;
  if (ifindex) *ifindex = t.rows[index].ifindex;
  return true;
}

ibv_gid PortGid(uint32_t index) {
  ibv_gid g{};
  PortGidEntry(index, &g, nullptr, nullptr);
  return g;
}

int PortGidIndex(const ibv_gid& gid, uint32_t type) {
  const PortTable& t = Table();
  for (size_t i = 0; i < t.rows.size(); ++i)
    if (t.rows[i].type == type && memcmp(t.rows[i].gid.raw, gid.raw, 16) == 0) return static_cast<int>(i);
  return -1;
}

uint16_t PortLid() { return PortIsEthernet() ? 0 : kLid; }

void FillPortAttr(ibv_port_attr* a) {
  const bool eth = PortIsEthernet();
  memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = static_cast<int>(GidTableLen());
  // A RoCE port has no subnet manager; its GIDs are IP addresses.
  a->port_cap_flags =
      eth ? IBV_PORT_CM_SUP | IBV_PORT_IP_BASED_GIDS : IBV_PORT_SM | IBV_PORT_SYS_IMAGE_GUID_SUP;
  a->max_msg_sz = 1u << 31;
  a->pkey_tbl_len = 1;
  a->lid = PortLid();
  a->sm_lid = PortLid();
  a->lmc = 0;
  a->max_vl_num = 1;
  a->subnet_timeout = eth ? 0 : 18;
  a->active_width = 2;   // 4X
  a->active_speed = 32;  // EDR (25 Gb/s a lane): 100 Gb/s, or 100GbE
  a->phys_state = 5;     // LinkUp
  a->link_layer = eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
}

int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  if (port != 1) return EINVAL;
  FillPortAttr(attr);
  return 0;
}

int QueryGid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0 || index >= static_cast<int>(GidTableLen())) {
    errno = EINVAL;
    return -1;
  }
  *gid = PortGid(static_cast<uint32_t>(index));
  return 0;
}

int QueryGidEx(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
               size_t entry_size) {
  if (flags) return EINVAL;
  if (port != 1 || index >= GidTableLen()) return EINVAL;
  if (entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  ibv_gid g;
  uint32_t type = 0, ifindex = 0;
  if (!PortGidEntry(index, &g, &type, &ifindex)) return ENODATA;
  memset(entry, 0, entry_size);
  entry->gid = g;
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = type;
  entry->ndev_ifindex = ifindex;
  return 0;
}

ssize_t QueryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t max, uint32_t flags,
                      size_t entry_size) {
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  const uint32_t n = static_cast<uint32_t>(Table().rows.size());
  if (max < n) return -EINVAL;
  for (uint32_t i = 0; i < n; ++i) {
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + i * entry_size);
    QueryGidEx(ctx, 1, i, e, 0, entry_size);
  }
  return n;
}

int QueryGidType(ibv_context* ctx, uint8_t port, unsigned int index, uint32_t* type) {
  if (port != 1 || index >= GidTableLen()) {
    errno = EINVAL;
    return -1;
  }
  // An empty entry reads as IB/RoCE v1, as libibverbs reports it.
  *type = IBV_GID_TYPE_IB;
  PortGidEntry(index, nullptr, type, nullptr);
  return 0;
}

int InitAhFromWc(ibv_context* ctx, uint8_t port, const ibv_wc* wc, const ibv_grh* grh, ibv_ah_attr* ah) {
  if (port != 1) return EINVAL;
  memset(ah, 0, sizeof(*ah));
  ah->dlid = wc->slid;
  ah->sl = wc->sl;
  ah->src_path_bits = wc->dlid_path_bits;
  ah->port_num = port;
  if (!(wc->wc_flags & IBV_WC_GRH)) return PortIsEthernet() ? EINVAL : 0;  // every RoCE packet has one
  ah->is_global = 1;
  ah->grh.hop_limit = 0xff;
  ibv_gid ours;
  uint32_t type;
  const uint8_t* ip = reinterpret_cast<const uint8_t*>(grh) + 20;
  uint32_t sum = 0;
  for (int i = 0; i < 20; i += 2) sum += (uint32_t(ip[i]) << 8) | ip[i + 1];
  while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
  if (PortIsEthernet() && ip[0] == 0x45 && sum == 0xffff) {  // RoCE v2 over IPv4: the IPv4 header
    in_addr a;
    memcpy(&a.s_addr, ip + 12, 4);
    ah->grh.dgid = GidOfIpv4(a);
    memcpy(&a.s_addr, ip + 16, 4);
    ours = GidOfIpv4(a);
    type = IBV_GID_TYPE_ROCE_V2;
    ah->grh.traffic_class = ip[1];
  } else {
    const uint32_t flow = be32toh(grh->version_tclass_flow);
    ah->grh.dgid = grh->sgid;
    ah->grh.flow_label = flow & 0xfffff;
    ah->grh.traffic_class = (flow >> 20) & 0xff;
    ours = grh->dgid;
    type = !PortIsEthernet()     ? IBV_GID_TYPE_IB
           : grh->next_hdr == 17 ? IBV_GID_TYPE_ROCE_V2
                                 : IBV_GID_TYPE_ROCE_V1;
  }
  // The reply leaves from the GID the request came to; a multicast
  // destination is answered from the port's default GID of that type.
  int index = PortGidIndex(ours, type);
  if (index < 0) index = type == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;
  ah->grh.sgid_index = static_cast<uint8_t>(index);
  return 0;
}

int CheckAddressVector(const ibv_ah_attr& ah) {
  if (ah.port_num != 1) return EINVAL;
  if (ah.is_global) {
    if (ah.grh.sgid_index >= GidTableLen()) return EINVAL;
    // A RoCE packet's source is a populated GID; an InfiniBand port's
    // empty entries are refused by the kernel too (no GID attribute).
    if (!PortGidEntry(ah.grh.sgid_index, nullptr, nullptr, nullptr)) return EINVAL;
  } else if (PortIsEthernet()) {
    return EINVAL;  // RoCE routes by GRH: an address vector must carry one
  }
  return 0;
}

// The 40-byte GRH a UD receiver finds ahead of the payload: an IPv6-style
// GRH from the sender's source GID, or, for RoCE v2 between IPv4-mapped
// GIDs, the IPv4 header in its last 20 bytes (the first 20 undefined:
// zero), as a RoCE NIC writes it.
void FillGrh(const SendWqe& w, uint64_t len, ibv_grh* grh) {
  ibv_gid sgid;
  uint32_t type = IBV_GID_TYPE_IB;
  if (!PortGidEntry(w.ah.grh.sgid_index, &sgid, &type, nullptr)) sgid = PortGid(0);
  const uint8_t* d = w.ah.grh.dgid.raw;
  const bool v4 = type == IBV_GID_TYPE_ROCE_V2 &&
                  IN6_IS_ADDR_V4MAPPED(reinterpret_cast<const in6_addr*>(d)) &&
                  IN6_IS_ADDR_V4MAPPED(reinterpret_cast<const in6_addr*>(sgid.raw));
  if (v4) {
    uint8_t* ip = reinterpret_cast<uint8_t*>(grh) + 20;
    const uint16_t total = static_cast<uint16_t>(std::min<uint64_t>(len + 20 + 8 + 12 + 8 + 4, 0xffff));
    ip[0] = 0x45;
    ip[1] = w.ah.grh.traffic_class;
    ip[2] = static_cast<uint8_t>(total >> 8);
    ip[3] = static_cast<uint8_t>(total);
    ip[6] = 0x40;  // don't fragment
    ip[8] = w.ah.grh.hop_limit;
    ip[9] = 17;  // UDP (port 4791)
    memcpy(ip + 12, sgid.raw + 12, 4);
    memcpy(ip + 16, d + 12, 4);
    uint32_t sum = 0;
    for (int i = 0; i < 20; i += 2) sum += (uint32_t(ip[i]) << 8) | ip[i + 1];
    while (sum >> 16) sum = (sum & 0xffff) + (sum >> 16);
    const uint16_t csum = static_cast<uint16_t>(~sum);
    ip[10] = static_cast<uint8_t>(csum >> 8);
    ip[11] = static_cast<uint8_t>(csum);
    return;
  }
  grh->version_tclass_flow =
      htobe32((6u << 28) | (uint32_t(w.ah.grh.traffic_class) << 20) | (w.ah.grh.flow_label & 0xfffff));
  grh->paylen = htobe16(static_cast<uint16_t>(len));
  grh->next_hdr = type == IBV_GID_TYPE_ROCE_V2 ? 17 : 0x1b;  // v2: UDP; IB and RoCE v1: BTH
  grh->hop_limit = w.ah.grh.hop_limit;
  grh->sgid = sgid;
  grh->dgid = w.ah.grh.dgid;
}

}  // namespace rdmasan::softnic
