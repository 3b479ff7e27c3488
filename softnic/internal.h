// softnic/internal: process-local objects behind the public verbs structs,
// and what the softnic files share among themselves (softnic.h is the
// module's face to the rest of the project; nothing outside softnic/
// includes this).
//
// Each object embeds its public verbs struct first (so the pointer the app
// holds converts back with a cast) and names its shared-table slot.  The
// send queue is private to the owning process: a requester executes its own
// WRs; only receive queues, CQ rings, MRs and QP attributes are shared.
//
// May not: hold state of its own (objects live in Process and the fabric),
// or declare what one file alone uses.
#ifndef RDMASAN_SOFTNIC_INTERNAL_H_
#define RDMASAN_SOFTNIC_INTERNAL_H_

#include <infiniband/verbs.h>

#include <netinet/in.h>
#include <sys/stat.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <vector>

#include "core/futex_mutex.h"
#include "softnic/access.h"
#include "softnic/fabric.h"
#include "softnic/user_dir.h"

namespace rdmasan::softnic {

// A queue's own mutex (a QP's send and receive posts, an SRQ's posts, a
// CQ's poller): taken at every post and every poll that finds something,
// so its uncontended path is inline (core/futex_mutex.h).
using QueueMutex = core::FutexMutex;

// A QP's receives posted and not yet polled, as two counters each written
// by one side only (posts under rq_mu, polls under its receive CQ's
// mutex): a plain store each, where one shared count took a locked
// read-modify-write at every post and every poll.  (An SRQ's count stays
// one atomic: QPs of different CQs retire its receives.)
struct RecvCount {
  std::atomic<uint64_t> posted{0};
  std::atomic<uint64_t> polled{0};
  uint64_t Outstanding() const {
    const uint64_t in = posted.load(std::memory_order_relaxed), out = polled.load(std::memory_order_relaxed);
    return in > out ? in - out : 0;
  }
  void NotePosted() { posted.store(posted.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void NotePolled() { polled.store(polled.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed); }
  void Clear() { polled.store(posted.load(std::memory_order_relaxed), std::memory_order_relaxed); }
};
inline uint64_t Outstanding(const RecvCount& c) { return c.Outstanding(); }
inline uint64_t Outstanding(const std::atomic<uint32_t>& c) { return c.load(std::memory_order_relaxed); }
inline void NotePosted(RecvCount& c) { c.NotePosted(); }
inline void NotePosted(std::atomic<uint32_t>& c) { c.fetch_add(1, std::memory_order_relaxed); }

struct SnContext {
  verbs_context vctx;
  uint32_t slot = kNone;
  uint32_t gen = 0;
};

struct SnPd {
  ibv_pd pd;
  uint32_t id;
};

struct SnMr {
  ibv_mr mr;
  uint32_t slot;
};

struct SnMw {
  ibv_mw mw;
  uint32_t slot;
};

struct SnChannel {
  ibv_comp_channel ch;
  uint32_t slot;
  uint32_t gen;
  // When ibv_get_cq_event last returned an event (cq.cc's spin), and the
  // datagrams it has read (against ShmChannel::dgrams).
  std::atomic<uint64_t> last_event_ns{0};
  std::atomic<uint32_t> dgrams_taken{0};
};

struct SnQp;

struct SnCq {
  ibv_cq_ex cqx;
  uint32_t slot;
  QueueMutex mu;  // one poller at a time
  ShmCq* shm;
  ShmCqe* ring;
  uint32_t nslots = 0;   // the ring's, as created (shm->nslots may be forged)
  bool want_ts = false;  // likewise shm->want_ts
  uint32_t seen_attention = 0;
  uint32_t empty_polls = 0;
  std::atomic<uint32_t> stalled{0};  // a bound SQ has RNR-stalled WRs
  uint64_t last_peer_check_ns = 0;
  uint64_t cur_ts = 0;
  uint64_t cur_tm_tag = 0;  // ibv_wc_read_tm_info
  uint32_t cur_tm_priv = 0;
  // cq_ex poll state: the completion being read.
  ibv_wc cur{};
  bool in_poll = false;
  uint32_t events_reported = 0;
  // Chaos (kCqEvent): this process's n-th CQ, from 1 (the decisions'
  // object: the same in every run of a program), and the ring's prod at
  // its last spurious event (~0: none).
  uint32_t ordinal = 0;
  std::atomic<uint64_t> spurious_at{~uint64_t{0}};
};

// An XRC domain as this process opened it (ibv_open_xrcd); `entry` is
// its slot in the fabric's xrcds table, shared by this process's opens of
// the same domain.
struct SnXrcd {
  ibv_xrcd xrcd;
  uint32_t entry;
  XrcdKey key;
  std::atomic<uint32_t> users{0};  // QPs and SRQs made or opened through this handle
};

struct SnSrq {
  ibv_srq srq;
  uint32_t slot;
  ShmSrq* shm;
  std::atomic<uint32_t> outstanding{0};  // posted, completion not yet polled
  QueueMutex rq_mu;                      // posts (recv.cc)
  SnXrcd* xrcd = nullptr;                // an XRC SRQ's domain
  SnCq* cq = nullptr;                    // an XRC SRQ's CQ (a TM SRQ's: of its list operations)
  // TM: list operations posted signaled, completion not yet polled.
  uint32_t tm_max_ops = 0;
  std::atomic<uint32_t> tm_ops{0};
};

// A receive WQE of a QP's own receive queue as its owner posted it, by
// ring slot: a completion staged in one line (kStagedInLine) is scattered
// into these buffers, never into what shared memory says.  Only the first
// kStageSges SGEs are kept; a requester stages in one line only for a WQE
// of at most that many.
struct RecvShadow {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t pad;
  ShmSge sge[kStageSges];
};

// A send WR as the private send queue keeps it.
struct SendWqe {
  uint64_t wr_id;
  uint32_t opcode;  // ibv_wr_opcode
  uint32_t flags;   // ibv_send_flags
  uint32_t imm;     // network order (or invalidate rkey, host order)
  uint32_t num_sge;
  uint64_t remote_addr;
  uint32_t rkey;
  uint32_t inline_len;
  uint64_t compare_add;
  uint64_t swap;
  // UD
  uint32_t remote_qpn;
  uint32_t remote_qkey;
  uint32_t xrc_srqn;  // XRC_SEND: the SRQ number at the target
  ibv_ah_attr ah;
  bool has_ah;
  // BIND_MW: the window's slot, the new key in `rkey`, the range in
  // remote_addr/mw_length of the MR mw_mr_lkey (0: unbind).
  uint32_t mw_slot;
  uint32_t mw_access;
  uint32_t mw_mr_lkey;
  uint64_t mw_length;
  // READ and atomics: the fingerprint of the local destination at the
  // post (fingerprint.h), 0: none.
  uint32_t dst_fp;
  // Execution state.
  bool executed;
  uint64_t rnr_since_ns;
  uint64_t retry_since_ns;  // first try that found the responder not in RTR
  ShmSge sge[kMaxSge];
  uint8_t inline_data[kMaxInline];
};

// RDMA atomic write (IBV_WR_ATOMIC_WRITE): an 8-byte value written to an
// 8-aligned remote address at once; the responder's MR must grant
// REMOTE_WRITE.  query_device_ex advertises it in device_cap_flags_ex with
// the kernel's bit for it (IB_UVERBS_DEVICE_ATOMIC_WRITE, 1 << 40), which
// libibverbs passes through unnamed.
inline constexpr uint32_t kAtomicWriteBytes = 8;
inline constexpr uint64_t kDeviceCapAtomicWrite = 1ull << 40;

// One WR being built through the ibv_wr_* API.
struct BatchWr {
  ibv_send_wr wr;
  ibv_sge sge[kMaxSge];
  uint32_t nsge;
  uint8_t inl[kMaxInline];
};

struct SnIndTable;

// The message of a QP's head WR that softnic places in chunks over several
// progress steps (chaos point kPlace, placement.h).  index: the WR's SQ
// index, kNoPlacement when no message is being placed.
inline constexpr uint64_t kNoPlacement = ~0ull;
struct PlaceState {
  uint64_t index = kNoPlacement;
  uint64_t len = 0;            // the message's bytes
  uint64_t recv_id = 0;        // SEND, WRITE_WITH_IMM: the wr_id of the receive WQE it lands in
  uint64_t due_ns = 0;         // its next step not before
  uint32_t order = 0;          // the decision's outcome: 1 last chunk first, 2 reversed, 3 shuffled
  uint32_t gather = 0;         // or a late gather (kGather): 1 late, 2 twice (placement.h)
  bool dest_modified = false;  // its destination changed before the first step (fingerprint.h)
  uint32_t chunk = 0;          // bytes per chunk
  uint32_t chunks = 0;
  uint32_t steps = 0;
  uint32_t step = 0;                // the next step
  uint32_t stride = 1, offset = 0;  // shuffled: position i is chunk (stride * i + offset) % chunks
};

// The order a QP's WRs execute in under chaos (kLag, kFence, kRelaxed;
// exec_order.h): the head WR whose lag and overtaking are decided, when a
// lagging head WR may run, and the outcome of the WR behind it when that
// one ran first (completed in post order when its turn comes).
struct OrderState {
  uint64_t decided = kNoPlacement;  // the SQ index of the head WR decided
  uint64_t wait_until_ns = 0;       // the head WR waits until then (0: it does not wait)
  uint32_t overtaker = 0;         // while it waits: 1 + the ChaosPoint of a WR that may overtake it (0: lag)
  uint64_t ahead = kNoPlacement;  // the SQ index of a WR that ran before the head WR
  int32_t ahead_status = 0;
  uint32_t ahead_len = 0;
  char ahead_why[kWhyText] = {};
};

struct SnQp {
  ibv_qp_ex qpx;
  uint32_t slot;
  ShmQp* shm;
  SnCq* send_cq;
  SnCq* recv_cq;
  SnSrq* srq;
  SnXrcd* xrcd = nullptr;           // XRC_RECV: the domain it was created or opened in
  bool opened = false;              // a handle of ibv_open_qp: destroying it leaves the QP
  SnIndTable* ind_table = nullptr;  // an RSS QP's indirection table (wq.cc)
  ibv_ah_attr av{};                 // the primary path's address vector (IBV_QP_AV), for ibv_query_qp
  uint32_t max_send_wr, max_send_sge, max_inline, max_recv_wr, max_recv_sge;
  QueueMutex sq_mu;
  QueueMutex rq_mu;  // receive posts (recv.cc)
  // Private send ring: [retired, exec) executed, [exec, posted) pending.
  std::vector<SendWqe> sq;
  uint64_t sq_retired = 0;
  uint64_t sq_exec = 0;
  uint64_t sq_posted = 0;
  std::atomic<uint64_t> sq_retire_to{0};  // set by the poller
  RecvCount rq_outstanding;               // its own receive queue's
  // The receive queue's posts by ring slot (rq.nslots of them; none with
  // an SRQ): written by posts under rq_mu, read by the poller.
  std::vector<RecvShadow> rq_shadow;
  uint64_t last_peer_check_ns = 0;
  PlaceState place;  // under sq_mu and the fabric lock
  OrderState order;  // likewise
  // This process's n-th QP, from 1: the object of its chaos decisions (the
  // same in every run of a program, unlike its QPN).
  uint32_t ordinal = 0;
  // ibv_wr_* batch.
  std::vector<BatchWr> batch;
  int batch_error = 0;
};

struct SnAh {
  ibv_ah ah;
  ibv_ah_attr attr;
};

// The process's view of the fabric.
struct Process {
  Fabric* fab = nullptr;
  pid_t pid = 0;  // cached: getpid() is a system call
  // This process's MRs as it registered them (by MR slot): a copy into or
  // out of its own memory is checked against these, not against the
  // fabric's MR table, which every process of the user can write.
  LocalMr own_mrs[kMaxMrs];
  LocalMw own_mws[kMaxMws];       // likewise its windows (by window slot)
  std::atomic<uint32_t> nmws{0};  // windows allocated (0: no window scans)
  std::mutex mu;                  // object creation and destruction
  // Some QP of the process has WRs pending: an empty poll of any CQ drives
  // them (ProgressCq), not only a poll of that QP's own CQs.
  std::atomic<uint32_t> sq_stalled{0};
  SnQp* qps[kMaxQps] = {};
  // 1 + the highest slot of qps[] ever set (under mu): a sweep of the
  // process's QPs (ProgressCq, the driver) stops there instead of reading
  // all kMaxQps slots, which are fabric-wide and mostly other processes'.
  uint32_t qp_end = 0;
  // Likewise 1 + the highest MR slot this process ever registered (under
  // the fabric lock): a look for its MRs (DeallocPd) stops there.
  uint32_t mr_end = 0;
  // The sweeps' bounds: the slots below qp_end (mu held) and mr_end (the
  // fabric lock held), never past the fabric's tables.
  uint32_t qp_slots() const { return qp_end < kMaxQps ? qp_end : kMaxQps; }
  uint32_t mr_slots() const { return mr_end < kMaxMrs ? mr_end : kMaxMrs; }
  SnCq* cqs[kMaxCqs] = {};
  SnSrq* srqs[kMaxSrqs] = {};
  SnContext* ctxs[kMaxContexts] = {};
};

// This process's attachment (device.cc): nullptr until the first use, and
// again in a child forked since.  GetProcess attaches on first use
// (AttachProcess); nullptr with errno set if the fabric is unusable.  Inline:
// every post and poll starts with it.
extern std::atomic<Process*> g_process;
Process* AttachProcess();
inline Process* GetProcess() {
  Process* p = g_process.load(std::memory_order_acquire);
  return __builtin_expect(p != nullptr, 1) ? p : AttachProcess();
}

// softnic0's port (port.cc).  PortGid: GID `index` (all zero for an
// empty entry); PortGidEntry: false for an empty one, else its GID,
// ibv_gid_type and interface; PortGidIndex: the index of `gid` of `type`,
// or -1.  PortLid: 1 on InfiniBand, 0 on RoCE.  GidOfIpv4: the
// IPv4-mapped GID of an address.
ibv_gid PortGid(uint32_t index);
bool PortGidEntry(uint32_t index, ibv_gid* gid, uint32_t* type, uint32_t* ifindex);
int PortGidIndex(const ibv_gid& gid, uint32_t type);
uint16_t PortLid();
uint32_t GidTableLen();
void FillPortAttr(ibv_port_attr* a);
ibv_gid GidOfIpv4(in_addr a);
// 0 if `ah` is an address vector the port accepts (port 1; a populated
// source GID; a GRH on RoCE), else EINVAL.
int CheckAddressVector(const ibv_ah_attr& ah);
// The GRH a UD receiver finds ahead of the `len`-byte payload of `w`.
void FillGrh(const SendWqe& w, uint64_t len, ibv_grh* grh);

inline SnContext* Ctx(ibv_context* c) { return reinterpret_cast<SnContext*>(verbs_get_ctx(c)); }
inline SnQp* Qp(ibv_qp* q) { return reinterpret_cast<SnQp*>(q); }
inline SnCq* Cq(ibv_cq* c) { return reinterpret_cast<SnCq*>(c); }
inline SnSrq* Srq(ibv_srq* s) { return reinterpret_cast<SnSrq*>(s); }

inline constexpr uint32_t kGidTableLen = 4;        // InfiniBand
inline constexpr uint32_t kRoceGidTableLen = 128;  // RoCE: v1 and v2 of 63 addresses and the default

// The first free slot of a fabric table at or after `first`, or kNone.
template <typename T, size_t N>
uint32_t FreeSlot(T (&table)[N], uint32_t first = 0) {
  for (uint32_t i = first; i < N; ++i)
    if (!table[i].in_use) return i;
  return kNone;
}

inline uint32_t PdId(ibv_pd* pd) { return reinterpret_cast<SnPd*>(pd)->id; }

// 0 if [addr, addr+len) of this process is mapped readable (and writable
// if `write`), else EFAULT; 0 when /proc cannot tell (pd.cc).
int RangeAccessible(uint64_t addr, uint64_t len, bool write);

// Device and context (device.cc).
uint64_t NowNs();
// CLOCK_MONOTONIC_COARSE (a tick's resolution, a few ms; no TSC read): for
// rate limits of the data path, never for a timestamp a program sees.
uint64_t CoarseNowNs();
// Binds the datagram socket of a context's async events or a completion
// channel at `slot` under a fresh random generation (stored in *gen; the
// caller publishes it, fabric lock held), retrying names found taken; -1
// with errno set on failure.
enum class EventSocket { kAsync, kChannel };
int MakeEventSocket(Fabric* f, EventSocket kind, uint32_t slot, uint32_t* gen);
// recv(2) on an event socket that drops every datagram not sent by a
// process of our user (SCM_CREDENTIALS).
ssize_t RecvFromOwner(int fd, void* buf, size_t len, int flags);
// Wakes the owner of a completion channel (datagram to its socket).
// Sends a completion event {CQ slot, CQ gen} to a channel: into its
// mailbox if a waiter spins on it, else as a datagram to its socket.
void SendChannelEvent(Process* p, uint32_t channel, uint32_t gen, const uint32_t msg[2]);
// Sends an async event to the context that owns an object.
void RaiseAsyncLocked(Process* p, uint32_t ctx_slot, uint32_t type, uint32_t obj_kind, uint32_t obj_slot);
enum : uint32_t { kObjNone = 0, kObjCq = 1, kObjQp = 2, kObjSrq = 3, kObjPort = 4 };

// CQs (cq.cc).  The verbs_context ops of ibv_create_cq_ex and the poll ops
// (the *Op functions: ibv_context_ops').
ibv_cq_ex* VCreateCqEx(ibv_context* ctx, ibv_cq_init_attr_ex* attr);
int PollCqOp(ibv_cq* cq, int n, ibv_wc* wc);
int ReqNotifyCqOp(ibv_cq* cq, int solicited_only);
void InstallCqExOps(SnCq* cq);
// Removes the completions of the QP in `qp_slot` not yet polled from `cq`
// (fabric lock and cq->mu held), as a provider cleans its CQs when a QP
// goes to RESET; receive completions of an SRQ give its slots back.
void CleanCqLocked(Process* p, SnCq* cq, uint32_t qp_slot, uint32_t qpn, SnSrq* srq);

// XRC (xrc.cc): sets the verbs_context ops of XRC domains, extended SRQs
// and ibv_open_qp.
void InstallXrcOps(verbs_context* v);
// Creates an SRQ (srq.cc): basic when `xrcd` is null, else an XRC SRQ of
// that domain whose receives complete on `cq`.
ibv_srq* CreateSrqCommon(ibv_pd* pd, ibv_srq_init_attr* attr, SnXrcd* xrcd, SnCq* cq);
// The XRC SRQ `srqn` names for a message arriving at the XRC target `tgt`,
// or kNone if it does not exist or is of another domain (fabric lock held).
uint32_t XrcSrqFor(Fabric* f, const ShmQp& tgt, uint32_t srqn);
inline bool IsXrc(uint32_t type) { return type == IBV_QPT_XRC_SEND || type == IBV_QPT_XRC_RECV; }
// Reliable-connected transports: RC and both halves of XRC.
inline bool IsReliable(uint32_t type) { return type == IBV_QPT_RC || IsXrc(type); }

// Tag matching (tm.cc).  CreateTmSrq: ibv_create_srq_ex of an IBV_SRQT_TM
// SRQ (xrc.cc hands it over); PostSrqOps: the verbs_context op.  The data
// path's side, fabric lock held: MatchTagLocked finds the earliest posted
// in-phase entry of TM SRQ `srq` matching `tag`, copies it to *out (its
// SGEs bounded) and marks it consumed, else kNone; UnconsumeTagLocked
// gives it back (the message could not be taken after all).
// RetireTmLocked: what a polled TM completion gives back (an operation
// slot, a consumed tag).
ibv_srq* CreateTmSrq(ibv_context* ctx, ibv_srq_init_attr_ex* attr);
int PostSrqOps(ibv_srq* srq, ibv_ops_wr* wr, ibv_ops_wr** bad);
uint32_t MatchTagLocked(Fabric* f, uint32_t srq, uint64_t tag, ShmTag* out);
void UnconsumeTagLocked(Fabric* f, uint32_t srq, uint32_t handle);
void RetireTmCqe(Process* p, const ShmCqe& c);
inline bool IsTmSrq(const ShmHeader* h, uint32_t srq) {
  return srq < kMaxSrqs && h->srqs[srq].in_use && h->srqs[srq].srq_type == IBV_SRQT_TM;
}

// Raw packet QPs (raw.cc), flow steering (flow.cc), RSS (wq.cc).
// RawQpAllowed: 0, or why this process may not create a raw packet QP
// (EOPNOTSUPP: the port is InfiniBand; EPERM: no CAP_NET_RAW, as the
// kernel answers).  InstallFlowOps, InstallWqOps: the verbs_context ops
// of flows, and of WQs and indirection tables.  ParseFrame: the header fields of an Ethernet
// frame (its first `len` bytes), returning the kHas* headers found.
// CheckRss: 0 if `a` describes an RSS QP softnic makes (Toeplitz, known
// fields, a key of at most kRssKeyMax bytes, a table of this context),
// else an errno.  SetupRssLocked: its hash and table into the fabric (the
// QP's shm->rss; ENOMEM when the table is full); ReleaseRssLocked and
// DetachAllFlowsLocked: the QP in `qp_slot` is being destroyed.
// RawReceiversLocked: the QP slots (raw QPs, or the WQs RSS QPs pick) a
// frame is steered to, at most `max`, each a live raw QP or WQ.
// RssPickLocked: the WQ slot the RSS QP `q` hands a frame of fields `k`
// to, or kNone (a table or WQ that is gone or forged).
inline constexpr uint32_t kRawHeaderBytes = 128;  // what steering reads of a frame
inline constexpr uint32_t kMaxRawFrame = 9216;    // a jumbo frame
inline constexpr uint32_t kMaxRawReceivers = 64;
int RawQpAllowed();
void InstallFlowOps(verbs_context* v);
void InstallWqOps(verbs_context* v);
uint32_t RssPickLocked(Process* p, const ShmQp& q, const FlowKey& k, uint32_t has);
uint32_t ParseFrame(const uint8_t* frame, uint32_t len, FlowKey* k);
int CheckRss(ibv_context* ctx, const ibv_qp_init_attr_ex* a);
int SetupRssLocked(Process* p, SnQp* qp, const ibv_qp_init_attr_ex* a);
void ReleaseRssLocked(Process* p, SnQp* qp);
void DetachAllFlowsLocked(Process* p, uint32_t qp_slot);
uint32_t RawReceiversLocked(Process* p, const uint8_t* frame, uint32_t len, uint32_t* slots, uint32_t max);
// The Toeplitz hash of `in` under `key` (RSS; wq.cc).
uint32_t Toeplitz(const uint8_t* key, uint32_t key_len, const uint8_t* in, uint32_t n);

// QPs and SRQs (qp.cc, srq.cc).
ibv_qp* VCreateQpEx(ibv_context* ctx, ibv_qp_init_attr_ex* attr);
// Sizes an RQ or SRQ ring and allocates it in the fabric (fabric lock held).
bool InitRq(Fabric* f, ShmRq* rq, uint32_t max_wr, uint32_t max_sge);
// Moves a QP to ERR and flushes its receive queue (fabric lock held); the
// owner flushes its private send queue when it next looks.
void MoveToErrorLocked(Process* p, ShmQp* q);

// Multicast (mcast.cc), fabric lock held.  McastMembers: the slots of
// the QPs attached to the group `ah` names (its GID when it is global and
// multicast, else its LID when that is a multicast LID), at most `max`,
// each a live UD QP.  DetachAllMcast: the QP in `qp_slot` is being
// destroyed, its attachments go.
uint32_t McastMembersLocked(Process* p, const ibv_ah_attr& ah, uint32_t* slots, uint32_t max);
void DetachAllMcastLocked(Process* p, uint32_t qp_slot);

// Memory windows (mw.cc).  The verbs_context ops, and what the data path
// does with windows, fabric lock held.  Execute*: an IBV_WC_* status, with
// the reason for an error in `why`.
int ExecuteBindLocked(Process* p, SnQp* qp, const SendWqe& w, char* why, size_t n);
int ExecuteLocalInvLocked(Process* p, SnQp* qp, const SendWqe& w, char* why, size_t n);
// The responder's half of SEND_WITH_INV: takes `rkey` away for `resp`, or
// false with the reason.
bool RemoteInvalidateLocked(Process* p, const ShmQp& resp, uint32_t rkey, uint64_t wr_id, char* why,
                            size_t n);
// Windows of this process bound to the MR `key` (valid, length > 0), or of
// the PD `pd` (any state).
uint32_t MwsBoundToMrLocked(Process* p, uint32_t key);
uint32_t MwsOfPdLocked(Process* p, uint32_t pd);

// Error reasons (explain.cc), fabric lock held.  Record: the reason of an
// error completion pushed to a CQ ring.  WhyRkey, WhySges: why a
// validation of access.h refused.
void RecordWhyLocked(Process* p, uint32_t cq_slot, uint32_t qp_num, uint64_t wr_id, uint32_t status,
                     const char* text);
void WhyRkey(const MrTables& t, const ShmQp& resp, uint32_t rkey, uint64_t addr, uint64_t len, uint32_t need,
             char* out, size_t n);
void WhySges(const MrTables& t, uint32_t proc, uint32_t pd, const ShmSge* sge, uint32_t nsge, uint32_t need,
             const char* what, char* out, size_t n);

// Registers [va, va + length) of this process at `iova` with `access`
// (already checked) as an MR of `pd`; mr->addr is `addr` (pd.cc).
ibv_mr* RegRange(ibv_pd* pd, uint64_t va, size_t length, uint64_t iova, unsigned access, void* addr);

// Device memory (dm.cc): the pool per process, and the alignment
// ibv_alloc_dm honours (a page's).
inline constexpr uint64_t kMaxDmSize = 256 * 1024;
inline constexpr uint32_t kDmMaxLogAlign = 12;
// A file's identity: a context's command file (its memfd) names it.
struct FileId {
  uint64_t dev = 0, ino = 0;
  bool operator==(const FileId& o) const { return dev == o.dev && ino == o.ino; }
};
FileId FileOf(int fd);

// Import (import.cc): the PDs and MRs of this process by handle.
void NotePd(ibv_pd* pd);
void ForgetPd(ibv_pd* pd);
void NoteMr(ibv_mr* mr);
void ForgetMr(ibv_mr* mr);

// Thread and parent domains (domain.cc).  *InDomain: records a QP, CQ or
// SRQ just created with `pd` when that is a parent domain (its block from
// the user's allocator); on the allocator's failure the object is
// destroyed and NULL returned (errno ENOMEM).  DetachFromDomain: before an
// object is freed, gives its block back.
inline constexpr uint64_t kResQp = 1, kResCq = 2, kResSrq = 3;  // resource_type for allocators
inline constexpr size_t kDomainBlockAlign = 64;
ibv_qp* QpInDomain(ibv_qp* qp, ibv_pd* pd);
ibv_cq_ex* CqInDomain(ibv_cq_ex* cq, ibv_pd* pd);
ibv_srq* SrqInDomain(ibv_srq* srq, ibv_pd* pd);
void DetachFromDomain(const void* obj);
int DeallocParentDomain(ibv_pd* pd);
bool HasParentDomains(const ibv_pd* pd);
// The verbs_context ops of device memory and domains (set at open).
void InstallDmDomainOps(verbs_context* v);

// Data path (datapath.cc, recv.cc, qp_ex.cc).  The *Op functions are the
// context's ops (ibv_context_ops) the inline verbs call.
int PostSendOp(ibv_qp* qp, ibv_send_wr* wr, ibv_send_wr** bad);
int PostRecvOp(ibv_qp* qp, ibv_recv_wr* wr, ibv_recv_wr** bad);
int PostSrqRecvOp(ibv_srq* srq, ibv_recv_wr* wr, ibv_recv_wr** bad);
void InstallQpExOps(SnQp* qp);
void FlushSq(Process* p, SnQp* qp);
// Drives pending (RNR) work and liveness for QPs bound to `cq`.
void ProgressCq(Process* p, SnCq* cq);

// A full fence between a store and a later load (the push's seq and its
// look at armed).  On x86-64 a locked add to the stack: any locked
// instruction orders stores before loads, and it costs about half of
// mfence, which GCC emits for a seq_cst thread fence.  ThreadSanitizer,
// which cannot see into asm, keeps the fence.
inline void StoreLoadFence() {
#if defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
  asm volatile("lock orl $0, (%%rsp)" ::: "memory", "cc");
#else
  std::atomic_thread_fence(std::memory_order_seq_cst);
#endif
}

// Readies a completion built on the stack for PushCqeLocked: every field
// before the staged bytes zeroed (what a push copies whatever it carries),
// the staged bytes, the further staged SGEs and tm_srq/tm_handle left
// unset (a push copies them only as far as stage_len, stage_nsge and tm
// say).  Zeroing all 320 bytes cost a small SEND 45 instructions.
inline void ClearCqe(ShmCqe* c) { memset(static_cast<void*>(c), 0, offsetof(ShmCqe, stage)); }

// Posts a completion to a CQ ring (fabric lock held).  Returns false on
// overrun.  Inline: every completion of the data path comes through here.
inline bool PushCqeLocked(Process* p, uint32_t cq_slot, const ShmCqe& in) {
  ShmHeader* h = p->fab->hdr();
  if (cq_slot >= kMaxCqs) return false;
  ShmCq& cq = h->cqs[cq_slot];
  // A CQ in error (an overrun, or CQ_ERR injected) takes no more, as on
  // hardware.
  if (!cq.in_use || cq.overrun) return false;
  if (cq.prod - cq.cons_seen >= cq.cqe) cq.cons_seen = cq.cons.load(std::memory_order_acquire);
  if (cq.prod - cq.cons_seen >= cq.cqe) {
    if (!cq.overrun) {
      cq.overrun = 1;
      RaiseAsyncLocked(p, cq.ctx, IBV_EVENT_CQ_ERR, kObjCq, cq_slot);
    }
    return false;
  }
  ShmCqe* entry = p->fab->CqEntry(cq, cq.prod);  // nullptr: a ring forged in shared memory
  if (!entry) return false;
  ShmCqe& slot = *entry;
  const bool solicited = (in.wc_flags & 0x80000000u) || in.status != IBV_WC_SUCCESS;
  // Copy everything but seq, and of the staged payload and SGEs only what
  // is used (a line the poller need not read is not written), then
  // publish.  The first line goes last, right before seq: the poller spins
  // on it, and it moves to this core once.
  // A completion staged in one line (kStagedInLine) writes the second
  // only for a timestamp.
  if (in.stage_nsge == kStagedInLine) {
    if (cq.want_ts) slot.ts_ns = NowNs();
  } else {
    const uint32_t nsge = in.stage_nsge <= kStageSges ? in.stage_nsge : kStageSges;
    const uint32_t stage_len = in.stage_len <= kStageBytes ? in.stage_len : kStageBytes;
    memcpy(&slot.stage_len, &in.stage_len, offsetof(ShmCqe, stage) - offsetof(ShmCqe, stage_len));
    slot.ts_ns = cq.want_ts ? NowNs() : 0;  // a clock read only for a CQ that reads it
    if (stage_len) memcpy(slot.stage, in.stage, stage_len);
    if (nsge > 1) memcpy(slot.stage_sge_more, in.stage_sge_more, (nsge - 1) * sizeof(ShmSge));
    if (in.tm != kTmNone) {
      slot.tm_srq = in.tm_srq;
      slot.tm_handle = in.tm_handle;
    }
  }
  memcpy(reinterpret_cast<uint8_t*>(&slot) + sizeof(slot.seq),
         reinterpret_cast<const uint8_t*>(&in) + sizeof(in.seq),
         offsetof(ShmCqe, stage_len) - sizeof(slot.seq));
  slot.seq.store(cq.prod + 1, std::memory_order_release);
  ++cq.prod;
  // The next slot's second line: this core writes it at the next push, and
  // the poller reads it only after that push (it spins on the first line).
  if (ShmCqe* next = p->fab->CqEntry(cq, cq.prod)) __builtin_prefetch(&next->stage_len, 1);
  StoreLoadFence();  // the seq above, then armed: as the arming poller's store, then its look
  uint32_t armed = cq.armed.load(std::memory_order_relaxed);
  if (armed && (armed == 1 || solicited) && cq.channel != kNone && cq.armed.exchange(0) != 0) {
    uint32_t msg[2] = {cq_slot, cq.gen};
    SendChannelEvent(p, cq.channel, cq.channel_gen, msg);
  }
  return true;
}

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_INTERNAL_H_
