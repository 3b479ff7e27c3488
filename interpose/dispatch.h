// interpose/dispatch: the one way from an exported verb to a device, as
// libibverbs reaches a provider through its ops.  The shim holds two
// dispatch tables, one type: softnic's (its free functions, softnic.h) and
// the real one (libibverbs' own exported functions, found once by symbol
// and version through loader.h's RealSym).  Each exported verb runs its
// prologue and checks, then calls `TableOf(ctx).verb(...)`: TableOf is the
// only place that tells a softnic context (device, command fd) from a real
// one.  The entries are listed once, in dispatch.inc.
//
// A real entry is looked up on its first call; while libibverbs has no such
// function it is looked up again once the process loaded something new,
// and the call gets the answer the shim always gave without it (ENOSYS,
// EOPNOTSUPP, NULL with errno: dispatch.inc).  Once found, the entry holds
// the function: a call is one load and one indirect call, softnic's too.
//
// What softnic leaves missing that a real provider may have: ibv_reg_dmabuf_mr
// (EOPNOTSUPP), ibv_query_ece and ibv_set_ece (EOPNOTSUPP).
//
// May not: reach libibverbs' private symbols or its verbs_context_ops
// (public ABI only; ibv_query_gid_type is the one private symbol, found by
// its default version), or hold the shim's policy (checks, events,
// refusals of dead handles): that stays in the exports.
#ifndef RDMASAN_INTERPOSE_DISPATCH_H_
#define RDMASAN_INTERPOSE_DISPATCH_H_

#include <errno.h>
#include <infiniband/verbs.h>

#include <atomic>

#include "interpose/loader.h"
#include "softnic/softnic.h"

namespace rdmasan::interpose {

struct DispatchTable;
// The real table, for a real entry's first call (DispatchEntry::LookUp).
inline DispatchTable& RealTableForLookUp();

// One entry: a function with the signature `Sig`, called like one.
template <typename Sig>
class DispatchEntry;
template <typename Ret, typename... Args>
class DispatchEntry<Ret(Args...)> {
 public:
  using Fn = Ret (*)(Args...);

  // A fixed entry (softnic's): `fn` if `has_fn`, else `missing`.  (Whether
  // a function is there is said, not tested: under -fsanitize=undefined a
  // function's address compared with null is no constant expression.)
  constexpr DispatchEntry(Fn fn, Fn missing, bool has_fn)
      : fn_(has_fn ? fn : missing), missing_(missing), sym_(nullptr, nullptr), looked_up_(false) {}
  // A real entry: `adapter` if `has_adapter` (it finds what it calls
  // itself), else libibverbs' `symbol` at `version`, looked up on the first
  // call.
  constexpr DispatchEntry(Fn adapter, Fn missing, Fn look_up, const char* symbol, const char* version,
                          bool has_adapter)
      : fn_(has_adapter ? adapter : look_up),
        missing_(missing),
        sym_(symbol, version),
        looked_up_(!has_adapter) {}

  Ret operator()(Args... args) const { return fn_.load(std::memory_order_acquire)(args...); }

  // The device's function, or null where the device has none (a real one
  // that libibverbs lacks now: looked up again, it may come later).
  Fn Find() const {
    if (!looked_up_) {
      const Fn f = fn_.load(std::memory_order_acquire);
      return f == missing_ ? nullptr : f;
    }
    const Fn f = reinterpret_cast<Fn>(sym_.Get());
    if (f) fn_.store(f, std::memory_order_release);
    return f;
  }

  // The first calls of a real entry: the function once found, else the
  // missing answer.  `kSelf` names the entry in the real table.
  template <DispatchEntry DispatchTable::*kSelf>
  static Ret LookUp(Args... args) {
    const DispatchEntry& self = RealTableForLookUp().*kSelf;
    if (const Fn f = self.Find()) return f(args...);
    return self.missing_(args...);
  }

 private:
  mutable std::atomic<Fn> fn_;
  const Fn missing_;
  mutable RealSym sym_;
  const bool looked_up_;  // false: a fixed entry, or an adapter
};

struct DispatchTable {
#define RDMASAN_DISPATCH(entry, Ret, Params, symbol, version, softnic, real, missing) \
  DispatchEntry<Ret Params> entry;
#include "interpose/dispatch.inc"
#undef RDMASAN_DISPATCH
  // What the shim may assume of the device's objects.  Every CQ of
  // create_cq is an ibv_cq_ex (softnic's are; a real provider's: unknown).
  bool cq_is_cq_ex;
  // A destroyed QP's memory stays readable for a while (softnic.h DestroyQp).
  bool keeps_destroyed_qps;
};

namespace dispatch_detail {
// Constant-initialized (dispatch.cc): usable before any constructor ran.
extern DispatchTable g_softnic_table;
extern DispatchTable g_real_table;
}  // namespace dispatch_detail

inline const DispatchTable& SoftnicTable() { return dispatch_detail::g_softnic_table; }
inline const DispatchTable& RealTable() { return dispatch_detail::g_real_table; }
inline DispatchTable& RealTableForLookUp() { return dispatch_detail::g_real_table; }

// The table of a context's device (a null context: the real table).
inline const DispatchTable& TableOf(const ibv_context* ctx) {
  return softnic::IsContext(ctx) ? SoftnicTable() : RealTable();
}
// The table of a device.
inline const DispatchTable& TableOf(const ibv_device* device) {
  return softnic::IsDevice(device) ? SoftnicTable() : RealTable();
}
// The table of a context's command fd (ibv_import_device).
inline const DispatchTable& TableOfCommandFd(int cmd_fd) {
  return softnic::IsContextFd(cmd_fd) ? SoftnicTable() : RealTable();
}

// While the real ibv_import_device runs on this thread, the device list it
// asks for is the real one alone (exports.cc's ibv_get_device_list reads it).
struct RealDeviceListOnly {
  RealDeviceListOnly() { active = true; }
  ~RealDeviceListOnly() { active = false; }
  static constinit thread_local bool active;
};

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_DISPATCH_H_
