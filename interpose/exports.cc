// The exported-symbol layer: every libibverbs function an application can
// call (default versions IBVERBS_1.0 .. IBVERBS_1.14 of rdma-core 44).
//
// Each definition routes an object of a softnic context to softnic and
// anything else to the real function.  Functions that take no object
// (string helpers, rate conversions, fork control, kernel-struct copies) go
// to the real function; without libibverbs loaded they fail with ENOSYS.
// This file: devices, contexts and their queries, and the object-free
// helpers; exports_mr.cc and exports_queues.cc have the rest
// (exports_internal.h: what they share).  A closed context is refused by
// every verb that takes one (use-after-destroy).
#include <dlfcn.h>
#include <errno.h>
#include <infiniband/sa.h>
#include <infiniband/verbs.h>
#include <sys/stat.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <vector>

#include "interpose/devfs.h"
#include "interpose/exports_internal.h"
#include "interpose/watchdog.h"

namespace {

// Device lists handed out by the shim, with the real list they extend.
struct ListRecord {
  ibv_device** ours;
  ibv_device** real;
};
// Constant-initialized mutex and a list made on first use: another
// library's constructor may ask for the device list before this one's ran.
constinit std::mutex g_lists_mu;
std::vector<ListRecord>& Lists() {
  static auto* lists = new std::vector<ListRecord>();
  return *lists;
}

}  // namespace

// ---------------------------------------------------------------- devices --

namespace {
std::atomic<int> g_softnic_listed{-1};  // -1: no device list asked for yet

// While libibverbs' ibv_import_device runs on this thread, the device list
// it asks for is the real one, as it is (NULL when there is none).
struct RealDeviceListOnly {
  RealDeviceListOnly() { active = true; }
  ~RealDeviceListOnly() { active = false; }
  static thread_local bool active;
};
thread_local bool RealDeviceListOnly::active = false;
}  // namespace

bool rdmasan::interpose::SoftnicListed() {
  const std::string& mode = rdmasan::core::GlobalOptions().softnic;
  if (mode == "on") return true;
  if (mode == "off") return false;
  if (g_softnic_listed.load(std::memory_order_relaxed) < 0) {
    ibv_device** l = ibv_get_device_list(nullptr);
    if (l) ibv_free_device_list(l);
  }
  return g_softnic_listed.load(std::memory_order_relaxed) == 1;
}

RDMASAN_EXPORT ibv_device** ibv_get_device_list(int* num_devices) {
  REAL(ibv_get_device_list, "IBVERBS_1.1");
  Reentry re;
  int nreal = 0;
  ibv_device** real_list = nullptr;
  const std::string& mode = rdmasan::core::GlobalOptions().softnic;
  if (real) {
    // Without any RDMA kernel support libibverbs finds nothing; keep its own
    // diagnostics as they are.
    rdmasan::interpose::devfs::InRealScan scan;  // the host's sysfs as it is
    real_list = real(&nreal);
    if (!real_list) nreal = 0;
  }
  if (RealDeviceListOnly::active) {
    if (num_devices) *num_devices = nreal;
    return real_list;
  }
  const bool add_softnic = mode == "on" || (mode == "auto" && nreal == 0);
  g_softnic_listed.store(add_softnic ? 1 : 0, std::memory_order_relaxed);
  if (!add_softnic) {
    if (num_devices) *num_devices = nreal;
    if (!real_list) {
      real_list = static_cast<ibv_device**>(calloc(1, sizeof(ibv_device*)));
      std::lock_guard<std::mutex> g(g_lists_mu);
      Lists().push_back({real_list, nullptr});
    }
    return real_list;
  }
  auto** out = static_cast<ibv_device**>(calloc(nreal + 2, sizeof(ibv_device*)));
  if (!out) {
    if (real_list && real) {
      REAL(ibv_free_device_list, "IBVERBS_1.1");
      if (real) real(real_list);
    }
    errno = ENOMEM;
    return nullptr;
  }
  out[0] = sn::Device();
  for (int i = 0; i < nreal; ++i) out[i + 1] = real_list[i];
  if (num_devices) *num_devices = nreal + 1;
  std::lock_guard<std::mutex> g(g_lists_mu);
  Lists().push_back({out, real_list});
  return out;
}

RDMASAN_EXPORT void ibv_free_device_list(ibv_device** list) {
  REAL(ibv_free_device_list, "IBVERBS_1.1");
  Reentry re;
  {
    std::lock_guard<std::mutex> g(g_lists_mu);
    std::vector<ListRecord>& lists = Lists();
    for (size_t i = 0; i < lists.size(); ++i) {
      if (lists[i].ours == list) {
        ibv_device** r = lists[i].real;
        lists.erase(lists.begin() + i);
        if (r && real) real(r);
        free(list);
        return;
      }
    }
  }
  if (real) real(list);
}

RDMASAN_EXPORT const char* ibv_get_device_name(ibv_device* device) {
  REAL(ibv_get_device_name, "IBVERBS_1.1");
  if (sn::IsDevice(device)) return device->name;
  return real ? real(device) : nullptr;
}

RDMASAN_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  REAL(ibv_get_device_guid, "IBVERBS_1.1");
  if (sn::IsDevice(device)) return sn::DeviceGuid();
  return real ? real(device) : 0;
}

RDMASAN_EXPORT int ibv_get_device_index(ibv_device* device) {
  REAL(ibv_get_device_index, "IBVERBS_1.9");
  if (sn::IsDevice(device)) return 0x7f00;  // not a kernel index
  return real ? real(device) : -1;
}

RDMASAN_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  REAL(ibv_open_device, "IBVERBS_1.1");
  Reentry re;
  ibv_context* ctx;
  if (sn::IsDevice(device)) {
    ctx = sn::OpenDevice(device);
  } else if (real) {
    ctx = real(device);
  } else {
    errno = ENOSYS;
    return nullptr;
  }
  // Both real and softnic contexts get the data-path wrappers.
  if (ctx && re.outer()) {
    ip::WrapContext(ctx, sn::IsContext(ctx));
    ip::Assign(ctx);
  }
  return ctx;
}

RDMASAN_EXPORT int ibv_close_device(ibv_context* context) {
  REAL(ibv_close_device, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  if (RefuseDestroyed(EventKind::kCloseDevice, context, stack, re)) return EINVAL;
  Event e = Ev(EventKind::kCloseDevice, stack);
  e.obj = ip::Id(context);
  ip::UnwrapRealContext(context);
  ip::Forget(context);
  bool held = false;
  int rc = DestroyHolding(
      context, e.obj,
      [&] {
        if (IsSn(context)) return sn::CloseDevice(context);
        return real ? real(context) : ENOSYS;
      },
      &held);
  if (held) ip::RefuseOnClosedContext(context);
  if (Watch(re) && e.obj) Done(e, rc);
  return rc;
}

RDMASAN_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  REAL(ibv_import_device, "IBVERBS_1.10");
  Reentry re;
  ibv_context* ctx;
  if (sn::IsContextFd(cmd_fd)) {
    ctx = sn::ImportDevice(cmd_fd);
    if (ctx && re.outer()) {
      ip::WrapContext(ctx, /*softnic=*/true);
      ip::Assign(ctx);
    }
    return ctx;
  }
  // libibverbs' own answer for what is no character device (a closed fd,
  // a file), without asking it.
  struct stat st;
  if (fstat(cmd_fd, &st) != 0 || !S_ISCHR(st.st_mode)) {
    errno = EINVAL;
    return nullptr;
  }
  if (!real) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  // It looks the device up in the list it asks for: the real one alone
  // (softnic0 is no device of libibverbs', and reading it as one crashes).
  {
    RealDeviceListOnly only;
    ctx = real(cmd_fd);
  }
  if (ctx && re.outer()) rdmasan::interpose::WrapRealContext(ctx);
  return ctx;
}

RDMASAN_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  REAL(ibv_get_async_event, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kGetAsyncEvent, context, nullptr, kObj, -1, -1);
  ip::watchdog::AsyncWaitScope wait(context, reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                                    reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
  ip::FlushTraceBeforeBlocking();
  if (IsSn(context)) return sn::GetAsyncEvent(context, event);
  return real ? real(context, event) : -1;
}

RDMASAN_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  REAL(ibv_ack_async_event, "IBVERBS_1.1");
  const ibv_context* ctx = nullptr;
  switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
      ctx = event->element.cq->context;
      break;
    case IBV_EVENT_SRQ_ERR:
    case IBV_EVENT_SRQ_LIMIT_REACHED:
      ctx = event->element.srq->context;
      break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
      ctx = event->element.qp->context;
      break;
    default:
      break;  // port and device events carry no object
  }
  if (ctx && IsSn(ctx)) return sn::AckAsyncEvent(event);
  if (real) real(event);
}

// ---------------------------------------------------------------- queries --

RDMASAN_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  REAL(ibv_query_device, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryDevice, context, nullptr, kObj, EINVAL, EINVAL);
  if (IsSn(context)) return sn::QueryDevice(context, device_attr);
  return real ? real(context, device_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  REAL(ibv_query_port, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryPort, context, nullptr, kObj, EINVAL, EINVAL);
  if (IsSn(context)) {
    // The old layout is the prefix of ibv_port_attr up to link_layer.
    ibv_port_attr a;
    int rc = sn::QueryPort(context, port_num, &a);
    if (!rc) memcpy(port_attr, &a, offsetof(ibv_port_attr, link_layer) + 1);
    return rc;
  }
  return real ? real(context, port_num, port_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  REAL(ibv_query_gid, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryGid, context, nullptr, kObj, -1, -1);
  if (IsSn(context)) return sn::QueryGid(context, port_num, index, gid);
  return real ? real(context, port_num, index, gid) : -1;
}

RDMASAN_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  REAL(_ibv_query_gid_ex, "IBVERBS_1.11");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryGidEx, context, nullptr, kObj, EINVAL, EINVAL);
  if (IsSn(context)) return sn::QueryGidEx(context, port_num, gid_index, entry, flags, entry_size);
  return real ? real(context, port_num, gid_index, entry, flags, entry_size) : ENOSYS;
}

RDMASAN_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                            uint32_t flags, size_t entry_size) {
  REAL(_ibv_query_gid_table, "IBVERBS_1.11");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryGidTable, context, nullptr, kObj, -EINVAL, -EINVAL);
  if (IsSn(context)) return sn::QueryGidTable(context, entries, max_entries, flags, entry_size);
  return real ? real(context, entries, max_entries, flags, entry_size) : -ENOSYS;
}

RDMASAN_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  REAL(ibv_query_pkey, "IBVERBS_1.1");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryPkey, context, nullptr, kObj, -1, -1);
  if (IsSn(context)) return sn::QueryPkey(context, port_num, index, pkey);
  return real ? real(context, port_num, index, pkey) : -1;
}

RDMASAN_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  REAL(ibv_get_pkey_index, "IBVERBS_1.5");
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kGetPkeyIndex, context, nullptr, kObj, -1, -1);
  if (IsSn(context)) return sn::GetPkeyIndex(context, port_num, pkey);
  return real ? real(context, port_num, pkey) : -1;
}

// ------------------------------------------------- object-free helpers --

#define PASS_STR(name, ver, type)           \
  RDMASAN_EXPORT const char* name(type v) { \
    REAL(name, ver);                        \
    return real ? real(v) : "unknown";      \
  }
PASS_STR(ibv_wc_status_str, "IBVERBS_1.1", ibv_wc_status)
PASS_STR(ibv_node_type_str, "IBVERBS_1.1", ibv_node_type)
PASS_STR(ibv_port_state_str, "IBVERBS_1.1", ibv_port_state)
PASS_STR(ibv_event_type_str, "IBVERBS_1.1", ibv_event_type)
#undef PASS_STR

RDMASAN_EXPORT int ibv_rate_to_mult(ibv_rate rate) {
  REAL(ibv_rate_to_mult, "IBVERBS_1.0");
  return real ? real(rate) : -1;
}
RDMASAN_EXPORT ibv_rate mult_to_ibv_rate(int mult) {
  REAL(mult_to_ibv_rate, "IBVERBS_1.0");
  return real ? real(mult) : IBV_RATE_MAX;
}
RDMASAN_EXPORT int ibv_rate_to_mbps(ibv_rate rate) {
  REAL(ibv_rate_to_mbps, "IBVERBS_1.1");
  return real ? real(rate) : -1;
}
RDMASAN_EXPORT ibv_rate mbps_to_ibv_rate(int mbps) {
  REAL(mbps_to_ibv_rate, "IBVERBS_1.1");
  return real ? real(mbps) : IBV_RATE_MAX;
}

RDMASAN_EXPORT int ibv_fork_init(void) {
  REAL(ibv_fork_init, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  int rc = real ? real() : 0;  // softnic copies through the kernel: fork is safe
  if (Watch(re)) Done(Ev(EventKind::kForkInit, stack), rc);
  return rc;
}
RDMASAN_EXPORT ibv_fork_status ibv_is_fork_initialized(void) {
  REAL(ibv_is_fork_initialized, "IBVERBS_1.13");
  return real ? real() : IBV_FORK_DISABLED;
}
RDMASAN_EXPORT int ibv_dontfork_range(void* base, size_t size) {
  REAL(ibv_dontfork_range, "IBVERBS_1.1");
  return real ? real(base, size) : 0;
}
RDMASAN_EXPORT int ibv_dofork_range(void* base, size_t size) {
  REAL(ibv_dofork_range, "IBVERBS_1.1");
  return real ? real(base, size) : 0;
}

RDMASAN_EXPORT const char* ibv_get_sysfs_path(void) {
  REAL(ibv_get_sysfs_path, "IBVERBS_1.0");
  return real ? real() : "/sys";
}
RDMASAN_EXPORT int ibv_read_sysfs_file(const char* dir, const char* file, char* buf, size_t size) {
  REAL(ibv_read_sysfs_file, "IBVERBS_1.0");
  return real ? real(dir, file, buf, size) : -1;
}

// Kernel ABI struct copies: only meaningful for real devices.
struct ib_user_path_rec;
struct ib_uverbs_qp_attr;
struct ib_uverbs_ah_attr;
RDMASAN_EXPORT void ibv_copy_path_rec_from_kern(ibv_sa_path_rec* dst, ib_user_path_rec* src) {
  using Fn = void (*)(ibv_sa_path_rec*, ib_user_path_rec*);
  static constinit ip::RealSym real_sym("ibv_copy_path_rec_from_kern", "IBVERBS_1.0");
  const auto real = reinterpret_cast<Fn>(real_sym.Get());
  if (real) real(dst, src);
}
RDMASAN_EXPORT void ibv_copy_path_rec_to_kern(ib_user_path_rec* dst, ibv_sa_path_rec* src) {
  using Fn = void (*)(ib_user_path_rec*, ibv_sa_path_rec*);
  static constinit ip::RealSym real_sym("ibv_copy_path_rec_to_kern", "IBVERBS_1.0");
  const auto real = reinterpret_cast<Fn>(real_sym.Get());
  if (real) real(dst, src);
}
RDMASAN_EXPORT void ibv_copy_qp_attr_from_kern(ibv_qp_attr* dst, ib_uverbs_qp_attr* src) {
  using Fn = void (*)(ibv_qp_attr*, ib_uverbs_qp_attr*);
  static constinit ip::RealSym real_sym("ibv_copy_qp_attr_from_kern", "IBVERBS_1.0");
  const auto real = reinterpret_cast<Fn>(real_sym.Get());
  if (real) real(dst, src);
}
RDMASAN_EXPORT void ibv_copy_ah_attr_from_kern(ibv_ah_attr* dst, ib_uverbs_ah_attr* src) {
  using Fn = void (*)(ibv_ah_attr*, ib_uverbs_ah_attr*);
  static constinit ip::RealSym real_sym("ibv_copy_ah_attr_from_kern", "IBVERBS_1.1");
  const auto real = reinterpret_cast<Fn>(real_sym.Get());
  if (real) real(dst, src);
}

// ibv_query_gid_type is a private libibverbs symbol (IBVERBS_PRIVATE_*),
// yet ibv_devinfo calls it.  Its signature is stable; the version name is
// not, so the real one is found by its default version.
RDMASAN_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  using Fn = int (*)(ibv_context*, uint8_t, unsigned int, int*);
  static constinit ip::RealSym real_sym("ibv_query_gid_type", nullptr);
  const auto real = reinterpret_cast<Fn>(real_sym.Get());
  Reentry re;
  REFUSE_IF_DEAD(kOpenDevice, kQueryGidType, context, nullptr, kObj, -1, -1);
  if (IsSn(context)) {
    uint32_t t = IBV_GID_TYPE_IB;
    if (sn::QueryGidType(context, port_num, index, &t)) return -1;
    *type = t == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;  // sysfs terms: RoCE v2, else IB / RoCE v1
    return 0;
  }
  return real ? real(context, port_num, index, type) : -1;
}
