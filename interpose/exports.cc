// The exported-symbol layer: every libibverbs function an application can
// call (default versions IBVERBS_1.0 .. IBVERBS_1.14 of rdma-core 44).
//
// Each definition routes an object of a softnic context to softnic and
// anything else to the real function.  Functions that take no object
// (string helpers, rate conversions, fork control, kernel-struct copies) go
// to the real function; without libibverbs loaded they fail with ENOSYS.
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

#include "core/options.h"
#include "core/stack.h"
#include "interpose/destroyed.h"
#include "interpose/devfs.h"
#include "interpose/domains.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/memory.h"
#include "interpose/watchdog.h"
#include "softnic/softnic.h"

#undef ibv_reg_mr
#undef ibv_reg_mr_iova
#undef ibv_query_port
#undef ibv_get_device_list

namespace sn = rdmasan::softnic;
using rdmasan::interpose::Real;
using rdmasan::interpose::Reentry;
namespace ip = rdmasan::interpose;
using rdmasan::core::Event;
using rdmasan::core::EventKind;

// Captures the application's call site; only valid directly in an exported
// function's body.
#define CALLER_STACK() RDMASAN_CAPTURE_CALLER_STACK()
// Registrations and deregistrations are off the data path, and their stacks are what a
// suppression of a registration cache names (registered=ucs_rcache_*):
// walked with the unwind tables, through libraries without frame pointers.
#define REG_STACK() RDMASAN_CAPTURE_CALLER_FULL_STACK()

#define RDMASAN_EXPORT extern "C" __attribute__((visibility("default")))

// The real function; `real` is null while libibverbs is not loaded (looked
// up again once the process loaded something: loader.h).
#define REAL(name, ver)                              \
  static constinit ip::RealSym real_sym(#name, ver); \
  const auto real = reinterpret_cast<decltype(&::name)>(real_sym.Get())

namespace {

bool IsSn(const ibv_context* c) { return sn::IsContext(c); }

// Whether this call should become an Event.
bool Watch(const Reentry& re) { return re.outer() && ip::Checking(); }

Event Ev(EventKind kind, rdmasan::core::StackId stack) {
  Event e;
  e.kind = kind;
  e.stack = stack;
  return e;
}

// Whether an injected fault (faults=, schedule=) fails this create, alloc
// or registration call under `parent`: errno is set, the caller returns
// NULL as the provider would.  Never inside libibverbs' own calls.
bool Fails(const Reentry& re, rdmasan::core::Point p, const void* parent) {
  if (__builtin_expect(!ip::FaultActive(p), 1) || !re.outer()) return false;
  const int err = ip::CallFault(p, ip::Id(parent));
  if (!err) return false;
  errno = err;
  return true;
}
using rdmasan::core::Point;

// Emits the event of a verb that returns an int (0 or an error code).
int Done(Event e, int rc) {
  e.ret = rc;
  e.err = rc ? (rc > 0 ? rc : errno) : 0;
  ip::Emit(e);
  return rc;
}

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

// A call (of event kind `kind`) on a handle the program already destroyed:
// an event that names the id the object had (as the call's object, or as
// the parent of what it would create), which the engine reports as
// use-after-destroy; the call is refused with EINVAL and the provider never
// sees the stale pointer.  False (nothing done) for a live or unknown
// handle, and inside libibverbs's own calls.
bool RefuseDestroyed(EventKind kind, const void* handle, rdmasan::core::StackId stack, const Reentry& re,
                     bool as_parent = false) {
  if (!re.outer() || !handle || ip::Id(handle)) return false;
  const rdmasan::core::ObjId old = ip::DestroyedId(handle);
  if (!old) return false;
  if (ip::Checking()) {
    Event e = Ev(kind, stack);
    (as_parent ? e.parent : e.obj) = old;
    e.ret = as_parent ? -1 : EINVAL;
    e.err = EINVAL;
    ip::Emit(e);
  }
  errno = EINVAL;
  return true;
}

// Runs a provider's destroy of `obj` (id `id`): the heap block the provider
// frees that holds the handle is held back, and on success the handle is
// remembered as destroyed (interpose/destroyed.h).
template <typename Call>
int DestroyHolding(const void* obj, rdmasan::core::ObjId id, Call call) {
  if (!id) return call();
  ip::HoldFrees hold(obj);
  const int rc = call();
  if (!rc) ip::NoteDestroyed(obj, id);
  return rc;
}

}  // namespace

// The destroy verbs: one Event (the object's id, taken before it goes),
// the softnic or real call, then the shim forgets the object.  A handle
// destroyed before is refused (use-after-destroy).
template <typename Obj, typename SnFn, typename RealFn>
int Destroy(EventKind kind, Obj* obj, rdmasan::core::StackId stack, const Reentry& re, SnFn sn_fn,
            RealFn real) {
  if (RefuseDestroyed(kind, obj, stack, re)) return EINVAL;
  Event e = Ev(kind, stack);
  e.obj = ip::Id(obj);
  int rc = DestroyHolding(obj, e.obj, [&] {
    return IsSn(obj->context) ? sn_fn(obj) : real ? real(obj) : ENOSYS;
  });
  if (Watch(re)) Done(e, rc);
  if (!rc) ip::Forget(obj);
  return rc;
}

// The event of a simple create verb: the new object's id under its parent.
template <typename T>
T* AfterCreate(const Reentry& re, rdmasan::core::StackId stack, EventKind kind, const void* parent, T* obj) {
  if (!Watch(re)) return obj;
  Event e = Ev(kind, stack);
  e.parent = ip::Id(parent);
  if (obj) e.obj = ip::Assign(obj);
  Done(e, obj ? 0 : -1);
  return obj;
}

ibv_mr* AfterRegMr(const Reentry& re, rdmasan::core::StackId stack, ibv_pd* pd, ibv_mr* mr, void* addr,
                   size_t length, uint64_t iova, unsigned access) {
  if (!Watch(re)) return mr;
  Event e = Ev(EventKind::kRegMr, stack);
  e.parent = ip::Id(pd);
  e.addr = reinterpret_cast<uintptr_t>(addr);
  e.length = length;
  e.iova = iova;
  e.access = access;
  if (mr) {
    e.obj = ip::Assign(mr);
    e.lkey = mr->lkey;
    e.rkey = mr->rkey;
    ip::NoteRegistered(addr, length);
  }
  Done(e, mr ? 0 : -1);
  return mr;
}

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
  int rc = DestroyHolding(context, e.obj, [&] {
    if (IsSn(context)) return sn::CloseDevice(context);
    return real ? real(context) : ENOSYS;
  });
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
  if (IsSn(context)) return sn::QueryDevice(context, device_attr);
  return real ? real(context, device_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_query_port(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  REAL(ibv_query_port, "IBVERBS_1.1");
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
  if (IsSn(context)) return sn::QueryGid(context, port_num, index, gid);
  return real ? real(context, port_num, index, gid) : -1;
}

RDMASAN_EXPORT int _ibv_query_gid_ex(ibv_context* context, uint32_t port_num, uint32_t gid_index,
                                     ibv_gid_entry* entry, uint32_t flags, size_t entry_size) {
  REAL(_ibv_query_gid_ex, "IBVERBS_1.11");
  if (IsSn(context)) return sn::QueryGidEx(context, port_num, gid_index, entry, flags, entry_size);
  return real ? real(context, port_num, gid_index, entry, flags, entry_size) : ENOSYS;
}

RDMASAN_EXPORT ssize_t _ibv_query_gid_table(ibv_context* context, ibv_gid_entry* entries, size_t max_entries,
                                            uint32_t flags, size_t entry_size) {
  REAL(_ibv_query_gid_table, "IBVERBS_1.11");
  if (IsSn(context)) return sn::QueryGidTable(context, entries, max_entries, flags, entry_size);
  return real ? real(context, entries, max_entries, flags, entry_size) : -ENOSYS;
}

RDMASAN_EXPORT int ibv_query_pkey(ibv_context* context, uint8_t port_num, int index, __be16* pkey) {
  REAL(ibv_query_pkey, "IBVERBS_1.1");
  if (IsSn(context)) return sn::QueryPkey(context, port_num, index, pkey);
  return real ? real(context, port_num, index, pkey) : -1;
}

RDMASAN_EXPORT int ibv_get_pkey_index(ibv_context* context, uint8_t port_num, __be16 pkey) {
  REAL(ibv_get_pkey_index, "IBVERBS_1.5");
  if (IsSn(context)) return sn::GetPkeyIndex(context, port_num, pkey);
  return real ? real(context, port_num, pkey) : -1;
}

// --------------------------------------------------------------- PD / MR --

RDMASAN_EXPORT ibv_pd* ibv_alloc_pd(ibv_context* context) {
  REAL(ibv_alloc_pd, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  if (RefuseDestroyed(EventKind::kAllocPd, context, stack, re, /*as_parent=*/true)) return nullptr;
  ibv_pd* pd = Fails(re, Point::kAllocPd, context) ? nullptr
               : IsSn(context)                     ? sn::AllocPd(context)
               : real                              ? real(context)
                                                   : (errno = ENOSYS, nullptr);
  return AfterCreate(re, stack, EventKind::kAllocPd, context, pd);
}

RDMASAN_EXPORT int ibv_dealloc_pd(ibv_pd* pd) {
  REAL(ibv_dealloc_pd, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  // A parent domain is a handle of its PD to the books (interpose/domains.h):
  // deallocating it ends no PD.
  if (ip::IsParentDomain(pd)) {
    const int rc = IsSn(pd->context) ? sn::DeallocPd(pd) : real ? real(pd) : ENOSYS;
    if (!rc) ip::ForgetParentDomain(pd);
    return rc;
  }
  return Destroy(EventKind::kDeallocPd, pd, stack, re, sn::DeallocPd, real);
}

// An imported object is a handle of the object the books already know
// (interpose/domains.h); unimport forgets the handle, nothing else.
RDMASAN_EXPORT ibv_pd* ibv_import_pd(ibv_context* context, uint32_t pd_handle) {
  REAL(ibv_import_pd, "IBVERBS_1.10");
  Reentry re;
  if (IsSn(context)) {
    ibv_pd* original = nullptr;
    ibv_pd* pd = sn::ImportPd(context, pd_handle, &original);
    if (pd && re.outer()) ip::NoteAlias(pd, original);
    return pd;
  }
  if (!real) return errno = EOPNOTSUPP, nullptr;
  return real(context, pd_handle);
}

RDMASAN_EXPORT void ibv_unimport_pd(ibv_pd* pd) {
  REAL(ibv_unimport_pd, "IBVERBS_1.10");
  if (IsSn(pd->context)) {
    ip::Forget(pd);
    return sn::UnimportPd(pd);
  }
  if (real) real(pd);
}

// The three registration entry points differ only in how they call the
// real function; softnic takes every one of them the same way.
template <typename CallReal>
ibv_mr* RegMr(const Reentry& re, rdmasan::core::StackId stack, ibv_pd* pd, void* addr, size_t length,
              uint64_t iova, unsigned access, bool have_real, CallReal call_real) {
  ibv_mr* mr = Fails(re, Point::kRegMr, pd) ? nullptr
               : IsSn(pd->context)          ? sn::RegMr(pd, addr, length, iova, access)
               : have_real                  ? call_real()
                                            : (errno = ENOSYS, nullptr);
  return AfterRegMr(re, stack, pd, mr, addr, length, iova, access);
}

RDMASAN_EXPORT ibv_mr* ibv_reg_mr(ibv_pd* pd, void* addr, size_t length, int access) {
  REAL(ibv_reg_mr, "IBVERBS_1.1");
  Reentry re;
  const auto stack = REG_STACK();
  return RegMr(re, stack, pd, addr, length, reinterpret_cast<uintptr_t>(addr), access, real != nullptr,
               [&] { return real(pd, addr, length, access); });
}

RDMASAN_EXPORT ibv_mr* ibv_reg_mr_iova(ibv_pd* pd, void* addr, size_t length, uint64_t iova, int access) {
  REAL(ibv_reg_mr_iova, "IBVERBS_1.7");
  Reentry re;
  const auto stack = REG_STACK();
  return RegMr(re, stack, pd, addr, length, iova, access, real != nullptr,
               [&] { return real(pd, addr, length, iova, access); });
}

RDMASAN_EXPORT ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, size_t length, uint64_t iova,
                                        unsigned access) {
  REAL(ibv_reg_mr_iova2, "IBVERBS_1.8");
  Reentry re;
  const auto stack = REG_STACK();
  return RegMr(re, stack, pd, addr, length, iova, access, real != nullptr,
               [&] { return real(pd, addr, length, iova, access); });
}

RDMASAN_EXPORT ibv_mr* ibv_reg_dmabuf_mr(ibv_pd* pd, uint64_t offset, size_t length, uint64_t iova, int fd,
                                         int access) {
  REAL(ibv_reg_dmabuf_mr, "IBVERBS_1.12");
  if (IsSn(pd->context) || !real) return errno = EOPNOTSUPP, nullptr;
  Reentry re;
  if (Fails(re, Point::kRegMr, pd)) return nullptr;
  return real(pd, offset, length, iova, fd, access);
}

RDMASAN_EXPORT ibv_mr* ibv_import_mr(ibv_pd* pd, uint32_t mr_handle) {
  REAL(ibv_import_mr, "IBVERBS_1.10");
  Reentry re;
  if (IsSn(pd->context)) {
    ibv_mr* original = nullptr;
    ibv_mr* mr = sn::ImportMr(pd, mr_handle, &original);
    if (mr && re.outer()) ip::NoteAlias(mr, original);
    return mr;
  }
  if (!real) return errno = EOPNOTSUPP, nullptr;
  return real(pd, mr_handle);
}

RDMASAN_EXPORT void ibv_unimport_mr(ibv_mr* mr) {
  REAL(ibv_unimport_mr, "IBVERBS_1.10");
  if (IsSn(mr->context)) {
    ip::Forget(mr);
    return sn::UnimportMr(mr);
  }
  if (real) real(mr);
}

RDMASAN_EXPORT int ibv_rereg_mr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access) {
  REAL(ibv_rereg_mr, "IBVERBS_1.1");
  Reentry re;
  const auto stack = REG_STACK();
  void* const old_addr = mr->addr;
  const size_t old_length = mr->length;
  const uint32_t old_lkey = mr->lkey;
  const int rc = IsSn(mr->context) ? sn::ReregMr(mr, flags, pd, addr, length, access)
                 : real            ? real(mr, flags, pd, addr, length, access)
                                   : IBV_REREG_MR_ERR_INPUT;
  const rdmasan::core::ObjId id = ip::Id(mr);
  if (Watch(re) && id) {
    Event e = Ev(EventKind::kReregMr, stack);
    e.obj = id;
    e.count = static_cast<uint32_t>(flags);
    if (flags & IBV_REREG_MR_CHANGE_PD) e.parent = ip::Id(pd);
    if (flags & IBV_REREG_MR_CHANGE_TRANSLATION) {
      e.addr = e.iova = reinterpret_cast<uintptr_t>(addr);
      e.length = length;
    }
    if (flags & IBV_REREG_MR_CHANGE_ACCESS) e.access = static_cast<uint32_t>(access);
    e.lkey = mr->lkey;
    e.rkey = mr->rkey;
    Done(e, rc);
  }
  // The memory the registration covers moved (free-registered watches it;
  // after ERR_DO_FORK_OLD too: "New MR is valid").  The old range stays
  // watched while WRs posted through the old registration are outstanding
  // (rereg-in-flight was just reported; free-in-flight still applies to
  // that memory), as after ibv_dereg_mr.
  if ((rc == 0 || rc == IBV_REREG_MR_ERR_DO_FORK_OLD) && id && (flags & IBV_REREG_MR_CHANGE_TRANSLATION)) {
    if (!(re.outer() && ip::LkeyInFlight(old_lkey))) ip::NoteDeregistered(old_addr, old_length);
    ip::NoteRegistered(addr, length);
  }
  return rc;
}

RDMASAN_EXPORT int ibv_dereg_mr(ibv_mr* mr) {
  REAL(ibv_dereg_mr, "IBVERBS_1.1");
  Reentry re;
  const auto stack = REG_STACK();
  if (RefuseDestroyed(EventKind::kDeregMr, mr, stack, re)) return EINVAL;
  Event e = Ev(EventKind::kDeregMr, stack);
  e.obj = ip::Id(mr);
  e.lkey = mr->lkey;
  void* const addr = mr->addr;
  const size_t length = mr->length;
  const bool tracked = e.obj != 0;
  int rc = DestroyHolding(mr, e.obj, [&] {
    return IsSn(mr->context) ? sn::DeregMr(mr) : real ? real(mr) : ENOSYS;
  });
  if (Watch(re)) Done(e, rc);
  // The memory of WRs still in flight stays watched (free-in-flight) after
  // their MR is gone (dereg-in-flight was just reported): the NIC may still
  // use it until the retiring completion.  Its free then drops it.
  if (!rc && tracked && !(re.outer() && ip::LkeyInFlight(e.lkey))) ip::NoteDeregistered(addr, length);
  if (!rc) ip::Forget(mr);
  return rc;
}

RDMASAN_EXPORT ibv_dm* ibv_import_dm(ibv_context* context, uint32_t dm_handle) {
  REAL(ibv_import_dm, "IBVERBS_1.13");
  if (IsSn(context)) return sn::ImportDm(context, dm_handle);
  if (!real) return errno = EOPNOTSUPP, nullptr;
  return real(context, dm_handle);
}

RDMASAN_EXPORT void ibv_unimport_dm(ibv_dm* dm) {
  REAL(ibv_unimport_dm, "IBVERBS_1.13");
  if (IsSn(dm->context)) return sn::UnimportDm(dm);
  if (real) real(dm);
}

// ------------------------------------------------------- channels and CQs --

RDMASAN_EXPORT ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
  REAL(ibv_create_comp_channel, "IBVERBS_1.0");
  Reentry re;
  if (RefuseDestroyed(EventKind::kCreateCompChannel, context, CALLER_STACK(), re, /*as_parent=*/true))
    return nullptr;
  ibv_comp_channel* ch = Fails(re, Point::kCreateCompChannel, context) ? nullptr
                         : IsSn(context)                               ? sn::CreateCompChannel(context)
                         : real                                        ? real(context)
                                                                       : (errno = ENOSYS, nullptr);
  if (ch && re.outer()) ip::Assign(ch);
  return ch;
}

RDMASAN_EXPORT int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
  REAL(ibv_destroy_comp_channel, "IBVERBS_1.0");
  int rc = IsSn(channel->context) ? sn::DestroyCompChannel(channel) : real ? real(channel) : ENOSYS;
  if (!rc) ip::Forget(channel);
  return rc;
}

RDMASAN_EXPORT ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context,
                                     ibv_comp_channel* channel, int comp_vector) {
  REAL(ibv_create_cq, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  if (RefuseDestroyed(EventKind::kCreateCq, context, stack, re, /*as_parent=*/true)) return nullptr;
  ibv_cq* cq = Fails(re, Point::kCreateCq, context) ? nullptr
               : IsSn(context) ? sn::CreateCq(context, cqe, cq_context, channel, comp_vector)
               : real          ? real(context, cqe, cq_context, channel, comp_vector)
                               : (errno = ENOSYS, nullptr);
  if (Watch(re)) ip::OnCreateCq(cq, context, channel, stack);
  return cq;
}

RDMASAN_EXPORT int ibv_resize_cq(ibv_cq* cq, int cqe) {
  REAL(ibv_resize_cq, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  if (RefuseDestroyed(EventKind::kResizeCq, cq, stack, re)) return EINVAL;
  const int rc = IsSn(cq->context) ? sn::ResizeCq(cq, cqe) : real ? real(cq, cqe) : ENOSYS;
  const rdmasan::core::ObjId id = ip::Id(cq);
  if (Watch(re) && id) {
    Event e = Ev(EventKind::kResizeCq, stack);
    e.obj = id;
    e.cqe = rc == 0 ? cq->cqe : cqe;
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT int ibv_destroy_cq(ibv_cq* cq) {
  REAL(ibv_destroy_cq, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  int rc = Destroy(EventKind::kDestroyCq, cq, stack, re, sn::DestroyCq, real);
  if (!rc) ip::ForgetCq(cq);
  return rc;
}

RDMASAN_EXPORT int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
  REAL(ibv_get_cq_event, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  const bool watch = Watch(re);
  if (watch) {
    Event w = Ev(EventKind::kWaitCqEvent, stack);
    w.obj = ip::Id(channel);
    Done(w, 0);
  }
  ip::FlushTraceBeforeBlocking();
  int rc = IsSn(channel->context) ? sn::GetCqEvent(channel, cq, cq_context)
           : real                 ? real(channel, cq, cq_context)
                                  : -1;
  if (watch) {
    Event e = Ev(EventKind::kGetCqEvent, stack);
    e.obj = rc == 0 ? ip::Id(*cq) : 0;
    e.channel = ip::Id(channel);
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
  REAL(ibv_ack_cq_events, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  if (IsSn(cq->context))
    sn::AckCqEvents(cq, nevents);
  else if (real)
    real(cq, nevents);
  if (Watch(re)) {
    Event e = Ev(EventKind::kAckCqEvents, stack);
    e.obj = ip::Id(cq);
    e.count = nevents;
    Done(e, 0);
  }
}

// ------------------------------------------------------------------- SRQ --

RDMASAN_EXPORT ibv_srq* ibv_create_srq(ibv_pd* pd, ibv_srq_init_attr* srq_init_attr) {
  REAL(ibv_create_srq, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  ibv_srq* srq = Fails(re, Point::kCreateSrq, pd) ? nullptr
                 : IsSn(pd->context)              ? sn::CreateSrq(pd, srq_init_attr)
                 : real                           ? real(pd, srq_init_attr)
                                                  : (errno = ENOSYS, nullptr);
  if (Watch(re)) {
    Event e = Ev(EventKind::kCreateSrq, stack);
    e.parent = ip::Id(pd);
    e.caps.max_recv_wr = srq_init_attr->attr.max_wr;
    e.caps.max_recv_sge = srq_init_attr->attr.max_sge;
    if (srq) e.obj = ip::Assign(srq, {0, srq_init_attr->attr.max_sge, 0, srq_init_attr->attr.max_wr});
    Done(e, srq ? 0 : -1);
  }
  return srq;
}

RDMASAN_EXPORT int ibv_modify_srq(ibv_srq* srq, ibv_srq_attr* srq_attr, int srq_attr_mask) {
  REAL(ibv_modify_srq, "IBVERBS_1.1");
  if (IsSn(srq->context)) return sn::ModifySrq(srq, srq_attr, srq_attr_mask);
  return real ? real(srq, srq_attr, srq_attr_mask) : ENOSYS;
}

RDMASAN_EXPORT int ibv_query_srq(ibv_srq* srq, ibv_srq_attr* srq_attr) {
  REAL(ibv_query_srq, "IBVERBS_1.1");
  if (IsSn(srq->context)) return sn::QuerySrq(srq, srq_attr);
  return real ? real(srq, srq_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_destroy_srq(ibv_srq* srq) {
  REAL(ibv_destroy_srq, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroySrq, srq, stack, re, sn::DestroySrq, real);
}

// -------------------------------------------------------------------- QP --

RDMASAN_EXPORT ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* qp_init_attr) {
  REAL(ibv_create_qp, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  ibv_qp* qp = Fails(re, Point::kCreateQp, pd) ? nullptr
               : IsSn(pd->context)             ? sn::CreateQp(pd, qp_init_attr)
               : real                          ? real(pd, qp_init_attr)
                                               : (errno = ENOSYS, nullptr);
  if (Watch(re))
    ip::OnCreateQp(qp, pd, qp_init_attr->cap, qp_init_attr->send_cq, qp_init_attr->recv_cq, qp_init_attr->srq,
                   qp_init_attr->qp_type, qp_init_attr->sq_sig_all, stack);
  if (qp && re.outer()) ip::NoteQp(qp, qp_init_attr->srq);  // for wc.error and the scheduler's streams
  return qp;
}

RDMASAN_EXPORT int ibv_modify_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask) {
  REAL(ibv_modify_qp, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  int rc = IsSn(qp->context) ? sn::ModifyQp(qp, attr, attr_mask) : real ? real(qp, attr, attr_mask) : ENOSYS;
  if (Watch(re)) {
    Event e = Ev(EventKind::kModifyQp, stack);
    e.obj = ip::Id(qp);
    e.attr_mask = attr_mask;
    e.qp_state = (attr_mask & IBV_QP_STATE) ? attr->qp_state : 0;
    e.access = (attr_mask & IBV_QP_ACCESS_FLAGS) ? attr->qp_access_flags : 0;
    Done(e, rc);
  }
  return rc;
}

RDMASAN_EXPORT int ibv_query_qp(ibv_qp* qp, ibv_qp_attr* attr, int attr_mask, ibv_qp_init_attr* init_attr) {
  REAL(ibv_query_qp, "IBVERBS_1.1");
  if (IsSn(qp->context)) return sn::QueryQp(qp, attr, attr_mask, init_attr);
  return real ? real(qp, attr, attr_mask, init_attr) : ENOSYS;
}

RDMASAN_EXPORT int ibv_destroy_qp(ibv_qp* qp) {
  REAL(ibv_destroy_qp, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  // Not a stale handle's fields (a destroyed QP is refused below).
  if (re.outer() && (ip::Id(qp) != 0 || !ip::Checking())) ip::ForgetQpNum(qp);
  int rc = Destroy(EventKind::kDestroyQp, qp, stack, re, sn::DestroyQp, real);
  if (!rc) ip::ForgetQp(qp);
  return rc;
}

RDMASAN_EXPORT ibv_qp_ex* ibv_qp_to_qp_ex(ibv_qp* qp) {
  REAL(ibv_qp_to_qp_ex, "IBVERBS_1.6");
  if (IsSn(qp->context)) return sn::QpToQpEx(qp);
  return real ? real(qp) : nullptr;
}

RDMASAN_EXPORT int ibv_query_ece(ibv_qp* qp, ibv_ece* ece) {
  REAL(ibv_query_ece, "IBVERBS_1.10");
  if (IsSn(qp->context) || !real) return EOPNOTSUPP;
  return real(qp, ece);
}

RDMASAN_EXPORT int ibv_set_ece(ibv_qp* qp, ibv_ece* ece) {
  REAL(ibv_set_ece, "IBVERBS_1.10");
  if (IsSn(qp->context) || !real) return EOPNOTSUPP;
  return real(qp, ece);
}

RDMASAN_EXPORT int ibv_query_qp_data_in_order(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags) {
  REAL(ibv_query_qp_data_in_order, "IBVERBS_1.14");
  if (IsSn(qp->context)) return 0;  // no in-order guarantee is promised
  return real ? real(qp, op, flags) : 0;
}

RDMASAN_EXPORT int ibv_attach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  REAL(ibv_attach_mcast, "IBVERBS_1.1");
  if (IsSn(qp->context)) return sn::AttachMcast(qp, gid, lid);
  return real ? real(qp, gid, lid) : ENOSYS;
}

RDMASAN_EXPORT int ibv_detach_mcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid) {
  REAL(ibv_detach_mcast, "IBVERBS_1.1");
  if (IsSn(qp->context)) return sn::DetachMcast(qp, gid, lid);
  return real ? real(qp, gid, lid) : ENOSYS;
}

// -------------------------------------------------------------------- AH --

RDMASAN_EXPORT ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
  REAL(ibv_create_ah, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  ibv_ah* ah = Fails(re, Point::kCreateAh, pd) ? nullptr
               : IsSn(pd->context)             ? sn::CreateAh(pd, attr)
               : real                          ? real(pd, attr)
                                               : (errno = ENOSYS, nullptr);
  return AfterCreate(re, stack, EventKind::kCreateAh, pd, ah);
}

RDMASAN_EXPORT int ibv_destroy_ah(ibv_ah* ah) {
  REAL(ibv_destroy_ah, "IBVERBS_1.1");
  Reentry re;
  const auto stack = CALLER_STACK();
  return Destroy(EventKind::kDestroyAh, ah, stack, re, sn::DestroyAh, real);
}

RDMASAN_EXPORT int ibv_init_ah_from_wc(ibv_context* context, uint8_t port_num, ibv_wc* wc, ibv_grh* grh,
                                       ibv_ah_attr* ah_attr) {
  REAL(ibv_init_ah_from_wc, "IBVERBS_1.1");
  if (!IsSn(context)) return real ? real(context, port_num, wc, grh, ah_attr) : ENOSYS;
  return sn::InitAhFromWc(context, port_num, wc, grh, ah_attr);
}

RDMASAN_EXPORT ibv_ah* ibv_create_ah_from_wc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  REAL(ibv_create_ah_from_wc, "IBVERBS_1.1");
  if (!IsSn(pd->context)) {
    if (!real) return errno = ENOSYS, nullptr;
    return real(pd, wc, grh, port_num);
  }
  ibv_ah_attr attr;
  if (ibv_init_ah_from_wc(pd->context, port_num, wc, grh, &attr)) return errno = EINVAL, nullptr;
  return sn::CreateAh(pd, &attr);
}

RDMASAN_EXPORT int ibv_resolve_eth_l2_from_gid(ibv_context* context, ibv_ah_attr* attr, uint8_t eth_mac[6],
                                               uint16_t* vid) {
  REAL(ibv_resolve_eth_l2_from_gid, "IBVERBS_1.1");
  if (IsSn(context)) {
    if (!sn::PortIsEthernet()) return EINVAL;  // InfiniBand link layer: no Ethernet L2
    // softnic's RoCE port is the host's loopback: every peer's MAC is
    // 00:00:00:00:00:00, with no VLAN.
    memset(eth_mac, 0, 6);
    if (vid) *vid = 0xffff;
    return attr && attr->is_global ? 0 : EINVAL;
  }
  return real ? real(context, attr, eth_mac, vid) : ENOSYS;
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
  if (IsSn(context)) {
    uint32_t t = IBV_GID_TYPE_IB;
    if (sn::QueryGidType(context, port_num, index, &t)) return -1;
    *type = t == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;  // sysfs terms: RoCE v2, else IB / RoCE v1
    return 0;
  }
  return real ? real(context, port_num, index, type) : -1;
}
