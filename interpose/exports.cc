// The exported-symbol layer: every libibverbs function an application can
// call (default versions IBVERBS_1.0 .. IBVERBS_1.14 of rdma-core 44).
//
// Each definition runs its prologue and checks, then reaches the device
// through the dispatch table of the object's context (interpose/dispatch.h:
// softnic's or libibverbs' functions).  Functions that take no object
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
  // Asked by libibverbs' ibv_import_device: the real list, as it is (NULL
  // when there is none).
  if (ip::RealDeviceListOnly::active) {
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
  out[0] = rdmasan::softnic::Device();
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
  Reentry re;
  return ip::TableOf(device).get_device_name(device);
}

RDMASAN_EXPORT __be64 ibv_get_device_guid(ibv_device* device) {
  Reentry re;
  return ip::TableOf(device).get_device_guid(device);
}

RDMASAN_EXPORT int ibv_get_device_index(ibv_device* device) {
  Reentry re;
  return ip::TableOf(device).get_device_index(device);
}

namespace {
// A context the program opened or imported: softnic's and real ones alike
// get the data-path wrappers and an id.
ibv_context* NoteContext(const Reentry& re, ibv_context* ctx) {
  if (ctx && re.outer()) {
    ip::WrapContext(ctx);
    ip::Assign(ctx);
  }
  return ctx;
}
}  // namespace

RDMASAN_EXPORT ibv_context* ibv_open_device(ibv_device* device) {
  Reentry re;
  return NoteContext(re, ip::TableOf(device).open_device(device));
}

RDMASAN_EXPORT int ibv_close_device(ibv_context* context) {
  VERB_PROLOGUE(kCloseDevice, kByKind, context, nullptr, kObj, EINVAL, EINVAL);
  const auto stack = CALLER_STACK();
  Event e = Ev(EventKind::kCloseDevice, stack);
  e.obj = ip::Id(context);
  ip::UnwrapContext(context);
  ip::Forget(context);
  bool held = false;
  int rc = DestroyHolding(
      context, e.obj, [&] { return ip::TableOf(context).close_device(context); }, &held);
  if (held) ip::RefuseOnClosedContext(context);
  if (Watch(re) && e.obj) Done(e, rc);
  return rc;
}

RDMASAN_EXPORT ibv_context* ibv_import_device(int cmd_fd) {
  Reentry re;
  return NoteContext(re, ip::TableOfCommandFd(cmd_fd).import_device(cmd_fd));
}

RDMASAN_EXPORT int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
  VERB_PROLOGUE(kOpenDevice, kGetAsyncEvent, context, nullptr, kObj, -1, -1);
  ip::watchdog::AsyncWaitScope wait(context, reinterpret_cast<uintptr_t>(__builtin_return_address(0)),
                                    reinterpret_cast<uintptr_t>(__builtin_frame_address(0)));
  ip::FlushTraceBeforeBlocking();
  return ip::TableOf(context).get_async_event(context, event);
}

RDMASAN_EXPORT void ibv_ack_async_event(ibv_async_event* event) {
  Reentry re;
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
      break;  // port and device events carry no object: the real table's
  }
  ip::TableOf(ctx).ack_async_event(event);
}

// ---------------------------------------------------------------- queries --

RDMASAN_EXPORT int ibv_query_device(ibv_context* context, ibv_device_attr* device_attr) {
  VERB_PROLOGUE(kOpenDevice, kQueryDevice, context, nullptr, kObj, EINVAL, EINVAL);
  return ip::TableOf(context).query_device(context, device_attr);
}

RDMASAN_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  VERB_PROLOGUE(kOpenDevice, kQueryPort, context, nullptr, kObj, EINVAL, EINVAL);
  return ip::TableOf(context).query_port(context, port_num, port_attr);
}

RDMASAN_EXPORT int ibv_query_gid(ibv_context* context, uint8_t port_num, int index, ibv_gid* gid) {
  VERB_PROLOGUE(kOpenDevice, kQueryGid, context, nullptr, kObj, -1, -1);
  return ip::TableOf(context).query_gid(context, port_num, index, gid);
}

RDMASAN_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  VERB_PROLOGUE(kOpenDevice, kQueryGidEx, context, nullptr, kObj, EINVAL, EINVAL);
  return ip::TableOf(context).query_gid_ex(context, port_num, gid_index, entry, flags, entry_size);
}

RDMASAN_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                            uint32_t flags, size_t entry_size) {
  VERB_PROLOGUE(kOpenDevice, kQueryGidTable, context, nullptr, kObj, -EINVAL, -EINVAL);
  return ip::TableOf(context).query_gid_table(context, entries, max_entries, flags, entry_size);
}

RDMASAN_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  VERB_PROLOGUE(kOpenDevice, kQueryPkey, context, nullptr, kObj, -1, -1);
  return ip::TableOf(context).query_pkey(context, port_num, index, pkey);
}

RDMASAN_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  VERB_PROLOGUE(kOpenDevice, kGetPkeyIndex, context, nullptr, kObj, -1, -1);
  return ip::TableOf(context).get_pkey_index(context, port_num, pkey);
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
// not, so the real one is found by its default version (dispatch.inc).
RDMASAN_EXPORT int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  VERB_PROLOGUE(kOpenDevice, kQueryGidType, context, nullptr, kObj, -1, -1);
  return ip::TableOf(context).query_gid_type(context, port_num, index, type);
}
