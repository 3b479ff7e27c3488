// softnic raw packet QPs (IBV_QPT_RAW_PACKET): who may create one.  A raw
// packet QP sends and receives whole Ethernet frames, so it exists only on
// the RoCE port (softnic_port=roce; an InfiniBand port answers
// EOPNOTSUPP), and only for a process with CAP_NET_RAW in its effective
// set (EPERM otherwise), as the kernel decides for a real NIC.  The rest
// of a raw QP is a QP's (qp.cc: create, the state machine RESET -> INIT
// with IBV_QP_PORT -> RTR -> RTS with no path attributes, query,
// destroy); its SENDs are steered by flow.cc and wq.cc and delivered by
// datapath.cc.
//
// May not: change the process's capabilities, or cache the answer (a
// process may drop CAP_NET_RAW while it runs).
#include <errno.h>
#include <linux/capability.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "softnic/internal.h"
#include "softnic/softnic.h"

namespace rdmasan::softnic {
namespace {

bool HasCapNetRaw() {
  __user_cap_header_struct hdr{};
  hdr.version = _LINUX_CAPABILITY_VERSION_3;
  hdr.pid = 0;
  __user_cap_data_struct data[_LINUX_CAPABILITY_U32S_3] = {};
  if (syscall(SYS_capget, &hdr, data) != 0) return false;
  return (data[CAP_NET_RAW / 32].effective >> (CAP_NET_RAW % 32)) & 1u;
}

}  // namespace

int RawQpAllowed() {
  if (!PortIsEthernet()) return EOPNOTSUPP;
  if (!HasCapNetRaw()) return EPERM;
  return 0;
}

}  // namespace rdmasan::softnic
