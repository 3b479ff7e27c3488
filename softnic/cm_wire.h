// softnic/cm_wire: what softnic's connection managers (cm.h) of different
// processes exchange and where they find each other: the CM messages (one
// datagram each, validated field by field on receipt), the per-fabric
// folder inside the user's private softnic folder, channel inbox sockets,
// and the port files that say which channel holds a port.
//
// May not: keep state beyond the folder's path, follow a symlink, or use a
// file another user could have made (the folder is 0700 and checked).
#ifndef RDMASAN_SOFTNIC_CM_WIRE_H_
#define RDMASAN_SOFTNIC_CM_WIRE_H_

#include <netinet/in.h>
#include <sys/types.h>

#include <cstdint>
#include <string>

namespace rdmasan::softnic::cm {

inline constexpr uint32_t kMsgMagic = 0x4d43534eu;  // "NSCM"
inline constexpr uint16_t kMsgVersion = 1;
inline constexpr size_t kNameLen = 48;  // an inbox's file name, NUL included
inline constexpr size_t kMaxPrivate = 256;

enum class MsgType : uint16_t {
  kReq = 1,  // connect (RC/UC): to a listener
  kRep,      // accept
  kRtu,      // the active side's ready-to-use
  kRej,      // reject (reason)
  kDreq,     // disconnect request
  kDrep,     // disconnect reply
  kSidrReq,  // UD service id resolution request: to a listener
  kSidrRep,  // its reply (status 0: accepted)
  kMoved,    // the sender's id now lives on another channel (reply_to)
  kLast = kMoved,
};

// One CM message.  `dst_handle` names the receiver's id (for kReq and
// kSidrReq: the listener, from its port file); `src_handle` and `reply_to`
// where answers go.
struct Msg {
  uint32_t magic;
  uint16_t version;
  uint16_t type;
  uint32_t dst_handle;
  uint32_t src_handle;
  char reply_to[kNameLen];
  uint16_t ps;
  uint8_t qp_type;
  uint8_t reason;  // kRej: the IB CM reason; kSidrRep: the SIDR status
  uint32_t qpn;
  uint32_t psn;
  uint32_t qkey;
  uint8_t responder_resources;
  uint8_t initiator_depth;
  uint8_t flow_control;
  uint8_t retry_count;
  uint8_t rnr_retry_count;
  uint8_t srq;
  uint8_t private_data_len;
  uint8_t pad;
  uint8_t private_data[kMaxPrivate];
  sockaddr_in6 src_addr;  // the sender's address (AF_INET or AF_INET6 inside)
  sockaddr_in6 dst_addr;  // the address the sender reached the receiver at
};

// Whether a received datagram of `len` bytes is a well-formed Msg: size,
// magic, version, type, NUL-terminated reply_to of the inbox-name shape,
// private_data_len within bounds, address families known.
bool ValidMsg(const Msg& m, size_t len);

// The folder of fabric `fabric`'s CM names, created on first use; "" (with
// a message printed once) if it cannot be made private.
const std::string& Folder(const std::string& fabric);

// A new inbox: a nonblocking unix datagram socket bound in `folder` under a
// fresh name (returned in *name).  -1 with errno on failure.
int MakeInbox(const std::string& folder, std::string* name);

// Sends `m` to inbox `name` in `folder`; waits (at most about a second) while
// the receiver's queue is full.  0, or an errno (ECONNREFUSED, ENOENT: no
// such inbox any more).
int SendMsg(const std::string& folder, const std::string& name, const Msg& m);

// Port files: who holds port `port` of port space `ps`.
struct PortRecord {
  uint32_t magic;
  uint32_t pid;
  uint32_t handle;     // the id bound to the port
  uint32_t listening;  // 1 once it listens
  char inbox[kNameLen];
};

PortRecord MakePortRecord(uint32_t handle, bool listening, const std::string& inbox);

// Takes the port: returns the held file's fd (kept until Release), or -1
// with errno EADDRINUSE (held by a live process) or another errno.
int ReservePort(const std::string& folder, uint16_t ps, uint16_t port, const PortRecord& rec);
// Rewrites the record of a held port.
void UpdatePort(int fd, const PortRecord& rec);
// Gives the port up.
void ReleasePort(const std::string& folder, uint16_t ps, uint16_t port, int fd);
// The record of a port held by a live process; false if none.
bool LookupPort(const std::string& folder, uint16_t ps, uint16_t port, PortRecord* rec);

// Inboxes nobody has bound and port files nobody holds are swept by
// leftovers.h's SweepCmFolder.

}  // namespace rdmasan::softnic::cm

#endif  // RDMASAN_SOFTNIC_CM_WIRE_H_
