// softnic/cm_address: see cm_address.h.
#include "softnic/cm_address.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <rdma/rdma_user_cm.h>

#include <cstring>

#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic::cm {

uint16_t PortOf(const sockaddr_in6& a) { return ntohs(IsInet(a) ? V4(a).sin_port : a.sin6_port); }
void SetPort(sockaddr_in6* a, uint16_t port) {
  if (IsInet(*a))
    V4(*a).sin_port = htons(port);
  else
    a->sin6_port = htons(port);
}

bool IsAny(const sockaddr_in6& a) {
  if (IsInet(a)) return V4(a).sin_addr.s_addr == htonl(INADDR_ANY);
  return IN6_IS_ADDR_UNSPECIFIED(&a.sin6_addr);
}

// Whether `a` is an address of this host: loopback, or an interface's own.
bool IsLocal(const sockaddr_in6& a) {
  if (IsInet(a)) {
    if ((ntohl(V4(a).sin_addr.s_addr) >> 24) == 127) return true;
  } else if (a.sin6_family == AF_INET6) {
    if (IN6_IS_ADDR_LOOPBACK(&a.sin6_addr)) return true;
    if (IN6_IS_ADDR_V4MAPPED(&a.sin6_addr) && a.sin6_addr.s6_addr[12] == 127) return true;
  } else {
    return false;
  }
  ifaddrs* list = nullptr;
  if (getifaddrs(&list) != 0) return false;
  bool found = false;
  for (ifaddrs* i = list; i && !found; i = i->ifa_next) {
    if (!i->ifa_addr || i->ifa_addr->sa_family != a.sin6_family) continue;
    if (IsInet(a)) {
      found = reinterpret_cast<sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr == V4(a).sin_addr.s_addr;
    } else {
      found = memcmp(&reinterpret_cast<sockaddr_in6*>(i->ifa_addr)->sin6_addr, &a.sin6_addr, 16) == 0;
    }
  }
  freeifaddrs(list);
  return found;
}

// The loopback address of `family` (AF_INET, else AF_INET6), port 0.
sockaddr_in6 Loopback(sa_family_t family) {
  sockaddr_in6 a{};
  if (family == AF_INET) {
    V4(a).sin_family = AF_INET;
    V4(a).sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  } else {
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
  }
  return a;
}

// An IP multicast address (224.0.0.0/4, ff00::/8).
bool IsMcastAddr(const sockaddr_in6& a) {
  if (IsInet(a)) return (ntohl(V4(a).sin_addr.s_addr) >> 28) == 0xe;
  return a.sin6_family == AF_INET6 && a.sin6_addr.s6_addr[0] == 0xff;
}

// RoCE: the GID of an IP address (an IPv4 address IPv4-mapped), and the
// index of this host's RoCE v2 GID for a local address (the default v2
// GID, index 1, for a local address the table has no entry of: another
// 127/8 address).  rdma_cm over RoCE uses RoCE v2, as the kernel's does.
ibv_gid GidOfAddr(const sockaddr_in6& a) {
  if (IsInet(a)) return GidOfIpv4(V4(a).sin_addr);
  ibv_gid g;
  memcpy(g.raw, a.sin6_addr.s6_addr, 16);
  return g;
}

uint8_t SgidIndexOf(const sockaddr_in6& a) {
  const int i = PortGidIndex(GidOfAddr(a), IBV_GID_TYPE_ROCE_V2);
  return static_cast<uint8_t>(i < 0 ? 1 : i);
}

// The address vector of a path to `dst` from `src`: a GRH on RoCE.
void RoceAv(const sockaddr_in6& src, const sockaddr_in6& dst, ib_uverbs_ah_attr* ah) {
  if (!PortIsEthernet()) return;
  ah->dlid = 0;
  ah->is_global = 1;
  const ibv_gid d = GidOfAddr(dst);
  memcpy(ah->grh.dgid, d.raw, sizeof(ah->grh.dgid));
  ah->grh.sgid_index = SgidIndexOf(src);
  ah->grh.hop_limit = 64;
}

// The MGID an IP group address maps to on an InfiniBand port, as the
// kernel maps it (the IPoIB mapping under the default P_Key's link-local
// broadcast group; the UDP port space marks its groups with 0x01 in place
// of the IP signature's 0x1b): IPv4 ff12:401b:ffff::a.b.c.d, IPv6
// ff12:601b:ffff: and the address's last 10 bytes; an IPv6 address that
// is already an SA-assigned MGID (ff1x:a01b::) is used as it is.
ibv_gid McastGid(const sockaddr_in6& a, uint16_t ps) {
  ibv_gid g{};
  // RoCE: the group's own address (IPv4-mapped), as the kernel maps it.
  if (PortIsEthernet()) return GidOfAddr(a);
  if (!IsInet(a) && a.sin6_addr.s6_addr[0] == 0xff && (a.sin6_addr.s6_addr[1] & 0xf0) == 0x10 &&
      a.sin6_addr.s6_addr[2] == 0xa0 && a.sin6_addr.s6_addr[3] == 0x1b) {
    memcpy(g.raw, a.sin6_addr.s6_addr, sizeof(g.raw));
    return g;
  }
  g.raw[0] = 0xff;
  g.raw[1] = 0x12;  // scope 2: link-local
  g.raw[2] = IsInet(a) ? 0x40 : 0x60;
  g.raw[3] = ps == RDMA_PS_UDP ? 0x01 : 0x1b;
  g.raw[4] = g.raw[5] = 0xff;  // the P_Key
  if (IsInet(a))
    memcpy(g.raw + 12, &V4(a).sin_addr.s_addr, 4);
  else
    memcpy(g.raw + 6, a.sin6_addr.s6_addr + 6, 10);
  return g;
}

// The group's multicast LID: what an SA would assign, the same for every
// process that joins the group (a hash of the MGID into 0xC000-0xFFFE).
uint16_t McastLid(const ibv_gid& g) {
  if (PortIsEthernet()) return 0;  // no LIDs on RoCE
  uint32_t h = 2166136261u;
  for (uint8_t b : g.raw) h = (h ^ b) * 16777619u;
  return static_cast<uint16_t>(0xc000 + h % 0x3fff);
}

// Copies a user sockaddr of `len` bytes (at most a sockaddr_in6).
bool TakeAddr(const void* p, size_t len, sockaddr_in6* out) {
  *out = {};
  const auto* sa = static_cast<const sockaddr*>(p);
  if (len >= sizeof(sockaddr_in) && sa->sa_family == AF_INET) {
    memcpy(out, p, sizeof(sockaddr_in));
    return true;
  }
  if (len >= sizeof(sockaddr_in6) && sa->sa_family == AF_INET6) {
    memcpy(out, p, sizeof(sockaddr_in6));
    return true;
  }
  return false;
}

}  // namespace rdmasan::softnic::cm
