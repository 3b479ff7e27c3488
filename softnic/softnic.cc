// softnic control path: device, context, queries, PD, MR, CQ, channels, SRQ,
// QP state machine, AH, async events.  See softnic.h for the contract.
#include "softnic/softnic.h"

#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <new>

#include "core/options.h"
#include "softnic/internal.h"

namespace rdmasan::softnic {
namespace {

constexpr uint64_t kNodeGuidHost = 0x0002c9fffe5a0001ull;
constexpr uint16_t kLid = 1;
constexpr uint32_t kGidTableLen = 4;

ibv_device g_device = [] {
  ibv_device d{};
  d.node_type = IBV_NODE_CA;
  d.transport_type = IBV_TRANSPORT_IB;
  snprintf(d.name, sizeof(d.name), "softnic0");
  snprintf(d.dev_name, sizeof(d.dev_name), "uverbs-softnic0");
  snprintf(d.dev_path, sizeof(d.dev_path), "/sys/class/infiniband_verbs/uverbs-softnic0");
  snprintf(d.ibdev_path, sizeof(d.ibdev_path), "/sys/class/infiniband/softnic0");
  return d;
}();

Process* g_process = nullptr;
std::once_flag g_process_once;
int g_process_errno = 0;

void DetachAtExit() {
  if (g_process && g_process->fab) g_process->fab->Detach();
}

ibv_gid GidAt(uint32_t index) {
  ibv_gid g{};
  g.global.subnet_prefix = htobe64(0xfe80000000000000ull);
  g.global.interface_id = htobe64(kNodeGuidHost + index);
  return g;
}

int MakeDgramSocket(const std::string& name) {
  int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  // Abstract namespace: leading NUL, no file to clean up.
  size_t n = std::min(name.size(), sizeof(sa.sun_path) - 2);
  memcpy(sa.sun_path + 1, name.data(), n);
  socklen_t len = offsetof(sockaddr_un, sun_path) + 1 + n;
  if (bind(fd, reinterpret_cast<sockaddr*>(&sa), len) != 0) {
    int e = errno;
    close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

struct AsyncMsg {
  uint32_t type, kind, slot, pad;
};

void SendDgram(const std::string& name, const void* data, size_t len) {
  static thread_local int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return;
  sockaddr_un sa{};
  sa.sun_family = AF_UNIX;
  size_t n = std::min(name.size(), sizeof(sa.sun_path) - 2);
  memcpy(sa.sun_path + 1, name.data(), n);
  socklen_t alen = offsetof(sockaddr_un, sun_path) + 1 + n;
  sendto(fd, data, len, MSG_DONTWAIT | MSG_NOSIGNAL, reinterpret_cast<sockaddr*>(&sa), alen);
}

template <typename T, size_t N>
uint32_t FreeSlot(T (&table)[N], uint32_t first = 0) {
  for (uint32_t i = first; i < N; ++i)
    if (!table[i].in_use) return i;
  return kNone;
}

uint32_t PdId(ibv_pd* pd) { return reinterpret_cast<SnPd*>(pd)->id; }

void FillPortAttr(ibv_port_attr* a) {
  memset(a, 0, sizeof(*a));
  a->state = IBV_PORT_ACTIVE;
  a->max_mtu = IBV_MTU_4096;
  a->active_mtu = IBV_MTU_4096;
  a->gid_tbl_len = kGidTableLen;
  a->port_cap_flags = IBV_PORT_SM | IBV_PORT_SYS_IMAGE_GUID_SUP;
  a->max_msg_sz = 1u << 31;
  a->bad_pkey_cntr = 0;
  a->qkey_viol_cntr = 0;
  a->pkey_tbl_len = 1;
  a->lid = kLid;
  a->sm_lid = kLid;
  a->lmc = 0;
  a->max_vl_num = 1;
  a->sm_sl = 0;
  a->subnet_timeout = 18;
  a->init_type_reply = 0;
  a->active_width = 2;   // 4X
  a->active_speed = 32;  // EDR
  a->phys_state = 5;     // LinkUp
  a->link_layer = IBV_LINK_LAYER_INFINIBAND;
  a->flags = 0;
  a->port_cap_flags2 = 0;
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
  a.max_dm_size = 0;
  memcpy(attr, &a, std::min(size, sizeof(a)));
  return 0;
}

ibv_cq_ex* VCreateCqEx(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
ibv_qp* VCreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr);

// Allowed attribute masks per transition (IB spec 11.2.4.2), for RC/UC/UD.
struct Transition {
  int required[3];  // UD, UC, RC
  int optional[3];
};

int TypeIndex(uint32_t type) { return type == IBV_QPT_UD ? 0 : type == IBV_QPT_UC ? 1 : 2; }

bool TransitionAllowed(ibv_qp_state cur, ibv_qp_state next, uint32_t type, int mask) {
  mask &= ~IBV_QP_STATE;
  const int t = TypeIndex(type);
  if (next == IBV_QPS_RESET || next == IBV_QPS_ERR) return (mask & ~IBV_QP_CUR_STATE) == 0 || true;
  Transition tr{};
  bool ok = true;
  switch (cur) {
    case IBV_QPS_RESET:
      if (next != IBV_QPS_INIT) return false;
      tr.required[0] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
      tr.required[1] = tr.required[2] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      break;
    case IBV_QPS_INIT:
      if (next == IBV_QPS_INIT) {
        tr.optional[0] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY;
        tr.optional[1] = tr.optional[2] = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
      } else if (next == IBV_QPS_RTR) {
        tr.required[1] = IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
        tr.required[2] = tr.required[1] | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        tr.optional[0] = IBV_QP_PKEY_INDEX | IBV_QP_QKEY;
        tr.optional[1] = tr.optional[2] = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
      } else {
        ok = false;
      }
      break;
    case IBV_QPS_RTR:
      if (next != IBV_QPS_RTS) return false;
      tr.required[0] = tr.required[1] = IBV_QP_SQ_PSN;
      tr.required[2] = IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC;
      tr.optional[0] = IBV_QP_CUR_STATE | IBV_QP_QKEY;
      tr.optional[1] = IBV_QP_CUR_STATE | IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PATH_MIG_STATE;
      tr.optional[2] = tr.optional[1] | IBV_QP_MIN_RNR_TIMER;
      break;
    case IBV_QPS_RTS:
    case IBV_QPS_SQD:
    case IBV_QPS_SQE:
      if (next != IBV_QPS_RTS && next != IBV_QPS_SQD) return false;
      if (cur == IBV_QPS_SQE && next != IBV_QPS_RTS) return false;
      tr.optional[0] = IBV_QP_CUR_STATE | IBV_QP_QKEY | IBV_QP_SQ_PSN | IBV_QP_PKEY_INDEX | IBV_QP_EN_SQD_ASYNC_NOTIFY;
      tr.optional[1] = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH | IBV_QP_PATH_MIG_STATE |
                       IBV_QP_AV | IBV_QP_PKEY_INDEX | IBV_QP_EN_SQD_ASYNC_NOTIFY;
      tr.optional[2] = tr.optional[1] | IBV_QP_MIN_RNR_TIMER | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                       IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MTU;
      break;
    default:
      ok = false;
  }
  if (!ok) return false;
  if ((mask & tr.required[t]) != tr.required[t]) return false;
  if (mask & ~(tr.required[t] | tr.optional[t])) return false;
  return true;
}

}  // namespace

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

Process* GetProcess() {
  std::call_once(g_process_once, [] {
    auto* p = new Process();
    p->fab = Fabric::Attach(core::GlobalOptions().softnic_fabric);
    if (!p->fab) {
      g_process_errno = errno;
      fprintf(stderr, "==%d==rdmasan: softnic: cannot attach fabric '%s': %s\n", getpid(),
              core::GlobalOptions().softnic_fabric.c_str(), strerror(errno));
      delete p;
      return;
    }
    p->pid = getpid();
    g_process = p;
    atexit(DetachAtExit);
  });
  if (!g_process) errno = g_process_errno ? g_process_errno : ENODEV;
  return g_process;
}

std::string FabricName() {
  Process* p = GetProcess();
  return p ? p->fab->name() : std::string();
}

void SendChannelEvent(Process* p, uint32_t channel, uint32_t gen, const void* msg, size_t len) {
  SendDgram(p->fab->ChannelAddr(channel, gen), msg, len);
}

void RaiseAsyncLocked(Process* p, uint32_t ctx_slot, uint32_t type, uint32_t kind, uint32_t slot) {
  if (ctx_slot >= kMaxContexts) return;
  ShmContext& c = p->fab->hdr()->ctxs[ctx_slot];
  if (!c.in_use) return;
  AsyncMsg m{type, kind, slot, 0};
  SendDgram(p->fab->AsyncAddr(ctx_slot, c.gen), &m, sizeof(m));
}

// ---------------------------------------------------------------- device --

ibv_device* Device() { return &g_device; }
bool IsDevice(const ibv_device* dev) { return dev == &g_device; }
bool IsContext(const ibv_context* ctx) { return ctx && ctx->device == &g_device; }
__be64 DeviceGuid() { return htobe64(kNodeGuidHost); }

ibv_context* OpenDevice(ibv_device* dev) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto* c = new (std::nothrow) SnContext();
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
  ibv_context& ctx = v.context;
  ctx.device = dev;
  ctx.abi_compat = __VERBS_ABI_IS_EXTENDED;
  ctx.num_comp_vectors = 1;
  pthread_mutex_init(&ctx.mutex, nullptr);
  ctx.ops.poll_cq = PollCq;
  ctx.ops.req_notify_cq = ReqNotifyCq;
  ctx.ops.post_send = PostSend;
  ctx.ops.post_recv = PostRecv;
  ctx.ops.post_srq_recv = PostSrqRecv;
  ctx.cmd_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    uint32_t slot = FreeSlot(h->ctxs);
    if (slot == kNone) {
      close(ctx.cmd_fd);
      delete c;
      errno = ENOMEM;
      return nullptr;
    }
    h->ctxs[slot].in_use = 1;
    h->ctxs[slot].proc = p->fab->self_proc();
    h->ctxs[slot].gen++;
    c->slot = slot;
    c->gen = h->ctxs[slot].gen;
    p->ctxs[slot] = c;
  }
  ctx.async_fd = MakeDgramSocket(p->fab->AsyncAddr(c->slot, c->gen));
  if (ctx.async_fd < 0) {
    int e = errno;
    CloseDevice(&ctx);
    errno = e;
    return nullptr;
  }
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
  a->vendor_id = 0;
  a->vendor_part_id = 0;
  a->hw_ver = 0;
  a->max_qp = kMaxQps - 1;
  a->max_qp_wr = kMaxQpWr;
  a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_SHUTDOWN_PORT | IBV_DEVICE_PORT_ACTIVE_EVENT |
                        IBV_DEVICE_SYS_IMAGE_GUID | IBV_DEVICE_SRQ_RESIZE | IBV_DEVICE_N_NOTIFY_CQ;
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
  a->max_mw = 0;
  a->max_raw_ipv6_qp = 0;
  a->max_raw_ethy_qp = 0;
  a->max_mcast_grp = 0;
  a->max_mcast_qp_attach = 0;
  a->max_total_mcast_qp_attach = 0;
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

int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr) {
  return VQueryPort(ctx, port, attr, sizeof(*attr));
}

int QueryGid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid) {
  if (port != 1 || index < 0 || index >= static_cast<int>(kGidTableLen)) {
    errno = EINVAL;
    return -1;
  }
  *gid = GidAt(index);
  return 0;
}

int QueryGidEx(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
               size_t entry_size) {
  if (flags) return EINVAL;
  if (port != 1 || index >= kGidTableLen) return EINVAL;
  if (entry_size < sizeof(ibv_gid_entry)) return EINVAL;
  memset(entry, 0, entry_size);
  entry->gid = GidAt(index);
  entry->gid_index = index;
  entry->port_num = port;
  entry->gid_type = IBV_GID_TYPE_IB;
  entry->ndev_ifindex = 0;
  return 0;
}

ssize_t QueryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t max, uint32_t flags, size_t entry_size) {
  if (flags || entry_size < sizeof(ibv_gid_entry)) return -EINVAL;
  if (max < kGidTableLen) return -EINVAL;
  for (uint32_t i = 0; i < kGidTableLen; ++i) {
    auto* e = reinterpret_cast<ibv_gid_entry*>(reinterpret_cast<uint8_t*>(entries) + i * entry_size);
    QueryGidEx(ctx, 1, i, e, 0, entry_size);
  }
  return kGidTableLen;
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
    ssize_t n = recv(ctx->async_fd, &m, sizeof(m), 0);
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

// -------------------------------------------------------------- PD / MR --

ibv_pd* AllocPd(ibv_context* ctx) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto* pd = new (std::nothrow) SnPd();
  if (!pd) {
    errno = ENOMEM;
    return nullptr;
  }
  pd->pd.context = ctx;
  FabricLock lock(p->fab);
  pd->id = p->fab->hdr()->next_pd++;
  if (pd->id == 0) pd->id = p->fab->hdr()->next_pd++;
  pd->pd.handle = pd->id;
  return &pd->pd;
}

int DeallocPd(ibv_pd* pd) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  const uint32_t id = PdId(pd);
  {
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    const uint32_t me = p->fab->self_proc();
    for (auto& m : h->mrs)
      if (m.in_use && m.proc == me && m.pd == id) return EBUSY;
    for (auto& q : h->qps)
      if (q.in_use && q.proc == me && q.pd == id) return EBUSY;
    for (auto& s : h->srqs)
      if (s.in_use && s.proc == me && s.pd == id) return EBUSY;
  }
  delete reinterpret_cast<SnPd*>(pd);
  return 0;
}

ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  constexpr unsigned kSupported = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
                                  IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_RELAXED_ORDERING |
                                  IBV_ACCESS_OPTIONAL_RANGE;
  if (access & ~kSupported) {
    errno = (access & (IBV_ACCESS_ON_DEMAND | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | IBV_ACCESS_HUGETLB))
                ? EOPNOTSUPP
                : EINVAL;
    return nullptr;
  }
  // Remote write/atomic require local write (IB spec 10.6.3.1).
  if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
    errno = EINVAL;
    return nullptr;
  }
  if (length == 0 || length > (1ull << 40) || (!addr && length)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* mr = new (std::nothrow) SnMr();
  if (!mr) {
    errno = ENOMEM;
    return nullptr;
  }
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->mrs, 1);
  if (slot == kNone) {
    delete mr;
    errno = ENOMEM;
    return nullptr;
  }
  ShmMr& m = h->mrs[slot];
  uint32_t gen = ((m.key & 0xff) + 1) & 0xff;
  if (gen == 0) gen = 1;
  m.in_use = 1;
  m.proc = p->fab->self_proc();
  m.key = slot << 8 | gen;
  m.pd = PdId(pd);
  m.addr = reinterpret_cast<uint64_t>(addr);
  m.length = length;
  m.iova = iova;
  m.access = access;
  mr->slot = slot;
  mr->mr.context = pd->context;
  mr->mr.pd = pd;
  mr->mr.addr = addr;
  mr->mr.length = length;
  mr->mr.handle = slot;
  mr->mr.lkey = m.key;
  mr->mr.rkey = m.key;
  return &mr->mr;
}

int DeregMr(ibv_mr* ibmr) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  auto* mr = reinterpret_cast<SnMr*>(ibmr);
  {
    FabricLock lock(p->fab);
    ShmMr& m = p->fab->hdr()->mrs[mr->slot];
    if (!m.in_use || m.key != ibmr->lkey) return EINVAL;
    m.in_use = 0;  // keep the key: the next registration of the slot bumps it
  }
  delete mr;
  return 0;
}

int ReregMr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  errno = EOPNOTSUPP;
  return IBV_REREG_MR_ERR_INPUT;
}

// -------------------------------------------------------- channels / CQs --

ibv_comp_channel* CreateCompChannel(ibv_context* ctx) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto* ch = new (std::nothrow) SnChannel();
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  {
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    uint32_t slot = FreeSlot(h->channels);
    if (slot == kNone) {
      delete ch;
      errno = EMFILE;
      return nullptr;
    }
    h->channels[slot].in_use = 1;
    h->channels[slot].proc = p->fab->self_proc();
    h->channels[slot].gen++;
    ch->slot = slot;
    ch->gen = h->channels[slot].gen;
  }
  ch->ch.context = ctx;
  ch->ch.refcnt = 0;
  ch->ch.fd = MakeDgramSocket(p->fab->ChannelAddr(ch->slot, ch->gen));
  if (ch->ch.fd < 0) {
    int e = errno;
    FabricLock lock(p->fab);
    p->fab->hdr()->channels[ch->slot].in_use = 0;
    delete ch;
    errno = e;
    return nullptr;
  }
  return &ch->ch;
}

int DestroyCompChannel(ibv_comp_channel* ibch) {
  Process* p = GetProcess();
  auto* ch = reinterpret_cast<SnChannel*>(ibch);
  if (ibch->refcnt) return EBUSY;
  if (p) {
    FabricLock lock(p->fab);
    p->fab->hdr()->channels[ch->slot].in_use = 0;
  }
  close(ibch->fd);
  delete ch;
  return 0;
}

namespace {

ibv_cq_ex* CreateCqCommon(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ibch, uint32_t vector,
                          uint64_t wc_flags) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (cqe < 1 || cqe > static_cast<int>(kMaxCqe) || vector >= 1 || (ibch && ibch->context != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* cq = new (std::nothrow) SnCq();
  if (!cq) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t nslots = 1;
  while (nslots < static_cast<uint32_t>(cqe) + 1) nslots <<= 1;
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->cqs);
  uint64_t ring = slot == kNone ? 0 : p->fab->Alloc(uint64_t(nslots) * sizeof(ShmCqe));
  if (slot == kNone || !ring) {
    delete cq;
    errno = ENOMEM;
    return nullptr;
  }
  ShmCq& s = h->cqs[slot];
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.gen++;
  s.ctx = Ctx(ctx)->slot;
  s.channel = ibch ? reinterpret_cast<SnChannel*>(ibch)->slot : kNone;
  s.channel_gen = ibch ? reinterpret_cast<SnChannel*>(ibch)->gen : 0;
  s.cqe = cqe;
  s.nslots = nslots;
  s.ring_off = ring;
  s.prod = 0;
  s.overrun = 0;
  s.attention.store(0);
  s.cons.store(0);
  s.armed.store(0);
  cq->slot = slot;
  cq->shm = &s;
  cq->ring = p->fab->At<ShmCqe>(ring);
  ibv_cq_ex& x = cq->cqx;
  x.context = ctx;
  x.channel = ibch;
  x.cq_context = cq_context;
  x.handle = slot;
  x.cqe = cqe;
  pthread_mutex_init(&x.mutex, nullptr);
  pthread_cond_init(&x.cond, nullptr);
  InstallCqExOps(cq);
  if (ibch) ++ibch->refcnt;
  p->cqs[slot] = cq;
  return &cq->cqx;
}

ibv_cq_ex* VCreateCqEx(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  constexpr uint64_t kFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                              IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                              IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                              IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK;
  if (attr->wc_flags & ~kFlags) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS)) {
    errno = EINVAL;
    return nullptr;
  }
  return CreateCqCommon(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector, attr->wc_flags);
}

}  // namespace

ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch, int vector) {
  if (vector < 0) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq_ex* x = CreateCqCommon(ctx, cqe, cq_context, ch, vector, 0);
  return x ? ibv_cq_ex_to_cq(x) : nullptr;
}

int ResizeCq(ibv_cq* cq, int cqe) { return EOPNOTSUPP; }

int DestroyCq(ibv_cq* ibcq) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnCq* cq = Cq(ibcq);
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    for (auto& q : h->qps)
      if (q.in_use && (q.send_cq == cq->slot || q.recv_cq == cq->slot) && q.proc == p->fab->self_proc())
        return EBUSY;
    p->fab->Free(cq->shm->ring_off);
    cq->shm->in_use = 0;
    p->cqs[cq->slot] = nullptr;
  }
  if (ibcq->channel) --ibcq->channel->refcnt;
  pthread_mutex_destroy(&ibcq->mutex);
  pthread_cond_destroy(&ibcq->cond);
  delete cq;
  return 0;
}

int GetCqEvent(ibv_comp_channel* ibch, ibv_cq** cq_out, void** ctx_out) {
  Process* p = GetProcess();
  if (!p) return -1;
  const bool nonblock = fcntl(ibch->fd, F_GETFL) & O_NONBLOCK;
  for (;;) {
    uint32_t msg[2];
    ssize_t n = recv(ibch->fd, msg, sizeof(msg), MSG_DONTWAIT);
    if (n == sizeof(msg)) {
      SnCq* cq = nullptr;
      {
        std::lock_guard<std::mutex> g(p->mu);
        if (msg[0] < kMaxCqs) cq = p->cqs[msg[0]];
      }
      if (!cq || cq->cqx.channel != ibch || cq->shm->gen != msg[1]) continue;  // stale
      ++cq->events_reported;
      *cq_out = ibv_cq_ex_to_cq(&cq->cqx);
      *ctx_out = cq->cqx.cq_context;
      return 0;
    }
    if (n >= 0) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (nonblock) return -1;
    // Block, but wake now and then to drive RNR retries and notice dead
    // peers of the QPs whose completions this channel reports.
    pollfd pfd{ibch->fd, POLLIN, 0};
    int r = poll(&pfd, 1, 20);
    if (r < 0 && errno != EINTR) return -1;
    if (r == 0) {
      std::vector<SnCq*> mine;
      {
        std::lock_guard<std::mutex> g(p->mu);
        for (SnCq* c : p->cqs)
          if (c && c->cqx.channel == ibch) mine.push_back(c);
      }
      for (SnCq* c : mine) ProgressCq(p, c);
    }
  }
}

void AckCqEvents(ibv_cq* cq, unsigned n) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += n;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

// ------------------------------------------------------------------ SRQ --

namespace {

bool InitRq(Fabric* f, ShmRq* rq, uint32_t max_wr, uint32_t max_sge) {
  rq->max_wr = max_wr;
  rq->max_sge = max_sge ? max_sge : 1;
  rq->stride = sizeof(ShmRecvWqe) + rq->max_sge * sizeof(ShmSge);
  rq->nslots = max_wr ? max_wr : 1;
  rq->head = rq->tail = 0;
  rq->ring_off = f->Alloc(uint64_t(rq->nslots) * rq->stride);
  return rq->ring_off != 0;
}

}  // namespace

ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* attr) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (attr->attr.max_wr < 1 || attr->attr.max_wr > kMaxQpWr || attr->attr.max_sge > kMaxSge ||
      attr->attr.srq_limit > attr->attr.max_wr) {
    errno = EINVAL;
    return nullptr;
  }
  auto* srq = new (std::nothrow) SnSrq();
  if (!srq) {
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->srqs);
  if (slot == kNone || !InitRq(p->fab, &h->srqs[slot].rq, attr->attr.max_wr, attr->attr.max_sge)) {
    delete srq;
    errno = ENOMEM;
    return nullptr;
  }
  ShmSrq& s = h->srqs[slot];
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.gen++;
  s.ctx = Ctx(pd->context)->slot;
  s.pd = PdId(pd);
  s.srq_limit = attr->attr.srq_limit;
  s.armed_limit = attr->attr.srq_limit > 0;
  srq->slot = slot;
  srq->shm = &s;
  srq->srq.context = pd->context;
  srq->srq.srq_context = attr->srq_context;
  srq->srq.pd = pd;
  srq->srq.handle = slot;
  pthread_mutex_init(&srq->srq.mutex, nullptr);
  pthread_cond_init(&srq->srq.cond, nullptr);
  p->srqs[slot] = srq;
  return &srq->srq;
}

int ModifySrq(ibv_srq* ibsrq, ibv_srq_attr* attr, int mask) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnSrq* srq = Srq(ibsrq);
  if (mask & ~(IBV_SRQ_MAX_WR | IBV_SRQ_LIMIT)) return EINVAL;
  if (mask & IBV_SRQ_MAX_WR) return EOPNOTSUPP;  // no resize
  FabricLock lock(p->fab);
  if (mask & IBV_SRQ_LIMIT) {
    if (attr->srq_limit > srq->shm->rq.max_wr) return EINVAL;
    srq->shm->srq_limit = attr->srq_limit;
    srq->shm->armed_limit = attr->srq_limit > 0;
  }
  return 0;
}

int QuerySrq(ibv_srq* ibsrq, ibv_srq_attr* attr) {
  SnSrq* srq = Srq(ibsrq);
  attr->max_wr = srq->shm->rq.max_wr;
  attr->max_sge = srq->shm->rq.max_sge;
  attr->srq_limit = srq->shm->srq_limit;
  return 0;
}

int DestroySrq(ibv_srq* ibsrq) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnSrq* srq = Srq(ibsrq);
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    for (auto& q : h->qps)
      if (q.in_use && q.srq == srq->slot && q.proc == p->fab->self_proc()) return EBUSY;
    p->fab->Free(srq->shm->rq.ring_off);
    srq->shm->in_use = 0;
    p->srqs[srq->slot] = nullptr;
  }
  pthread_mutex_destroy(&ibsrq->mutex);
  pthread_cond_destroy(&ibsrq->cond);
  delete srq;
  return 0;
}

// ------------------------------------------------------------------- QP --

namespace {

ibv_qp* CreateQpCommon(ibv_context* ctx, ibv_pd* pd, ibv_qp_init_attr_ex* a) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (a->qp_type != IBV_QPT_RC && a->qp_type != IBV_QPT_UC && a->qp_type != IBV_QPT_UD) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!pd || !a->send_cq || !a->recv_cq || a->send_cq->context != ctx || a->recv_cq->context != ctx ||
      pd->context != ctx || (a->srq && a->srq->context != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_qp_cap& cap = a->cap;
  if (cap.max_send_wr > kMaxQpWr || cap.max_send_sge > kMaxSge || cap.max_inline_data > kMaxInline ||
      (!a->srq && (cap.max_recv_wr > kMaxQpWr || cap.max_recv_sge > kMaxSge))) {
    errno = EINVAL;
    return nullptr;
  }
  if (a->srq) cap.max_recv_wr = cap.max_recv_sge = 0;
  auto* qp = new (std::nothrow) SnQp();
  if (!qp) {
    errno = ENOMEM;
    return nullptr;
  }
  try {
    qp->sq.resize(std::max<uint32_t>(1, cap.max_send_wr));
  } catch (...) {
    delete qp;
    errno = ENOMEM;
    return nullptr;
  }
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->qps, 1);
  if (slot == kNone || !InitRq(p->fab, &h->qps[slot].rq, a->srq ? 0 : cap.max_recv_wr, cap.max_recv_sge)) {
    delete qp;
    errno = ENOMEM;
    return nullptr;
  }
  ShmQp& s = h->qps[slot];
  s.gen = (s.gen % 4095) + 1;
  s.qpn = (s.gen << 12) | slot;
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.ctx = Ctx(ctx)->slot;
  s.pd = PdId(pd);
  s.type = a->qp_type;
  s.state.store(IBV_QPS_RESET);
  s.send_cq = Cq(a->send_cq)->slot;
  s.recv_cq = Cq(a->recv_cq)->slot;
  s.srq = a->srq ? Srq(a->srq)->slot : kNone;
  s.sq_sig_all = a->sq_sig_all;
  s.access = 0;
  s.qkey = 0;
  s.dest_qpn = 0;
  s.min_rnr_timer = 0;
  s.rnr_retry = 0;
  s.timeout = 0;
  s.retry_cnt = 0;
  s.max_rd_atomic = s.max_dest_rd_atomic = 0;
  s.path_mtu = IBV_MTU_1024;
  s.remote_gone = 0;
  qp->slot = slot;
  qp->shm = &s;
  qp->send_cq = Cq(a->send_cq);
  qp->recv_cq = Cq(a->recv_cq);
  qp->srq = a->srq ? Srq(a->srq) : nullptr;
  qp->max_send_wr = cap.max_send_wr;
  qp->max_send_sge = cap.max_send_sge;
  qp->max_inline = cap.max_inline_data;
  qp->max_recv_wr = cap.max_recv_wr;
  qp->max_recv_sge = cap.max_recv_sge;
  ibv_qp& q = qp->qpx.qp_base;
  q.context = ctx;
  q.qp_context = a->qp_context;
  q.pd = pd;
  q.send_cq = a->send_cq;
  q.recv_cq = a->recv_cq;
  q.srq = a->srq;
  q.handle = slot;
  q.qp_num = s.qpn;
  q.state = IBV_QPS_RESET;
  q.qp_type = a->qp_type;
  pthread_mutex_init(&q.mutex, nullptr);
  pthread_cond_init(&q.cond, nullptr);
  InstallQpExOps(qp);
  p->qps[slot] = qp;
  return &q;
}

ibv_qp* VCreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr) {
  constexpr uint32_t kMask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
  if (attr->comp_mask & ~kMask) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (!(attr->comp_mask & IBV_QP_INIT_ATTR_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) {
    constexpr uint64_t kOps = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM | IBV_QP_EX_WITH_SEND |
                              IBV_QP_EX_WITH_SEND_WITH_IMM | IBV_QP_EX_WITH_RDMA_READ |
                              IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP | IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD;
    if (attr->send_ops_flags & ~kOps) {
      errno = EOPNOTSUPP;
      return nullptr;
    }
  }
  return CreateQpCommon(ctx, attr->pd, attr);
}

}  // namespace

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr) {
  ibv_qp_init_attr_ex ex{};
  ex.qp_context = attr->qp_context;
  ex.send_cq = attr->send_cq;
  ex.recv_cq = attr->recv_cq;
  ex.srq = attr->srq;
  ex.cap = attr->cap;
  ex.qp_type = attr->qp_type;
  ex.sq_sig_all = attr->sq_sig_all;
  ex.comp_mask = IBV_QP_INIT_ATTR_PD;
  ex.pd = pd;
  ibv_qp* qp = CreateQpCommon(pd->context, pd, &ex);
  if (qp) attr->cap = ex.cap;
  return qp;
}

ibv_qp_ex* QpToQpEx(ibv_qp* qp) { return &Qp(qp)->qpx; }

int ModifyQp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnQp* qp = Qp(ibqp);
  std::lock_guard<std::mutex> sq(qp->sq_mu);
  bool flush = false;
  {
    FabricLock lock(p->fab);
    ShmQp& s = *qp->shm;
    auto cur = static_cast<ibv_qp_state>(s.state.load());
    if ((mask & IBV_QP_CUR_STATE) && attr->cur_qp_state != cur) return EINVAL;
    auto next = (mask & IBV_QP_STATE) ? attr->qp_state : cur;
    if (!TransitionAllowed(cur, next, s.type, mask)) return EINVAL;
    if ((mask & IBV_QP_PORT) && attr->port_num != 1) return EINVAL;
    if ((mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0) return EINVAL;
    if ((mask & IBV_QP_PATH_MTU) && (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096)) return EINVAL;
    if ((mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16) return EINVAL;
    if ((mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16) return EINVAL;
    if ((mask & IBV_QP_AV) && attr->ah_attr.port_num > 1) return EINVAL;
    if (mask & IBV_QP_ACCESS_FLAGS) s.access = attr->qp_access_flags;
    if (mask & IBV_QP_QKEY) s.qkey = attr->qkey;
    if (mask & IBV_QP_DEST_QPN) s.dest_qpn = attr->dest_qp_num;
    if (mask & IBV_QP_MIN_RNR_TIMER) s.min_rnr_timer = attr->min_rnr_timer;
    if (mask & IBV_QP_RNR_RETRY) s.rnr_retry = attr->rnr_retry;
    if (mask & IBV_QP_TIMEOUT) s.timeout = attr->timeout;
    if (mask & IBV_QP_RETRY_CNT) s.retry_cnt = attr->retry_cnt;
    if (mask & IBV_QP_MAX_QP_RD_ATOMIC) s.max_rd_atomic = attr->max_rd_atomic;
    if (mask & IBV_QP_MAX_DEST_RD_ATOMIC) s.max_dest_rd_atomic = attr->max_dest_rd_atomic;
    if (mask & IBV_QP_PATH_MTU) s.path_mtu = attr->path_mtu;
    if (mask & IBV_QP_RQ_PSN) s.rq_psn = attr->rq_psn;
    if (mask & IBV_QP_SQ_PSN) s.sq_psn = attr->sq_psn;
    if (mask & IBV_QP_PKEY_INDEX) s.pkey_index = attr->pkey_index;
    if (mask & IBV_QP_PORT) s.port_num = attr->port_num;
    if (mask & IBV_QP_STATE) {
      if (next == IBV_QPS_RESET) {
        s.rq.head = s.rq.tail = 0;
        qp->rq_outstanding.store(0);
        qp->sq_retired = qp->sq_exec = qp->sq_posted = 0;
        qp->sq_retire_to.store(0);
        s.remote_gone = 0;
      }
      if (next == IBV_QPS_ERR && cur != IBV_QPS_ERR) {
        MoveToErrorLocked(p, &s);
        flush = true;
      }
      s.state.store(next);
      ibqp->state = next;
    }
  }
  if (flush) FlushSq(p, qp);
  return 0;
}

int QueryQp(ibv_qp* ibqp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init) {
  SnQp* qp = Qp(ibqp);
  const ShmQp& s = *qp->shm;
  memset(attr, 0, sizeof(*attr));
  attr->qp_state = static_cast<ibv_qp_state>(s.state.load());
  attr->cur_qp_state = attr->qp_state;
  attr->path_mtu = static_cast<ibv_mtu>(s.path_mtu);
  attr->path_mig_state = IBV_MIG_MIGRATED;
  attr->qkey = s.qkey;
  attr->rq_psn = s.rq_psn;
  attr->sq_psn = s.sq_psn;
  attr->dest_qp_num = s.dest_qpn;
  attr->qp_access_flags = s.access;
  attr->cap.max_send_wr = qp->max_send_wr;
  attr->cap.max_recv_wr = qp->max_recv_wr;
  attr->cap.max_send_sge = qp->max_send_sge;
  attr->cap.max_recv_sge = qp->max_recv_sge;
  attr->cap.max_inline_data = qp->max_inline;
  attr->pkey_index = s.pkey_index;
  attr->port_num = s.port_num;
  attr->max_rd_atomic = s.max_rd_atomic;
  attr->max_dest_rd_atomic = s.max_dest_rd_atomic;
  attr->min_rnr_timer = s.min_rnr_timer;
  attr->timeout = s.timeout;
  attr->retry_cnt = s.retry_cnt;
  attr->rnr_retry = s.rnr_retry;
  if (init) {
    memset(init, 0, sizeof(*init));
    init->qp_context = ibqp->qp_context;
    init->send_cq = ibqp->send_cq;
    init->recv_cq = ibqp->recv_cq;
    init->srq = ibqp->srq;
    init->cap = attr->cap;
    init->qp_type = ibqp->qp_type;
    init->sq_sig_all = s.sq_sig_all;
  }
  return 0;
}

int DestroyQp(ibv_qp* ibqp) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnQp* qp = Qp(ibqp);
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    p->fab->Free(qp->shm->rq.ring_off);
    qp->shm->rq.ring_off = 0;
    qp->shm->in_use = 0;
    qp->shm->qpn = 0;
    p->qps[qp->slot] = nullptr;
  }
  pthread_mutex_destroy(&ibqp->mutex);
  pthread_cond_destroy(&ibqp->cond);
  delete qp;
  return 0;
}

// ------------------------------------------------------------------- AH --

ibv_ah* CreateAh(ibv_pd* pd, ibv_ah_attr* attr) {
  if (attr->port_num != 1 || (attr->is_global && attr->grh.sgid_index >= kGidTableLen)) {
    errno = EINVAL;
    return nullptr;
  }
  auto* ah = new (std::nothrow) SnAh();
  if (!ah) {
    errno = ENOMEM;
    return nullptr;
  }
  ah->ah.context = pd->context;
  ah->ah.pd = pd;
  ah->attr = *attr;
  return &ah->ah;
}

int DestroyAh(ibv_ah* ah) {
  delete reinterpret_cast<SnAh*>(ah);
  return 0;
}

}  // namespace rdmasan::softnic
