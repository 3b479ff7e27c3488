// softnic/cm_abi: the rdma_ucm ABI (<rdma/rdma_user_cm.h>) as softnic's
// connection manager (cm.h) reads and answers it: the event numbers and
// IB CM reasons the kernel reports, the private-data room of each message,
// commands decoded from the program's buffer, responses copied to its
// memory (EFAULT instead of a fault), and the QP attributes, path records
// and UD parameters the kernel's answers carry.
//
// May not: keep state, or touch the program's memory except through
// CopyIn/CopyOut.
#ifndef RDMASAN_SOFTNIC_CM_ABI_H_
#define RDMASAN_SOFTNIC_CM_ABI_H_

#include <infiniband/verbs.h>
// libc's socket addresses first: the kernel's headers then leave in6_addr
// and sockaddr_in6 to libc (linux/libc-compat.h).  Included after them,
// libc's would be a second definition, one the LTO link refuses (-Wodr)
// in the files that see the other.
#include <netinet/in.h>
#include <rdma/ib_user_sa.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/rdma_user_cm.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

#include "softnic/cm_wire.h"

namespace rdmasan::softnic::cm {

// enum rdma_cm_event_type of <rdma/rdma_cma.h> (librdmacm's ABI with the
// kernel; that header cannot be included beside the kernel's).
enum : uint32_t {
  kEventAddrResolved = 0,
  kEventAddrError = 1,
  kEventRouteResolved = 2,
  kEventRouteError = 3,
  kEventConnectRequest = 4,
  kEventConnectResponse = 5,
  kEventUnreachable = 7,
  kEventRejected = 8,
  kEventEstablished = 9,
  kEventDisconnected = 10,
  kEventMulticastJoin = 12,
};
inline constexpr uint32_t kUdpQkey = 0x01234567;  // RDMA_UDP_QKEY
// IB CM reject reasons and SIDR statuses the kernel reports.
inline constexpr uint8_t kRejInvalidServiceId = 8;
inline constexpr uint8_t kRejConsumer = 28;
inline constexpr uint8_t kSidrReject = 1;
inline constexpr uint8_t kSidrUnsupported = 2;
// Private data room in each IB CM message, less the 36-byte rdma_cm header
// of the IP port spaces (what the kernel lets a user send and reports).
inline constexpr int kCmaHeader = 36;
inline constexpr int kReqRoom = 92, kRepRoom = 196, kRejRoom = 148, kSidrReqRoom = 216, kSidrRepRoom = 136;
inline constexpr uint32_t kInvalidIndex = 0xffffffffu;

// A command's argument struct from the `in_len` bytes that follow its
// header (zero-filled past them, as the kernel's copy of a shorter struct).
template <typename T>
T Arg(const uint8_t* in, size_t in_len) {
  T t{};
  memcpy(&t, in, std::min(in_len, sizeof(T)));
  return t;
}

// Copies to the program's response buffer, or from its memory: 0, or
// EFAULT instead of a fault.
int CopyOut(uint64_t uaddr, const void* src, size_t n);
int CopyIn(void* dst, uint64_t uaddr, size_t n);

// The connection parameters of an event from message `m`, with `room`
// bytes of private data (the whole room, zero-padded, as the kernel
// reports it).
void CopyConn(const Msg& m, int room, rdma_ucm_conn_param* c);
// The private-data room of a message in port space `ps`: IB's whole room,
// less the rdma_cm header in the IP port spaces.
inline int Room(uint16_t ps, int room) { return ps == RDMA_PS_IB ? room : room - kCmaHeader; }

// The UD parameters of an event: QPN, Q_Key, the address vector from `src`
// to `dst` (RoCE: the GRH) and, with `m`, its private data.
void FillUd(uint32_t qpn, uint32_t qkey, const Msg* m, const sockaddr_in6& src, const sockaddr_in6& dst,
            rdma_ucm_ud_param* ud);

struct CmId;
// The path record of QUERY_ROUTE for `id`.
void FillPath(const CmId& id, ib_user_path_rec* p);
// INIT_QP_ATTR: the attributes librdmacm applies to move `id`'s QP to
// `state`, from what the two ends exchanged; 0 or EINVAL.
int InitQpAttr(const CmId& id, uint32_t state, ib_uverbs_qp_attr* a);

}  // namespace rdmasan::softnic::cm

#endif  // RDMASAN_SOFTNIC_CM_ABI_H_
