// softnic/cm_address: the address maths of softnic's connection manager
// (cm.h): IPv4 and IPv6 socket addresses held in one sockaddr_in6, which of
// them are this host's (all are softnic0's), the GIDs and address vectors
// they map to on an InfiniBand or RoCE port, and the multicast groups IP
// group addresses map to.
//
// May not: keep state, or read anything but the host's interface list and
// softnic0's port (its GID table, link layer, LID).
#ifndef RDMASAN_SOFTNIC_CM_ADDRESS_H_
#define RDMASAN_SOFTNIC_CM_ADDRESS_H_

#include <infiniband/verbs.h>
#include <netinet/in.h>
#include <rdma/ib_user_verbs.h>

#include <cstddef>
#include <cstdint>

namespace rdmasan::softnic::cm {

// An address is AF_INET (a sockaddr_in at the start) or AF_INET6.
inline bool IsInet(const sockaddr_in6& a) { return a.sin6_family == AF_INET; }
inline const sockaddr_in& V4(const sockaddr_in6& a) { return reinterpret_cast<const sockaddr_in&>(a); }
inline sockaddr_in& V4(sockaddr_in6& a) { return reinterpret_cast<sockaddr_in&>(a); }

// The port, in host order.
uint16_t PortOf(const sockaddr_in6& a);
void SetPort(sockaddr_in6* a, uint16_t port);

// The wildcard address of its family.
bool IsAny(const sockaddr_in6& a);
// Whether `a` is an address of this host: loopback, or an interface's own.
bool IsLocal(const sockaddr_in6& a);
// The loopback address of `family` (AF_INET, else AF_INET6), port 0.
sockaddr_in6 Loopback(sa_family_t family);
// An IP multicast address (224.0.0.0/4, ff00::/8).
bool IsMcastAddr(const sockaddr_in6& a);

// RoCE: the GID of an IP address (an IPv4 address IPv4-mapped), and the
// index of this host's RoCE v2 GID for a local address.
ibv_gid GidOfAddr(const sockaddr_in6& a);
uint8_t SgidIndexOf(const sockaddr_in6& a);
// The address vector of a path to `dst` from `src`: a GRH on RoCE.
void RoceAv(const sockaddr_in6& src, const sockaddr_in6& dst, ib_uverbs_ah_attr* ah);

// The MGID IP group address `a` maps to in port space `ps`, and the
// group's multicast LID.
ibv_gid McastGid(const sockaddr_in6& a, uint16_t ps);
uint16_t McastLid(const ibv_gid& g);

// Copies a user sockaddr of `len` bytes (at most a sockaddr_in6); false if
// it is neither AF_INET nor AF_INET6 or too short for its family.
bool TakeAddr(const void* p, size_t len, sockaddr_in6* out);

}  // namespace rdmasan::softnic::cm

#endif  // RDMASAN_SOFTNIC_CM_ADDRESS_H_
