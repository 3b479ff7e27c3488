// softnic/cm: the RDMA connection manager's character device
// (/dev/infiniband/rdma_cm) for softnic, so the real, unmodified
// librdmacm — and everything built on it: rdma_cm tools, rsockets,
// perftest -R, libfabric's verbs provider — connects softnic QPs.
//
// librdmacm talks to the kernel's rdma_ucm module by write(2) commands on
// that device (the ABI of <rdma/rdma_user_cm.h>, Linux's stable user-space
// interface): create an id, bind, resolve, listen, connect, accept, get an
// event.  The interpose layer opens an emulated device instead when softnic
// is the device the process sees, and hands every write, fstat and close of
// that fd here.  Each open is one event channel: an epoll fd the program
// polls, over a unix datagram socket (the channel's inbox, where other
// processes' CM messages land) and an eventfd (events this process raised
// itself: resolutions, rejections it can tell at once).  Connection
// establishment follows the IB CM exchange (REQ, REP, RTU, REJ, DREQ, DREP,
// SIDR for UD) between channels; the QP attributes librdmacm asks for at
// each state transition come from what the two ends exchanged (QPN, PSN,
// responder resources, initiator depth, retry counts).
//
// Multicast (JOIN_MCAST, JOIN_IP_MCAST, LEAVE_MCAST): a UD id joins at
// once, as if the SA answered: the join event carries the group's address
// vector (the MGID the kernel maps the IP group to on an InfiniBand port,
// a multicast LID every process derives alike from it), QPN 0xFFFFFF and
// the Q_Key.  Membership itself is the QP's: librdmacm attaches the id's
// QP on the join event (ibv_attach_mcast, softnic/mcast.cc), and the
// fabric carries it to every process.
//
// Names a peer must find live in a per-user private folder (softnic's
// user directory, user_dir.h; one subfolder cm-<fabric> per fabric): each
// channel's inbox socket, and one file per bound port (p<ps>-<port>,
// created O_EXCL, held with flock so a dead owner's file is recognised and
// replaced).  What dead processes leave there is swept (leftovers.h).  Every
// message read from an inbox and every port file is validated before use.
// All addresses of this host (loopback, the interfaces' own) are softnic0's;
// a port is one per port space, whatever the address it is bound to.
//
// May not: block while holding its lock, trust a message's or a port file's
// fields before checking them, touch a QP (librdmacm modifies its QPs
// itself, through the checked verbs), or start threads: messages are read
// when the program asks for an event.
#ifndef RDMASAN_SOFTNIC_CM_H_
#define RDMASAN_SOFTNIC_CM_H_

#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>

namespace rdmasan::softnic::cm {

// The path librdmacm opens.
inline constexpr char kDevicePath[] = "/dev/infiniband/rdma_cm";

// Opens an emulated rdma_cm device: a new event channel.  `flags` are
// open(2)'s (O_NONBLOCK, O_CLOEXEC are honoured).  Returns the fd, or -1
// with errno set.
int Open(int flags);

// Whether `fd` is an open emulated channel.  Cheap when none is open.
extern std::atomic<int> g_open_channels;
bool IsChannelSlow(int fd);
inline bool IsChannel(int fd) {
  return g_open_channels.load(std::memory_order_relaxed) != 0 && IsChannelSlow(fd);
}

// One command written to channel `fd`: returns `len` on success, or -1
// with errno set, as the kernel's rdma_ucm does.
ssize_t Write(int fd, const void* buf, size_t len);

// fstat of a channel: a character device, as the kernel's node is.
void Stat(int fd, struct stat* st);

// The channel is being closed: its ids are destroyed (their peers are told,
// as when the kernel releases the file).  The caller closes the fd.
void Close(int fd);

}  // namespace rdmasan::softnic::cm

#endif  // RDMASAN_SOFTNIC_CM_H_
