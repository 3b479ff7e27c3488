// softnic device and context: the device list entry, open/close, the
// queries (device, port, GID, P_Key), the process's attachment to the
// fabric, and async events.  See softnic.h for the contract.
//
// Async events and completion-channel wake-ups are datagrams to a unix
// socket in the abstract namespace, named after the receiving object's
// slot and a random generation published in the fabric, so any process on
// the fabric can raise them and a reused slot never receives a stale one.
// Abstract names have no permissions, so the sockets guard themselves:
//  - forging: every socket has SO_PASSCRED, and each datagram whose
//    sender's uid (SCM_CREDENTIALS, filled in by the kernel) is not ours is
//    dropped unread (RecvFromOwner), so another user can neither raise an
//    event nor complete an ibv_get_cq_event;
//  - squatting: the generation is random (getrandom), and a name found
//    bound (EADDRINUSE) is given up for a fresh one, so another user who
//    binds predicted names cannot make ibv_open_device or
//    ibv_create_comp_channel fail.
// What remains: names are listed in /proc/net/unix, so another user can
// fill a socket's receive queue; the owner drops those datagrams when it
// reads, but a wake-up sent while the queue is full is lost.
#include "softnic/softnic.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <new>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "core/options.h"
#include "core/report.h"
#include "softnic/internal.h"
#include "softnic/owned.h"

namespace rdmasan::softnic {

constinit std::atomic<Process*> g_process{nullptr};

namespace {

// The device's EUI-64 GUID (node, system image, GID interface id) starts
// with kVendorId's three bytes, as a NIC's GUID starts with its maker's OUI.
// (It used to start 00:02:c9, Mellanox's OUI: a GUID is how fabric tools
// tell a vendor when they do not ask the device.)
constexpr uint64_t kNodeGuidHost = (uint64_t{kVendorId} << 40) | 0x000000fffe5a0001ull;

// Constant-initialized: the device list can be asked for from another
// library's constructor, before this library's own have run.
constinit ibv_device g_device = {
    .node_type = IBV_NODE_CA,
    .transport_type = IBV_TRANSPORT_IB,
    .name = "softnic0",
    .dev_name = "uverbs-softnic0",
    .dev_path = "/sys/class/infiniband_verbs/uverbs-softnic0",
    .ibdev_path = "/sys/class/infiniband/softnic0",
};

// This process's attachment to the fabric (g_process, internal.h).  A
// child forked after its parent attached gets one of its own on first use
// (a new slot, its own pid for payload moves), as a forked child opens the
// device anew on a NIC; the parent's objects are not the child's (its
// books of them are left as they were, and its mapping of the fabric stays
// unused).
std::mutex g_process_mu;
int g_process_errno = 0;
bool g_exit_hooks = false;  // registered once per address space

void ForgetParentProcess() {
  g_process.store(nullptr, std::memory_order_relaxed);
  g_process_errno = 0;
  new (&g_process_mu) std::mutex();  // another thread may have held it at fork
}

// Detach ignores a forked child, which must leave its parent's slot,
// objects and file alone.
void DetachAtExit() {
  Process* p = g_process.load(std::memory_order_acquire);
  if (p && p->fab) p->fab->Detach();
}

// The process ends with _exit (findings, halt_on_error): no detach, but
// the last user still removes the file.
void RemoveFabricFileAtExit() {
  Process* p = g_process.load(std::memory_order_acquire);
  if (p && p->fab) p->fab->RemoveFileIfLast();
}

struct AsyncMsg {
  uint32_t type, kind, slot, pad;
};

// The abstract-namespace address of `name` (leading NUL, no file to clean
// up); returns its length.
socklen_t AbstractAddr(const std::string& name, sockaddr_un* sa) {
  *sa = {};
  sa->sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(sa->sun_path) - 2);
  memcpy(sa->sun_path + 1, name.data(), n);
  return static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
}

void SendDgram(const std::string& name, const void* data, size_t len) {
  static thread_local int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_un sa;
  socklen_t alen = AbstractAddr(name, &sa);
  sendto(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&sa), alen);
}

// Binds a datagram socket, with SO_PASSCRED on before any datagram can
// arrive, to `name`; -1 with errno set on failure.
int BindDgramSocket(const std::string& name) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  sockaddr_un sa;
  socklen_t len = AbstractAddr(name, &sa);
  if (setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) != 0 ||
      bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// A random generation, never 0 and never `old`.
uint32_t RandomGen(uint32_t old) {
  for (;;) {
    uint32_t g = 0;
    if (getrandom(&g, sizeof(g), GRND_NONBLOCK) != sizeof(g))
      g = static_cast<uint32_t>(NowNs() * 0x9e3779b97f4a7c15ull >> 32) ^ static_cast<uint32_t>(getpid());
    if (g != 0 && g != old) return g;
  }
}

// True if the datagram's ancillary data says its sender runs as our user.
bool FromOwner(msghdr* mh) {
  for (cmsghdr* c = CMSG_FIRSTHDR(mh); c; c = CMSG_NXTHDR(mh, c)) {
    if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_CREDENTIALS) continue;
    ucred cred;
    memcpy(&cred, CMSG_DATA(c), sizeof(cred));
    return cred.uid == getuid() || cred.uid == geteuid();
  }
  return false;
}

int VQueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr, size_t len) {
  if (port != 1) return EINVAL;
  ibv_port_attr a;
  FillPortAttr(&a);
  memcpy(attr, &a, std::min(len, sizeof(a)));
  return 0;
}

int VQueryDeviceEx(ibv_context* ctx, const ibv_query_device_ex_input* input, ibv_device_attr_ex* attr,
                   size_t size) {
  ibv_device_attr_ex a{};
  QueryDevice(ctx, &a.orig_attr);
  a.max_dm_size = kMaxDmSize;  // per process (dm.cc)
  a.device_cap_flags_ex = a.orig_attr.device_cap_flags | kDeviceCapAtomicWrite;
  // Tag matching on RC QPs (tm.cc).
  a.tm_caps.max_rndv_hdr_size = kTmMaxRndvHdr;
  a.tm_caps.max_num_tags = kTmMaxTags;
  a.tm_caps.flags = IBV_TM_CAP_RC;
  a.tm_caps.max_ops = kTmMaxOps;
  a.tm_caps.max_sge = kTmMaxSge;
  // On-demand paging: softnic pins nothing and copies through the owner's
  // address space at each access, so every transport can use ODP MRs for
  // every operation, and implicit ODP covers the whole address space.
  constexpr uint32_t kOdpOps = IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_WRITE |
                               IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC | IBV_ODP_SUPPORT_SRQ_RECV;
  a.odp_caps.general_caps = IBV_ODP_SUPPORT | IBV_ODP_SUPPORT_IMPLICIT;
  a.odp_caps.per_transport_caps.rc_odp_caps = kOdpOps;
  a.odp_caps.per_transport_caps.uc_odp_caps = kOdpOps & ~(IBV_ODP_SUPPORT_READ | IBV_ODP_SUPPORT_ATOMIC);
  a.odp_caps.per_transport_caps.ud_odp_caps =
      IBV_ODP_SUPPORT_SEND | IBV_ODP_SUPPORT_RECV | IBV_ODP_SUPPORT_SRQ_RECV;
  a.xrc_odp_caps = kOdpOps;
  // The port count of devices with more than 255 ports; equal to
  // phys_port_cnt below that (rdma-core's tests assert it).
  a.phys_port_cnt_ex = a.orig_attr.phys_port_cnt;
  // Raw packet QPs on the RoCE port: receive WQs and RSS QPs (wq.cc), no
  // offloads (VLAN stripping, FCS scatter, checksums, delay drop).
  if (PortIsEthernet()) {
    a.raw_packet_caps = 0;
    a.max_wq_type_rq = kMaxQps - 1;
    a.rss_caps.supported_qpts = 1u << IBV_QPT_RAW_PACKET;
    a.rss_caps.max_rwq_indirection_tables = kMaxRss;
    a.rss_caps.max_rwq_indirection_table_size = 1u << kMaxIndTableLog;
    a.rss_caps.rx_hash_fields_mask = IBV_RX_HASH_SRC_IPV4 | IBV_RX_HASH_DST_IPV4 | IBV_RX_HASH_SRC_IPV6 |
                                     IBV_RX_HASH_DST_IPV6 | IBV_RX_HASH_SRC_PORT_TCP |
                                     IBV_RX_HASH_DST_PORT_TCP | IBV_RX_HASH_SRC_PORT_UDP |
                                     IBV_RX_HASH_DST_PORT_UDP;
    a.rss_caps.rx_hash_function = IBV_RX_HASH_FUNC_TOEPLITZ;
  }
  memcpy(attr, &a, std::min(size, sizeof(a)));
  return 0;
}

}  // namespace

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

uint64_t CoarseNowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

Process* AttachProcess() {
  std::lock_guard<std::mutex> g(g_process_mu);
  if (Process* p = g_process.load(std::memory_order_acquire)) return p;
  if (g_process_errno) {  // tried and failed: once per process, as before
    errno = g_process_errno;
    return nullptr;
  }
  auto p = std::make_unique<Process>();
  p->fab = Fabric::Attach(core::GlobalOptions().softnic_fabric);
  if (!p->fab) {
    g_process_errno = errno ? errno : ENODEV;
    core::Diag(absl::StrCat("softnic: cannot attach fabric '", core::GlobalOptions().softnic_fabric,
                            "': ", strerror(g_process_errno)));
    errno = g_process_errno;
    return nullptr;
  }
  p->pid = getpid();
  if (!g_exit_hooks) {
    g_exit_hooks = true;
    atexit(DetachAtExit);
    core::AddBeforeExitHook(RemoveFabricFileAtExit);
    pthread_atfork(nullptr, nullptr, ForgetParentProcess);
  }
  g_process.store(p.get(), std::memory_order_release);
  return p.release();  // the process's for life
}

std::string FabricName() {
  Process* p = GetProcess();
  return p ? p->fab->name() : std::string();
}

int MakeEventSocket(Fabric* f, EventSocket kind, uint32_t slot, uint32_t* gen) {
  // Each try picks an unpredictable name; a taken one is someone's squat
  // (or a one-in-four-billion clash), and the next try gets another.
  constexpr int kTries = 64;
  for (int i = 0; i < kTries; ++i) {
    *gen = RandomGen(*gen);
    int fd =
        BindDgramSocket(kind == EventSocket::kAsync ? f->AsyncAddr(slot, *gen) : f->ChannelAddr(slot, *gen));
    if (fd >= 0 || errno != EADDRINUSE) return fd;
  }
  return -1;
}

ssize_t RecvFromOwner(int fd, void* buf, size_t len, int flags) {
  for (;;) {
    iovec iov{buf, len};
    alignas(cmsghdr) char cbuf[CMSG_SPACE(sizeof(ucred))];
    msghdr mh{};
    mh.msg_iov = &iov;
    mh.msg_iovlen = 1;
    mh.msg_control = cbuf;
    mh.msg_controllen = sizeof(cbuf);
    ssize_t n = recvmsg(fd, &mh, flags | MSG_CMSG_CLOEXEC);
    if (n < 0 || FromOwner(&mh)) return n;
    // Another user's datagram (or one without credentials): dropped.
  }
}

void SendChannelEvent(Process* p, uint32_t channel, uint32_t gen, const uint32_t msg[2]) {
  if (channel >= kMaxChannels) return;
  ShmChannel& c = p->fab->hdr()->channels[channel];
  uint32_t spinning = kChanSpinning;
  if (c.in_use && c.gen == gen && msg[0] < kMaxCqs &&
      c.spin.compare_exchange_strong(spinning, kChanDelivered, std::memory_order_acq_rel)) {
    // Its waiter spins in ibv_get_cq_event: the event goes in the mailbox.
    c.mail.store(kMailValid | uint64_t{msg[1]} << 32 | msg[0], std::memory_order_release);
  } else {
    SendDgram(p->fab->ChannelAddr(channel, gen), msg, 2 * sizeof(uint32_t));
    c.dgrams.fetch_add(1, std::memory_order_release);
  }
  c.events.fetch_add(1, std::memory_order_release);
}

void RaiseAsyncLocked(Process* p, uint32_t ctx_slot, uint32_t type, uint32_t kind, uint32_t slot) {
  if (ctx_slot >= kMaxContexts) return;
  ShmContext& c = p->fab->hdr()->ctxs[ctx_slot];
  if (!c.in_use) return;
  AsyncMsg m{type, kind, slot, 0};
  SendDgram(p->fab->AsyncAddr(ctx_slot, c.gen), &m, sizeof(m));
}

ibv_device* Device() { return &g_device; }
bool IsDevice(const ibv_device* dev) { return dev == &g_device; }
bool IsContext(const ibv_context* ctx) { return ctx && ctx->device == &g_device; }
__be64 DeviceGuid() { return htobe64(kNodeGuidHost); }

ibv_context* OpenDevice(ibv_device* dev) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto c = NewOwned<SnContext>();
  if (!c) {
    errno = ENOMEM;
    return nullptr;
  }
  memset(&c->vctx, 0, sizeof(c->vctx));
  verbs_context& v = c->vctx;
  v.sz = sizeof(verbs_context);
  v.query_port = VQueryPort;
  v.query_device_ex = VQueryDeviceEx;
  v.create_cq_ex = VCreateCqEx;
  v.create_qp_ex = VCreateQpEx;
  v.advise_mr = AdviseMr;
  InstallDmDomainOps(&v);
  InstallXrcOps(&v);
  InstallFlowOps(&v);
  InstallWqOps(&v);
  ibv_context& ctx = v.context;
  ctx.device = dev;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.ops.poll_cq = PollCqOp;
  ctx.ops.req_notify_cq = ReqNotifyCqOp;
  ctx.ops.post_send = PostSendOp;
  ctx.ops.post_recv = PostRecvOp;
  ctx.ops.post_srq_recv = PostSrqRecvOp;
  ctx.ops.alloc_mw = AllocMw;
  ctx.ops.dealloc_mw = DeallocMw;
  ctx.ops.bind_mw = BindMw;
  // A memfd of its own: its identity names the context to ibv_import_device
  // (import.cc), which a dup of /dev/null could not.
  ctx.cmd_fd = memfd_create("softnic-context", MFD_CLOEXEC);
  // Until the context is the program's, a failure gives back what it holds
  // (errno stays the failure's).
  absl::Cleanup give_back = [&ctx] {
    const int e = errno;
    close(ctx.cmd_fd);
    pthread_mutex_destroy(&ctx.mutex);
    errno = e;
  };
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    uint32_t slot = FreeSlot(h->ctxs);
    if (slot == kNone) {
      errno = ENOMEM;
      return nullptr;
    }
    // Bound before the generation is published: no event goes to a name
    // that is not ours yet.
    uint32_t gen = h->ctxs[slot].gen;
    ctx.async_fd = MakeEventSocket(p->fab, EventSocket::kAsync, slot, &gen);
    if (ctx.async_fd < 0) return nullptr;
    h->ctxs[slot].in_use = 1;
    h->ctxs[slot].proc = p->fab->self_proc();
    h->ctxs[slot].gen = gen;
    c->slot = slot;
    c->gen = gen;
    p->ctxs[slot] = c.release();  // the program's handle now
  }
  std::move(give_back).Cancel();
  return &ctx;
}

int CloseDevice(ibv_context* ctx) {
  Process* p = GetProcess();
  SnContext* c = Ctx(ctx);
  if (p) {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    p->fab->hdr()->ctxs[c->slot].in_use = 0;
    p->ctxs[c->slot] = nullptr;
  }
  if (ctx->async_fd >= 0) close(ctx->async_fd);
  if (ctx->cmd_fd >= 0) close(ctx->cmd_fd);
  pthread_mutex_destroy(&ctx->mutex);
  delete c;
  return 0;
}

int QueryDevice(ibv_context* ctx, ibv_device_attr* a) {
  memset(a, 0, sizeof(*a));
  snprintf(a->fw_ver, sizeof(a->fw_ver), "%s", "1.0.0");
  a->node_guid = DeviceGuid();
  a->sys_image_guid = DeviceGuid();
  a->max_mr_size = 1ull << 40;
  a->page_size_cap = 0xfffff000;
  a->vendor_id = kVendorId;
  a->vendor_part_id = kVendorPartId;
  a->hw_ver = 0;
  a->max_qp = kMaxQps - 1;
  a->max_qp_wr = kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SHUTDOWN_PORT | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_N_NOTIFY_CQ |
                        IBV_DEVICE_MEM_WINDOW | IBV_DEVICE_MEM_WINDOW_TYPE_2B | IBV_DEVICE_XRC;
  a->max_sge = kMaxSge;
  a->max_sge_rd = kMaxSge;
  a->max_cq = kMaxCqs - 1;
  a->max_cqe = kMaxCqe;
  a->max_mr = kMaxMrs - 1;
  a->max_pd = 0xffff;
  a->max_qp_rd_atom = 16;
  a->max_ee_rd_atom = 0;
  a->max_res_rd_atom = 16 * (kMaxQps - 1);
  a->max_qp_init_rd_atom = 16;
  a->max_ee_init_rd_atom = 0;
  a->atomic_cap = IBV_ATOMIC_HCA;
  a->max_ee = 0;
  a->max_rdd = 0;
  a->max_mw = kMaxMws - 1;
  a->max_raw_ipv6_qp = 0;
  a->max_raw_ethy_qp = PortIsEthernet() ? kMaxQps - 1 : 0;  // raw packet QPs: RoCE only
  a->max_mcast_grp = kMaxMcastGroups;
  a->max_mcast_qp_attach = kMaxMcastQpsPerGroup;
  a->max_total_mcast_qp_attach = kMaxMcastAttach;
  a->max_ah = 0xffff;
  a->max_fmr = 0;
  a->max_map_per_fmr = 0;
  a->max_srq = kMaxSrqs - 1;
  a->max_srq_wr = kMaxQpWr;
  a->max_srq_sge = kMaxSge;
  a->max_pkeys = 1;
  a->local_ca_ack_delay = 15;
  a->phys_port_cnt = 1;
  return 0;
}

int QueryPkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey) {
  if (port != 1 || index != 0) {
    errno = EINVAL;
    return -1;
  }
  *pkey = htobe16(0xffff);
  return 0;
}

int GetPkeyIndex(ibv_context* ctx, uint8_t port, __be16 pkey) {
  if (port == 1 && be16toh(pkey) == 0xffff) return 0;
  errno = ENOENT;
  return -1;
}

int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event) {
  Process* p = GetProcess();
  if (!p) return -1;
  for (;;) {
    AsyncMsg m;
    ssize_t n = RecvFromOwner(ctx->async_fd, &m, sizeof(m), 0);
    if (n < 0) return -1;
    if (n != sizeof(m)) continue;
    memset(event, 0, sizeof(*event));
    event->event_type = static_cast<ibv_event_type>(m.type);
    std::lock_guard<std::mutex> g(p->mu);
    switch (m.kind) {
      case kObjCq:
        if (m.slot >= kMaxCqs || !p->cqs[m.slot]) continue;
        event->element.cq = ibv_cq_ex_to_cq(&p->cqs[m.slot]->cqx);
        return 0;
      case kObjQp:
        if (m.slot >= kMaxQps || !p->qps[m.slot]) continue;
        event->element.qp = &p->qps[m.slot]->qpx.qp_base;
        return 0;
      case kObjSrq:
        if (m.slot >= kMaxSrqs || !p->srqs[m.slot]) continue;
        event->element.srq = &p->srqs[m.slot]->srq;
        return 0;
      default:
        event->element.port_num = 1;
        return 0;
    }
  }
}

void AckAsyncEvent(ibv_async_event* event) {}

}  // namespace rdmasan::softnic
