// The two dispatch tables (interpose/dispatch.h): softnic's, with the
// adapters where softnic answers a verb otherwise than its function's
// signature, and the real one, with the adapters where the table's entry is
// not libibverbs' function.  Both are built from dispatch.inc.
#include "interpose/dispatch.h"

#include <errno.h>
#include <sys/stat.h>

#include <cstddef>
#include <cstring>
#include <type_traits>

namespace sn = rdmasan::softnic;

// A private libibverbs symbol (dispatch.inc); the shim defines it too.
extern "C" int ibv_query_gid_type(ibv_context* context, uint8_t port_num, unsigned int index, int* type);

namespace rdmasan::interpose {

constinit thread_local bool RealDeviceListOnly::active = false;

namespace {

// ----------------------------------------------------------- softnic's --

const char* SoftnicDeviceName(ibv_device* device) { return device->name; }
__be64 SoftnicDeviceGuid(ibv_device*) { return sn::DeviceGuid(); }
int SoftnicDeviceIndex(ibv_device*) { return 0x7f00; }  // not a kernel index

int SoftnicQueryPort(ibv_context* context, uint8_t port_num, _compat_ibv_port_attr* port_attr) {
  // The old layout is the prefix of ibv_port_attr up to link_layer.
  ibv_port_attr a;
  const int rc = sn::QueryPort(context, port_num, &a);
  if (!rc) memcpy(port_attr, &a, offsetof(ibv_port_attr, link_layer) + 1);
  return rc;
}

int SoftnicQueryGidType(ibv_context* context, uint8_t port_num, unsigned int index, int* type) {
  uint32_t t = IBV_GID_TYPE_IB;
  if (sn::QueryGidType(context, port_num, index, &t)) return -1;
  *type = t == IBV_GID_TYPE_ROCE_V2 ? 1 : 0;  // sysfs terms: RoCE v2, else IB / RoCE v1
  return 0;
}

ibv_mr* SoftnicRegMr(ibv_pd* pd, void* addr, size_t length, int access) {
  return sn::RegMr(pd, addr, length, reinterpret_cast<uintptr_t>(addr), access);
}

ibv_ah* SoftnicCreateAhFromWc(ibv_pd* pd, ibv_wc* wc, ibv_grh* grh, uint8_t port_num) {
  ibv_ah_attr attr;
  if (sn::InitAhFromWc(pd->context, port_num, wc, grh, &attr)) return errno = EINVAL, nullptr;
  return sn::CreateAh(pd, &attr);
}

int SoftnicResolveEthL2FromGid(ibv_context*, ibv_ah_attr* attr, uint8_t* eth_mac, uint16_t* vid) {
  if (!sn::PortIsEthernet()) return EINVAL;  // InfiniBand link layer: no Ethernet L2
  // softnic's RoCE port is the host's loopback: every peer's MAC is
  // 00:00:00:00:00:00, with no VLAN.
  memset(eth_mac, 0, 6);
  if (vid) *vid = 0xffff;
  return attr && attr->is_global ? 0 : EINVAL;
}

// softnic's function `kFn` as an entry of signature `Sig`: itself where the
// types match, else a call that converts the arguments; null for none.
template <typename Sig, auto kFn>
struct Softnic;
template <typename Ret, typename... Args, auto kFn>
struct Softnic<Ret(Args...), kFn> {
  static Ret Call(Args... args) { return kFn(args...); }
  static constexpr Ret (*Fn())(Args...) {
    if constexpr (std::is_same_v<decltype(kFn), std::nullptr_t>) {
      return nullptr;
    } else if constexpr (std::is_same_v<decltype(kFn), Ret (*)(Args...)>) {
      return kFn;
    } else {
      return &Call;
    }
  }
};

// --------------------------------------------------------- the real one --

// libibverbs' ibv_import_device, asked only about a character device (its
// own answer for anything else, without asking it), with the real device
// list alone: softnic0 is no device of libibverbs', and reading it as one
// crashes.
ibv_context* RealImportDevice(int cmd_fd) {
  struct stat st;
  if (fstat(cmd_fd, &st) != 0 || !S_ISCHR(st.st_mode)) return errno = EINVAL, nullptr;
  static constinit RealSym sym("ibv_import_device", "IBVERBS_1.10");
  const auto real = reinterpret_cast<decltype(&::ibv_import_device)>(sym.Get());
  if (!real) return errno = EOPNOTSUPP, nullptr;
  RealDeviceListOnly only;
  return real(cmd_fd);
}

// A real provider's import does not say which object the handle names.
ibv_pd* RealImportPd(ibv_context* context, uint32_t pd_handle, ibv_pd** original) {
  *original = nullptr;
  static constinit RealSym sym("ibv_import_pd", "IBVERBS_1.10");
  const auto real = reinterpret_cast<decltype(&::ibv_import_pd)>(sym.Get());
  if (!real) return errno = EOPNOTSUPP, nullptr;
  return real(context, pd_handle);
}

ibv_mr* RealImportMr(ibv_pd* pd, uint32_t mr_handle, ibv_mr** original) {
  *original = nullptr;
  static constinit RealSym sym("ibv_import_mr", "IBVERBS_1.10");
  const auto real = reinterpret_cast<decltype(&::ibv_import_mr)>(sym.Get());
  if (!real) return errno = EOPNOTSUPP, nullptr;
  return real(pd, mr_handle);
}

// An adapter of the real table (or null: libibverbs' function itself).
template <typename Sig, auto kAdapter>
constexpr Sig* RealAdapter() {
  if constexpr (std::is_same_v<decltype(kAdapter), std::nullptr_t>) {
    return nullptr;
  } else {
    return kAdapter;
  }
}

// Where the table calls libibverbs' function itself, the entry's signature
// is that of the function's public declaration.
template <typename Sig, auto kAdapter, typename Declared>
constexpr bool IsLibibverbsSignature(Declared) {
  return !std::is_same_v<decltype(kAdapter), std::nullptr_t> || std::is_same_v<Declared, Sig*>;
}

#define RDMASAN_DISPATCH(entry, Ret, Params, symbol, version, softnic, real, missing) \
  static_assert(IsLibibverbsSignature<Ret Params, real>(&::symbol), #symbol ": not libibverbs' signature");
#include "interpose/dispatch.inc"
#undef RDMASAN_DISPATCH

}  // namespace

// The missing answer of an entry, as a function of the entry's signature.
#define RDMASAN_MISSING(Ret, Params, missing) \
  static_cast<Ret(*) Params>([](auto...) -> Ret { return missing; })

namespace dispatch_detail {

constinit DispatchTable g_softnic_table = {
#define RDMASAN_DISPATCH(entry, Ret, Params, symbol, version, softnic, real, missing)  \
  .entry = {Softnic<Ret Params, softnic>::Fn(), RDMASAN_MISSING(Ret, Params, missing), \
            !std::is_same_v<decltype(softnic), std::nullptr_t>},
#include "interpose/dispatch.inc"
#undef RDMASAN_DISPATCH
    .cq_is_cq_ex = true,
    .keeps_destroyed_qps = true,
};

constinit DispatchTable g_real_table = {
#define RDMASAN_DISPATCH(entry, Ret, Params, symbol, version, softnic, real, missing) \
  .entry = {RealAdapter<Ret Params, real>(),                                          \
            RDMASAN_MISSING(Ret, Params, missing),                                    \
            &DispatchEntry<Ret Params>::template LookUp<&DispatchTable::entry>,       \
            #symbol,                                                                  \
            version,                                                                  \
            !std::is_same_v<decltype(real), std::nullptr_t>},
#include "interpose/dispatch.inc"
#undef RDMASAN_DISPATCH
    .cq_is_cq_ex = false,
    .keeps_destroyed_qps = false,
};

}  // namespace dispatch_detail

#undef RDMASAN_MISSING

}  // namespace rdmasan::interpose
