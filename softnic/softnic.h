// softnic: a user-space RDMA device presented through the public verbs ABI.
//
// softnic builds its own `struct verbs_context` (and ibv_qp_ex / ibv_cq_ex)
// so the inline data-path functions of <infiniband/verbs.h> dispatch into it
// directly; the interpose layer routes every exported verb whose object
// belongs to a softnic context here.  Objects of a softnic context never
// reach libibverbs.  The device behaves like a NIC: it honours and reports
// capacities, rejects over-posting with ENOMEM, turns protection and length
// violations into the error completions hardware gives, moves QPs to ERR and
// flushes, retries on RNR per rnr_retry, raises CQ_ERR on overrun.  Processes
// on one host talk through a shared-memory fabric (fabric.h).
//
// May not: touch memory that no valid key grants, start threads, block the
// caller except where the verb itself blocks (ibv_get_cq_event,
// ibv_get_async_event), or throw across the C ABI.
#ifndef RDMASAN_SOFTNIC_SOFTNIC_H_
#define RDMASAN_SOFTNIC_SOFTNIC_H_

#include <infiniband/verbs.h>
#include <signal.h>

#include <string>

namespace rdmasan::softnic {

// The vendor id ibv_query_device reports: 0x52444d, "RDM" in ASCII, an
// IEEE OUI with the locally-administered bit (0x02 of its first byte) set.
// The IEEE never assigns such a value to a vendor, so no tool knows it:
// tools key vendor paths on real OUIs (UCX's device table and mlx5 paths
// on Mellanox 0x02c9 / 0x15b3 with part ids, perftest on Mellanox, Intel,
// Amazon EFA, ...) and take their generic path for an unknown one (UCX:
// "Generic HCA").  Not 0: rdma-core's own tests assert vendor_id != 0.
// (rxe reports 0xffffff, the OUI no one owns; softnic is not rxe, and a
// tool that special-cases rxe should not take softnic for it.)
inline constexpr uint32_t kVendorId = 0x52444d;
// vendor_part_id: the first softnic; no table lists it.
inline constexpr uint32_t kVendorPartId = 1;

// The one softnic device (softnic0).
ibv_device* Device();
bool IsDevice(const ibv_device* dev);
bool IsContext(const ibv_context* ctx);

// Device-level verbs.
ibv_context* OpenDevice(ibv_device* dev);
int CloseDevice(ibv_context* ctx);
__be64 DeviceGuid();
int QueryDevice(ibv_context* ctx, ibv_device_attr* attr);
int QueryPort(ibv_context* ctx, uint8_t port, ibv_port_attr* attr);
int QueryGid(ibv_context* ctx, uint8_t port, int index, ibv_gid* gid);
int QueryGidEx(ibv_context* ctx, uint32_t port, uint32_t index, ibv_gid_entry* entry, uint32_t flags,
               size_t entry_size);
ssize_t QueryGidTable(ibv_context* ctx, ibv_gid_entry* entries, size_t max, uint32_t flags,
                      size_t entry_size);
// ibv_query_gid_type's answer in ibv_gid_type terms (IB, RoCE v1, v2); an
// empty entry is IB/RoCE v1.
int QueryGidType(ibv_context* ctx, uint8_t port, unsigned int index, uint32_t* type);
// ibv_init_ah_from_wc: the address vector that answers `wc` (its GRH: an
// IPv6-style GRH, or RoCE v2's IPv4 header), from the GID it came to.  0 or
// an errno (RoCE: a completion without a GRH).
int InitAhFromWc(ibv_context* ctx, uint8_t port, const ibv_wc* wc, const ibv_grh* grh, ibv_ah_attr* ah);
// Whether the port is a RoCE port (link layer Ethernet: softnic_port=roce).
bool PortIsEthernet();
int QueryPkey(ibv_context* ctx, uint8_t port, int index, __be16* pkey);
int GetPkeyIndex(ibv_context* ctx, uint8_t port, __be16 pkey);
int GetAsyncEvent(ibv_context* ctx, ibv_async_event* event);
void AckAsyncEvent(ibv_async_event* event);

ibv_pd* AllocPd(ibv_context* ctx);
int DeallocPd(ibv_pd* pd);
ibv_mr* RegMr(ibv_pd* pd, void* addr, size_t length, uint64_t iova, unsigned access);
int DeregMr(ibv_mr* mr);
// ibv_advise_mr (verbs_context op): 0 for advice on ODP MRs of `pd`
// (nothing to prefetch: softnic reads the address space at each access),
// EINVAL for a key that is not one, EPERM for PREFETCH_WRITE without
// LOCAL_WRITE, EOPNOTSUPP for an unknown advice or flag.
int AdviseMr(ibv_pd* pd, ibv_advise_mr_advice advice, uint32_t flags, ibv_sge* sg_list, uint32_t num_sge);
// ibv_rereg_mr as libibverbs and a provider give it together: 0, or an
// IBV_REREG_MR_ERR_* code with errno set.  A new translation gives the MR
// new keys (a NIC's new registration); a new PD or access keeps them.  An
// MR with bound windows is EBUSY.
int ReregMr(ibv_mr* mr, int flags, ibv_pd* pd, void* addr, size_t length, int access);

// Memory windows, type 1 and type 2 (2B: bound to a QP).  These are the
// verbs_context ops alloc_mw, dealloc_mw and bind_mw the inline
// ibv_alloc_mw, ibv_dealloc_mw and ibv_bind_mw call (softnic sets them when
// it opens a context).  A window's rkey is never an MR key; its low byte is
// the tag ibv_inc_rkey changes.  BindMw posts a type-1 bind on `qp` with
// the next tag and sets mw->rkey to it, as rxe does; type-2 binds are
// IBV_WR_BIND_MW work requests, which leave mw->rkey alone (as hardware).
ibv_mw* AllocMw(ibv_pd* pd, ibv_mw_type type);
int DeallocMw(ibv_mw* mw);
int BindMw(ibv_qp* qp, ibv_mw* mw, ibv_mw_bind* bind);

// Why an error completion happened: true, with a one-line reason in *why,
// for an error completion softnic delivered to `cq` recently (the last
// few hundred of the fabric are kept), matched by QP number, wr_id and
// status.  The reason names the process and verb of another process's
// action, and the wr_id or key of this one's.  Error path only: it takes
// the fabric lock.
bool ExplainCompletion(ibv_cq* cq, uint32_t qp_num, uint64_t wr_id, uint32_t status, std::string* why);

ibv_comp_channel* CreateCompChannel(ibv_context* ctx);
int DestroyCompChannel(ibv_comp_channel* ch);
ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch, int vector);
int ResizeCq(ibv_cq* cq, int cqe);
int DestroyCq(ibv_cq* cq);
int GetCqEvent(ibv_comp_channel* ch, ibv_cq** cq, void** cq_context);
void AckCqEvents(ibv_cq* cq, unsigned n);

ibv_srq* CreateSrq(ibv_pd* pd, ibv_srq_init_attr* attr);
int ModifySrq(ibv_srq* srq, ibv_srq_attr* attr, int mask);
int QuerySrq(ibv_srq* srq, ibv_srq_attr* attr);
int DestroySrq(ibv_srq* srq);

ibv_qp* CreateQp(ibv_pd* pd, ibv_qp_init_attr* attr);
int ModifyQp(ibv_qp* qp, ibv_qp_attr* attr, int mask);
// Fault injection (interpose/faults.h): an async event the device raises
// on its own, with what the device does with it.  IBV_EVENT_QP_FATAL: the
// QP goes to ERR (its WRs are flushed) and the event names it;
// IBV_EVENT_CQ_ERR: the CQ takes no more completions, as after an overrun;
// IBV_EVENT_PORT_ERR / IBV_EVENT_PORT_ACTIVE: the port event.  Other types
// are ignored.
void InjectAsync(ibv_context* ctx, ibv_event_type type, ibv_qp* qp, ibv_cq* cq);
int QueryQp(ibv_qp* qp, ibv_qp_attr* attr, int mask, ibv_qp_init_attr* init);
// A destroyed QP's memory stays valid (a QP in RESET that refuses posts)
// until 256 later QP destroys (qp.cc Retire).
int DestroyQp(ibv_qp* qp);
ibv_qp_ex* QpToQpEx(ibv_qp* qp);
// ibv_query_qp_data_in_order(3): 1 (with IBV_QUERY_QP_DATA_IN_ORDER_RETURN_CAPS:
// WHOLE_MSG | ALIGNED_128_BYTES) while chaos places no message out of
// order (--chaos names neither place nor relaxed), else 0.
int QueryQpDataInOrder(ibv_qp* qp, ibv_wr_opcode op, uint32_t flags);

// Multicast (mcast.cc): ibv_attach_mcast / ibv_detach_mcast.  A UD QP
// joins the group (gid, lid) of the fabric; a UD send to QPN 0xFFFFFF
// with an AH naming the group reaches every QP attached to it, in every
// process.  EINVAL: not a UD QP, a GID that is not multicast, a LID
// outside 0xC000-0xFFFE (the port is InfiniBand), or (detach) a QP not
// attached to the group, as rxe answers; ENOMEM: a table full (see
// max_mcast_grp, max_mcast_qp_attach, max_total_mcast_qp_attach).
// Attaching twice is one attachment (0).
int AttachMcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid);
int DetachMcast(ibv_qp* qp, const ibv_gid* gid, uint16_t lid);

ibv_ah* CreateAh(ibv_pd* pd, ibv_ah_attr* attr);
int DestroyAh(ibv_ah* ah);

// Device memory (dm.cc): the verbs_context ops alloc_dm, free_dm and
// reg_dm_mr (zero-based MRs on the allocation), and import by dm->handle.
ibv_dm* AllocDm(ibv_context* ctx, ibv_alloc_dm_attr* attr);
int FreeDm(ibv_dm* dm);
ibv_mr* RegDmMr(ibv_pd* pd, ibv_dm* dm, uint64_t dm_offset, size_t length, unsigned access);
ibv_dm* ImportDm(ibv_context* ctx, uint32_t dm_handle);
void UnimportDm(ibv_dm* dm);

// Thread and parent domains (domain.cc): the verbs_context ops alloc_td,
// dealloc_td, alloc_parent_domain; a parent domain is an ibv_pd that
// DeallocPd deallocates.  ProtectionDomainOf: a parent domain's PD, or
// `pd` itself.
ibv_td* AllocTd(ibv_context* ctx, ibv_td_init_attr* attr);
int DeallocTd(ibv_td* td);
ibv_pd* AllocParentDomain(ibv_context* ctx, ibv_parent_domain_init_attr* attr);
bool IsParentDomain(const ibv_pd* pd);
ibv_pd* ProtectionDomainOf(ibv_pd* pd);

// Import (import.cc).  IsContextFd: whether `fd` is (a dup of) the command
// fd of a softnic context of this process; ImportDevice gives a new context
// on it (owning `fd`), else NULL with EINVAL.  ImportPd and ImportMr also
// name, in *original, the object the handle names.  Unimport frees the
// struct only.
bool IsContextFd(int fd);
ibv_context* ImportDevice(int cmd_fd);
ibv_pd* ImportPd(ibv_context* ctx, uint32_t pd_handle, ibv_pd** original);
void UnimportPd(ibv_pd* pd);
ibv_mr* ImportMr(ibv_pd* pd, uint32_t mr_handle, ibv_mr** original);
void UnimportMr(ibv_mr* mr);

// The fabric this process attached to (for diagnostics and tests).
std::string FabricName();

// The directory softnic keeps this user's files in (user_dir.h), created
// if missing; false, with a message, if none can be had.
bool UserPrivateDir(std::string* out);
// For a fatal-signal handler, async-signal-safe: removes this process's
// fabric file if it is its last user, as its exit would (leftovers.h).
void CleanUpAtFatalSignal();
// True if `action` is the handler softnic installs for SIGTERM, SIGINT and
// SIGHUP where they were at the default (it only calls
// CleanUpAtFatalSignal): the interposer, which handles those signals to
// close the trace and calls CleanUpAtFatalSignal itself, takes it over as
// it would the default.
bool IsOwnTerminationHandler(const struct sigaction& action);

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_SOFTNIC_H_
