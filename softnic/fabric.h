// softnic/fabric: the shared-memory "wire" that softnic processes meet on.
//
// A fabric is one file, <user dir>/fabric-<name> (the user directory:
// user_dir.h, private to the user; name: the softnic_fabric option),
// holding fixed tables of every object a *remote* process must see:
// processes, QPs (state, receive queue), CQs (completion rings), SRQs,
// MRs (keys, ranges, access), completion channels, async endpoints and
// multicast attachments.
// The requester executes a work request itself, under the fabric lock: it
// validates keys against these tables and moves payload straight into the
// peer's memory with process_vm_writev/readv (or memcpy when the peer is
// itself), so no progress thread exists.
//
// The file: created 0600 with O_NOFOLLOW in the user directory, where
// nobody else can create a name, and used only if it is a regular file of
// this user that nobody else may open.  Its size is 4 GiB, sparse: the
// tables and every heap block are reserved with posix_fallocate before
// their first touch, so a full file system gives ENOMEM, never SIGBUS.
// Every user holds a shared flock on it; the last one to leave (Detach, or
// RemoveFileIfLast before an _exit, or a fatal signal: leftovers.h) takes
// it exclusively and removes the file.  A file whose last user was
// SIGKILLed is removed by the next attach or detach of any fabric of the
// user (no process holds its lock), with the rdma_cm names dead processes
// left (leftovers.h).  A forked child leaves its parent's slot, objects
// and file alone.
//
// Every process of the user can write the segment, so nothing read from it
// is trusted: ring offsets, slot counts, strides, indices and slot numbers
// are checked against this process's own bounds before use (RqEntry,
// CqEntry, PeerPid, the heap's free list), and payload is written into this
// process's memory only where its own record of its MRs says (access.h
// TrustedMr, OwnRange), never where a table entry or a staged completion
// says.  A forged field gives an error completion or a refused call.
//
// process_vm_readv/writev between peers need the target's consent under
// Yama (ptrace_scope 1): a process sets PR_SET_PTRACER only when a QP of
// its own goes to RTR facing another process (AllowPeerOf), naming that
// process, and widens it to any process of the user only for a second peer
// or a UD QP.  It is never narrowed again while the process runs.
//
// May not: hold pointers into the segment across processes (it maps at a
// different address in each; everything shared is an index or an offset),
// call back into the application, or block while holding the lock on
// anything but the bounded copy of one work request.  A process that dies
// holding the lock is recovered: a waiter that finds the lock's holder
// gone takes it over (ShmLock); its objects are reclaimed by the next
// process that attaches.
#ifndef RDMASAN_SOFTNIC_FABRIC_H_
#define RDMASAN_SOFTNIC_FABRIC_H_

#include <infiniband/verbs.h>
#include <pthread.h>
#include <sys/types.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <string>

namespace rdmasan::softnic {

inline constexpr uint64_t kFabricMagic = 0x31434e5344524453ull;  // "SDRDSNC1"
// 5: XRC (domains, SRQ numbers); 6: multicast attachments; 7: tag matching
// (tag lists, TM fields of completions); 8: raw packet QPs (flow steering
// rules, RSS QPs' indirection, work queues as QP slots); 9: a CQ's
// producer, consumer and arm fields on lines of their own; 10: a receive
// queue's owner and requester fields on lines of their own, a completion's
// first staged SGE and bytes on its second line; 11: a CQ's want_ts, a
// small receive's completion in one line (kStagedInLine); 12: the lock a
// pid word (ShmLock), not a robust pthread mutex.
inline constexpr uint32_t kFabricVersion = 12;

inline constexpr uint32_t kMaxProcs = 256;
inline constexpr uint32_t kMaxContexts = 1024;
inline constexpr uint32_t kMaxQps = 4096;  // QPN = gen << 12 | slot
inline constexpr uint32_t kMaxCqs = 4096;
inline constexpr uint32_t kMaxSrqs = 1024;
inline constexpr uint32_t kMaxMrs = 16384;  // key = slot << 8 | gen
inline constexpr uint32_t kMaxChannels = 4096;
// XRC domains: one entry per (process, domain) pair.  An SRQ number is
// kSrqnGenShift bits of slot under the slot's generation.
inline constexpr uint32_t kMaxXrcds = 1024;
inline constexpr uint32_t kSrqnGenShift = 10;  // kMaxSrqs == 1 << kSrqnGenShift
// Memory windows have a table and a key range of their own: a window's key
// is (kMwIndexBase + slot) << 8 | tag, so no window key is an MR key
// (those are below kMaxMrs << 8) and the low byte is the consumer tag that
// ibv_inc_rkey changes.
inline constexpr uint32_t kMaxMws = 16384;
inline constexpr uint32_t kMwIndexBase = 0x400000;
inline bool IsMwKey(uint32_t key) { return (key >> 8) >= kMwIndexBase; }
inline uint32_t MwSlotOf(uint32_t key) { return (key >> 8) - kMwIndexBase; }
// Multicast: one entry per (UD QP, group) attachment, any process's.  A
// group is its GID (ff00::/8) and its LID (0xC000-0xFFFE); a UD send to
// QPN 0xFFFFFF reaches every QP attached to the group its AH names.
inline constexpr uint32_t kMaxMcastAttach = 4096;
inline constexpr uint32_t kMaxMcastGroups = 1024;  // distinct groups
inline constexpr uint32_t kMaxMcastQpsPerGroup = 256;
inline constexpr uint32_t kMcastQpn = 0xffffff;
inline constexpr uint16_t kMcastLidFirst = 0xc000, kMcastLidLast = 0xfffe;
// Raw packet QPs (raw.cc, flow.cc, wq.cc).  A flow steering rule steers
// the Ethernet frames it matches to its QP, in any process; an RSS QP
// spreads them over the receive WQs of its indirection table by a Toeplitz
// hash.  A receive WQ (ibv_create_wq) takes a QP slot of type kQptWq (its
// number is a QPN, no sender can address it): its receive queue, CQ and
// state (RDY as RTR) are a QP's.
inline constexpr uint32_t kQptWq = 0x1000;
inline constexpr uint32_t kMaxFlows = 1024;
inline constexpr uint32_t kMaxRss = 256;
inline constexpr uint32_t kMaxIndTableLog = 8;  // 256 WQs
inline constexpr uint32_t kRssKeyMax = 64;
// Why recent error completions happened (ExplainCompletion): a ring.
inline constexpr uint32_t kMaxWhys = 512;
inline constexpr uint32_t kWhyText = 200;
inline constexpr uint32_t kMaxSge = 32;
inline constexpr uint32_t kMaxInline = 512;
inline constexpr uint32_t kMaxQpWr = 16384;
inline constexpr uint32_t kMaxCqe = (1u << 22) - 1;  // as mlx5: libfabric's rxm asks for (rx + tx) x 256
inline constexpr uint64_t kHeapBytes = 4ull << 30;   // sparse
inline constexpr uint32_t kNone = 0xffffffffu;

// Small SEND payloads to another process travel inside the completion, and
// the receiver scatters them at poll time (one copy, no syscall).
inline constexpr uint32_t kStageBytes = 128;
inline constexpr uint32_t kStageSges = 4;

// Tag matching (tm.cc): the most tags a TM SRQ's list holds, SGEs per
// tagged buffer, outstanding list operations, and the longest rendezvous
// request header.
inline constexpr uint32_t kTmMaxTags = 256;
inline constexpr uint32_t kTmMaxSge = 4;
inline constexpr uint32_t kTmMaxOps = 64;
inline constexpr uint32_t kTmMaxRndvHdr = 64;

struct ShmSge {
  uint64_t addr;
  uint32_t length;
  uint32_t lkey;
};

// One completion as it sits in a CQ ring.  `seq` is written last (release):
// the consumer owns the slot when seq == its index + 1.  Laid out for the
// cache lines a small SEND moves from the requester's core to the poller's:
// the first line is what every completion carries, the second the rest a
// poll reads and the first staged SGE with the first 16 bytes of the staged
// payload; a push writes, and a poll reads, only the lines in use.
//
// A small receive (kStagedInLine: at most kLineBytes of payload into a
// QP's own receive queue, RC or UC) is one line: its payload takes the
// place of the fields from vendor_err on (LineBytes), which such a
// completion has fixed (vendor_err 0, slid 1, the rest 0), and sq_index
// names its WQE's ring slot, whose buffers the poller knows from its own
// record of the post (SnQp::rq_shadow), not from shared memory.
struct alignas(64) ShmCqe {
  std::atomic<uint64_t> seq;
  uint64_t wr_id;
  uint32_t byte_len;
  uint32_t imm_data;  // network order, as ibv_wc
  uint32_t qp_num;
  uint32_t src_qp;
  uint32_t wc_flags;
  uint32_t qp_slot;    // local QP slot, to retire queue slots at poll
  uint32_t sq_index;   // send completions: WQE counter retired; kStagedInLine: the WQE's ring slot
  uint8_t status;      // ibv_wc_status
  uint8_t opcode;      // ibv_wc_opcode
  uint8_t is_send;     // a send-queue completion (retires SQ slots)
  uint8_t stage_nsge;  // staged payload: scatter at poll time (kStagedInLine: one line)
  // From here to the line's end: LineBytes for kStagedInLine.
  uint32_t vendor_err;
  uint16_t pkey_index;
  uint16_t slid;
  uint8_t sl;
  uint8_t dlid_path_bits;
  uint8_t line_pad[6];
  // Second line.
  uint32_t stage_len;
  uint32_t xrc_srq;  // an XRC receive: its SRQ's slot + 1 (0: not XRC)
  uint64_t ts_ns;
  // Tag matching: what the completion retires at poll (kTm*), the TMH's tag
  // and app_ctx (ibv_wc_tm_info); tm_srq and tm_handle below.
  uint64_t tm_tag;
  uint32_t tm_priv;
  uint32_t tm;
  ShmSge stage_sge0;           // the first staged SGE (StageSge)
  uint8_t stage[kStageBytes];  // from offset 112
  ShmSge stage_sge_more[kStageSges - 1];
  uint32_t tm_srq;  // kTm*: the TM SRQ's slot and tag handle
  uint32_t tm_handle;
};
static_assert(offsetof(ShmCqe, stage_len) == 64 && offsetof(ShmCqe, stage) == 112);
inline constexpr uint8_t kStagedInLine = 0xff;
inline constexpr uint32_t kLineBytes = 16;
static_assert(offsetof(ShmCqe, vendor_err) + kLineBytes == 64);
inline uint8_t* LineBytes(ShmCqe& c) { return reinterpret_cast<uint8_t*>(&c) + offsetof(ShmCqe, vendor_err); }
inline const uint8_t* LineBytes(const ShmCqe& c) {
  return reinterpret_cast<const uint8_t*>(&c) + offsetof(ShmCqe, vendor_err);
}
inline ShmSge& StageSge(ShmCqe& c, uint32_t i) { return i ? c.stage_sge_more[i - 1] : c.stage_sge0; }
inline const ShmSge& StageSge(const ShmCqe& c, uint32_t i) {
  return i ? c.stage_sge_more[i - 1] : c.stage_sge0;
}

struct ShmRecvWqe {
  uint64_t wr_id;
  uint32_t num_sge;
  uint32_t pad;  // the fingerprint of its buffers at the post (fingerprint.h), 0: none
  ShmSge sge[];  // max_recv_sge entries
};

// A receive queue (of a QP or an SRQ) lives in the heap: ring of WQEs of
// fixed stride.  Owner posts at `head`; requesters take at `tail`.  Three
// cache lines, so that a post and a take touch no line of the other side's
// but the WQE itself: the ring's geometry (written at creation only, read
// by both), the owner's `head`, and the requesters' `tail` with
// `head_seen`, the head as a requester last read it (tail <= head_seen <=
// head: a take reads the owner's line only when it has used up what it saw).
struct ShmRq {
  uint64_t ring_off;
  uint32_t stride;
  uint32_t nslots;
  uint32_t max_wr;  // reported capacity
  uint32_t max_sge;
  alignas(64) uint64_t head;  // the owner's, posted without the fabric lock: RqHead, PublishRqHead
  alignas(64) uint64_t tail;  // requesters', under the fabric lock
  uint64_t head_seen;         // requesters', under the fabric lock
};
// A receive WQE's slot in its ring: whole cache lines, so that the owner's
// repost of one slot never writes the line of the next slot a requester
// reads (or has prefetched).
inline uint32_t RqStride(uint32_t max_sge) {
  return (static_cast<uint32_t>(sizeof(ShmRecvWqe) + max_sge * sizeof(ShmSge)) + 63) & ~63u;
}
// Ring sizes are powers of two (a receive queue's slots, a send queue's
// private ring): a slot is an index's low bits, no division on the data
// path.
inline uint32_t RingSlots(uint32_t n) {
  uint32_t s = 1;
  while (s < n) s <<= 1;
  return s;
}
// The owner publishes a WQE by storing the next head (release, and
// sequentially consistent against a flush: recv.cc); requesters read it
// with acquire.
inline uint64_t RqHead(const ShmRq& rq) { return __atomic_load_n(&rq.head, __ATOMIC_SEQ_CST); }
inline void PublishRqHead(ShmRq* rq, uint64_t head) { __atomic_store_n(&rq->head, head, __ATOMIC_SEQ_CST); }
// Empties the ring (fabric lock held, the owner's posts stopped).
inline void ResetRq(ShmRq* rq) { rq->head = rq->tail = rq->head_seen = 0; }

struct ShmProc {
  uint32_t in_use;
  int32_t pid;
  uint64_t start_time;  // /proc/pid/stat field 22, defeats pid reuse
};

struct ShmContext {
  uint32_t in_use;
  uint32_t proc;
  uint32_t gen;
};

struct ShmChannel {
  uint32_t in_use;
  uint32_t proc;
  uint32_t gen;
  // Bumped after each event is sent: a waiter that spins before it blocks
  // (cq.cc) sees one without a system call.
  std::atomic<uint32_t> events;
  // The hand-off to a spinning waiter, which then needs no datagram: the
  // waiter sets `spin` 0 -> kChanSpinning; the one producer that moves it
  // on to kChanDelivered stores the event in `mail` (kMailValid | gen << 32
  // | CQ slot) instead of sending it; the waiter takes it and sets 0.
  std::atomic<uint32_t> spin;
  std::atomic<uint64_t> mail;
  // Bumped after each datagram sent: a waiter that has taken as many reads
  // its socket only when woken (cq.cc).
  std::atomic<uint32_t> dgrams;
};
inline constexpr uint32_t kChanIdle = 0, kChanSpinning = 1, kChanDelivered = 2;
inline constexpr uint64_t kMailValid = 1ull << 31;

struct alignas(64) ShmCq {
  uint32_t in_use;
  uint32_t proc;
  uint32_t gen;
  uint32_t ctx;      // owning context slot (async events)
  uint32_t channel;  // kNone or channel slot
  uint32_t channel_gen;
  uint32_t cqe;     // reported capacity
  uint32_t nslots;  // ring slots (>= cqe)
  uint64_t ring_off;
  // The producers' line (written under the fabric lock at every push):
  // cons_seen is the consumer index as a producer last read it, at most
  // `cons`, so a push reads the owner's line only when the ring looks full.
  uint64_t prod;
  uint64_t cons_seen;
  uint32_t overrun;  // CQ_ERR raised
  // Created asking for completion timestamps (ibv_create_cq_ex's
  // IBV_WC_EX_WITH_COMPLETION_TIMESTAMP[_WALLCLOCK]): only then does a push
  // read the clock.
  uint32_t want_ts;
  // The owner's line, written at every poll that takes a completion.
  alignas(64) std::atomic<uint64_t> cons;  // owner's consumer index
  // Rarely written, read at every push and every empty poll: apart from
  // both, so neither side's writes miss the other's reads.
  alignas(64) std::atomic<uint32_t> armed;  // 0 no, 1 next completion, 2 solicited
  std::atomic<uint32_t> attention;          // bumped when a bound QP changed remotely
};
static_assert(offsetof(ShmCq, cons) == 64, "a CQ's producers' fields fill its first line");

// An XRC domain's identity: the inode it was opened on (dev, ino), or for
// one opened without a file, dev 0 and a fabric-unique ino.  XRC SRQs and
// target QPs carry it; a message may land only in an SRQ of its target
// QP's domain.
struct XrcdKey {
  uint64_t dev;
  uint64_t ino;
};
inline bool operator==(const XrcdKey& a, const XrcdKey& b) { return a.dev == b.dev && a.ino == b.ino; }

struct ShmXrcd {
  uint32_t in_use;
  uint32_t proc;
  uint32_t refs;  // opens by this process
  uint32_t pad;
  XrcdKey key;
};

// A TM SRQ's tag list entry (tm.cc): a tagged buffer posted by
// IBV_WR_TAG_ADD.  A message that matches it marks it consumed; the owner
// frees it when it polls the buffer's last completion (or at TAG_DEL).
// `in_phase`: the ADD carried the device's unexpected count, so the entry
// may match (one added before software saw every unexpected message may
// not).
enum : uint32_t { kTagFree = 0, kTagPosted = 1, kTagConsumed = 2 };
struct ShmTag {
  uint32_t state;
  uint32_t in_phase;
  uint64_t seq;  // ADD order: the earliest matching entry wins
  uint64_t tag;
  uint64_t mask;
  uint64_t recv_wr_id;
  uint32_t num_sge;
  uint32_t pad;
  ShmSge sge[kTmMaxSge];
};
// What a completion retires at poll (ShmCqe::tm).
enum : uint32_t { kTmNone = 0, kTmOp = 1, kTmTagFirst = 2, kTmTagLast = 3 };

struct ShmSrq {
  uint32_t in_use;
  uint32_t proc;
  uint32_t gen;
  uint32_t ctx;
  uint32_t pd;
  uint32_t srq_limit;
  uint32_t armed_limit;
  uint32_t srq_type;  // ibv_srq_type
  uint32_t srqn;      // SRQ number (ibv_get_srq_num)
  uint32_t cq;        // XRC: the CQ its receives complete on
  XrcdKey xrcd;       // XRC: its domain
  ShmRq rq;
  // TM (srq_type IBV_SRQT_TM): the tag list, max_tags entries at tags_off;
  // the messages the device found unexpected; the next ADD's order.
  uint64_t tags_off;
  uint32_t max_tags;
  uint32_t tm_unexpected;
  uint64_t tm_seq;
};

struct ShmMr {
  uint32_t in_use;
  uint32_t proc;
  uint32_t key;
  uint32_t pd;
  uint64_t addr;
  uint64_t length;
  uint64_t iova;
  uint32_t access;
  int32_t dereg_pid;  // who deregistered it (the key stays), for ExplainCompletion
};

// A memory window.  state kMwFree: allocated, grants nothing (a type-2
// window before its bind or after its invalidation); kMwValid: rkey grants
// [addr, addr + length) of the MR mr_key names (length 0: a type-1 window
// not bound, nothing granted).  A type-2 window (2B) is bound to the QP
// qpn, and only accesses arriving at that QP may use it.  The inv_* fields
// say what last took a valid key away, for ExplainCompletion.
enum : uint32_t { kMwFree = 0, kMwValid = 1 };
enum : uint32_t { kInvNone = 0, kInvLocal, kInvRemote, kInvDealloc, kInvRebind, kInvUnbind };
struct ShmMw {
  uint32_t in_use;
  uint32_t proc;
  uint32_t type;  // ibv_mw_type
  uint32_t pd;
  uint32_t rkey;
  uint32_t state;
  uint32_t mr_key;
  uint32_t qpn;
  uint32_t access;
  uint32_t inv_how;
  uint64_t addr;  // in the MR's iova space
  uint64_t length;
  uint32_t inv_key;  // the key it took away
  int32_t inv_pid;
  uint64_t inv_wr_id;
};

// One error completion's reason, keyed the way a poller sees it.
struct ShmWhy {
  uint64_t seq;  // 0: empty
  uint32_t cq_slot;
  uint32_t cq_gen;
  uint32_t qp_num;
  uint32_t status;
  uint64_t wr_id;
  char text[kWhyText];
};

// One attachment of the QP in `qp_slot` (whose QPN was `qpn` when it
// attached: an entry whose QP is gone or reused matches nothing).
struct ShmMcast {
  uint32_t in_use;
  uint32_t proc;
  uint32_t qp_slot;
  uint32_t qpn;
  uint8_t gid[16];
  uint16_t lid;
  uint16_t pad;
  uint32_t pad2;
};

// The header fields a flow steering rule can name, as a frame gives them
// (network byte order, as the ibv_flow_spec_* fields).  A rule holds a
// value and a mask of this layout; `has` says which headers a frame had
// (kHas*), and a rule's `need` which it must have.
enum : uint32_t { kHasEth = 1, kHasVlan = 2, kHasIpv4 = 4, kHasIpv6 = 8, kHasTcp = 16, kHasUdp = 32 };
struct FlowKey {
  uint8_t dst_mac[6];
  uint8_t src_mac[6];
  uint16_t ether_type;
  uint16_t vlan_tag;
  uint32_t src_ip4;
  uint32_t dst_ip4;
  uint8_t proto;
  uint8_t tos;
  uint8_t ttl;
  uint8_t ip4_flags;
  uint8_t src_ip6[16];
  uint8_t dst_ip6[16];
  uint32_t flow_label;
  uint8_t next_hdr;
  uint8_t traffic_class;
  uint8_t hop_limit;
  uint8_t pad;
  uint16_t src_port;
  uint16_t dst_port;
};

// One flow steering rule of the QP in `qp_slot` (whose QPN was `qpn`).
struct ShmFlow {
  uint32_t in_use;
  uint32_t proc;
  uint32_t qp_slot;
  uint32_t qpn;
  uint32_t type;      // ibv_flow_attr_type
  uint32_t priority;  // lower is preferred
  uint32_t need;      // kHas* a frame must have
  uint32_t gen;
  FlowKey value;  // already masked
  FlowKey mask;
};

// An RSS QP's hash configuration and its indirection table (the WQs'
// numbers, copied at creation: a table in use cannot be destroyed).
struct ShmRss {
  uint32_t in_use;
  uint32_t proc;
  uint32_t qpn;
  uint32_t log_size;
  uint64_t fields;  // IBV_RX_HASH_*
  uint32_t key_len;
  uint32_t pad;
  uint8_t key[kRssKeyMax];
  uint32_t wqn[1u << kMaxIndTableLog];
};

struct alignas(64) ShmQp {
  uint32_t in_use;
  uint32_t proc;
  uint32_t qpn;
  uint32_t gen;
  uint32_t ctx;
  uint32_t pd;
  uint32_t type;                // ibv_qp_type
  std::atomic<uint32_t> state;  // ibv_qp_state
  uint32_t send_cq;
  uint32_t recv_cq;
  uint32_t srq;  // kNone if none
  uint32_t sq_sig_all;
  uint32_t access;  // qp_access_flags
  uint32_t qkey;
  uint32_t dest_qpn;
  uint32_t min_rnr_timer;
  uint32_t rnr_retry;
  uint32_t timeout;
  uint32_t retry_cnt;
  uint32_t max_rd_atomic;
  uint32_t max_dest_rd_atomic;
  uint32_t path_mtu;
  uint32_t rq_psn;
  uint32_t sq_psn;
  uint32_t pkey_index;
  uint32_t port_num;
  uint32_t remote_gone;  // set once the peer was found dead
  uint32_t pad;
  XrcdKey xrcd;  // XRC_RECV: its domain
  uint32_t rss;  // an RSS QP: its rss[] slot, else kNone
  uint32_t pad2;
  ShmRq rq;
};

// The fabric lock (Fabric::Lock), on a line of its own: 0, or the
// holder's pid with kLockWaiters while a waiter may sleep on the word
// (futex(2), process-shared).  The holder writes its start time (/proc
// stat field 22, 0: unknown) after it takes the lock, so that a waiter
// that finds the holder gone (or its pid reused) takes the lock over.
inline constexpr uint32_t kLockWaiters = 1u << 31;
struct alignas(64) ShmLock {
  std::atomic<uint32_t> word;
  uint32_t pad;
  uint64_t holder_start;
};

struct ShmHeader {
  uint64_t magic;
  uint32_t version;
  uint32_t initialized;
  ShmLock lock;
  uint64_t heap_base;  // offset of the heap
  uint64_t heap_size;
  uint64_t free_head;  // offset of first free block, 0 = none
  uint32_t next_pd;
  uint32_t pad;
  uint64_t ops;        // liveness and statistics
  uint64_t next_xrcd;  // ino of the next XRC domain opened without a file
  ShmProc procs[kMaxProcs];
  ShmContext ctxs[kMaxContexts];
  ShmChannel channels[kMaxChannels];
  ShmCq cqs[kMaxCqs];
  ShmSrq srqs[kMaxSrqs];
  ShmMr mrs[kMaxMrs];
  ShmQp qps[kMaxQps];
  ShmMw mws[kMaxMws];
  ShmXrcd xrcds[kMaxXrcds];
  uint64_t why_next;
  ShmWhy whys[kMaxWhys];
  ShmMcast mcasts[kMaxMcastAttach];
  ShmFlow flows[kMaxFlows];
  ShmRss rss[kMaxRss];
};

class Fabric {
 public:
  // Attaches to (creating if needed) the named fabric; "inproc" gives a
  // private anonymous one.  Returns nullptr with errno set on failure.
  static Fabric* Attach(const std::string& name);

  ShmHeader* hdr() const { return hdr_; }
  uint8_t* base() const { return base_; }
  template <typename T>
  T* At(uint64_t off) const {
    return reinterpret_cast<T*>(base_ + off);
  }

  void Lock();
  void Unlock();

  // Heap, under the lock.  Returns 0 (errno ENOMEM) when exhausted, or
  // when the file system cannot back the block (a full /dev/shm): the
  // pages are reserved before they are touched, never a SIGBUS.
  uint64_t Alloc(uint64_t bytes);
  void Free(uint64_t off);

  // Shared memory is writable by every process of the user, so what it
  // says is checked before use.  These return the ring entry at `index`
  // of a receive queue or a CQ ring, or nullptr when the queue's fields
  // (ring offset, slot count, stride, SGE count) do not describe a ring
  // inside the heap.  PeerPid: the pid of an in-use procs[] slot other
  // than ours (and other than this process), or 0.
  ShmRecvWqe* RqEntry(const ShmRq& rq, uint64_t index) const;
  // The ring a receive queue's fields describe, from values the caller
  // read once (each field is read exactly once: nothing a writer changes
  // afterwards can move an index computed from them out of the ring), or
  // nullptr.
  uint8_t* RqRing(uint64_t ring_off, uint32_t nslots, uint32_t stride, uint32_t max_sge) const;
  ShmCqe* CqEntry(const ShmCq& cq, uint64_t index) const;
  bool InHeap(uint64_t off, uint64_t len) const;
  // A page-aligned block of whole pages inside the heap.
  bool HeapBlock(uint64_t off, uint64_t size) const;
  pid_t PeerPid(uint32_t proc) const;

  // Lets the process at the other end of `q` (a QP of ours going to RTR)
  // move payload in and out of this one: under Yama's ptrace_scope 1,
  // process_vm_readv/writev between unrelated processes needs the target's
  // PR_SET_PTRACER.  The first peer process is named alone; a second peer,
  // or a UD QP (anyone may send to it), widens it to any process of the
  // user.  Nothing for a peer that is this process.  Fabric lock held.
  void AllowPeerOf(const ShmQp& q);
  // What PR_SET_PTRACER was set to: 0 (never), a pid, or -1 (any).
  long ptracer() const { return ptracer_; }

  // The calling process's slot in procs[].
  uint32_t self_proc() const { return self_; }
  const std::string& name() const { return name_; }
  bool inproc() const { return inproc_; }

  // True if the process in slot `proc` still runs.
  bool ProcAlive(uint32_t proc) const;
  // Frees every object of dead processes (under the lock).
  void ReapDeadLocked();
  // Releases every object of the calling process and detaches; the mapping
  // stays until the Fabric is deleted.  The last process to detach removes
  // the file.  In a forked child (pid != the attacher's) it does nothing:
  // the slot, the objects and the file are the parent's.  Idempotent.
  void Detach();
  // Removes the fabric file if no other process holds it, without touching
  // the tables: for a process about to end with _exit (the tables' slot is
  // reaped by the next attacher).  Nothing in a forked child.
  void RemoveFileIfLast();
  // The fabric file's path ("" for inproc).
  const std::string& path() const { return path_; }
  ~Fabric();

  // Unix datagram endpoint names (abstract namespace) for events.
  std::string ChannelAddr(uint32_t slot, uint32_t gen) const;
  std::string AsyncAddr(uint32_t slot, uint32_t gen) const;

 private:
  Fabric() = default;
  // Maps the named fabric file (dir_, path_, fd_) in the user directory.
  ShmHeader* MapNamed(uint64_t total);
  void ReleaseProcLocked(uint32_t proc);

  ShmHeader* hdr_ = nullptr;
  uint8_t* base_ = nullptr;
  size_t map_size_ = 0;
  int fd_ = -1;
  int leftover_handle_ = -1;  // RememberFabricFile's
  uint32_t self_ = 0;
  pid_t owner_pid_ = 0;       // the attaching process (a forked child is not it)
  uint64_t owner_start_ = 0;  // its start time, for the lock's holder_start
  long ptracer_ = 0;
  bool detached_ = false;
  bool inproc_ = false;
  std::string name_;
  std::string dir_;  // the user directory
  std::string path_;
};

class FabricLock {
 public:
  explicit FabricLock(Fabric* f) : f_(f) { f_->Lock(); }
  ~FabricLock() { f_->Unlock(); }
  FabricLock(const FabricLock&) = delete;
  FabricLock& operator=(const FabricLock&) = delete;

 private:
  Fabric* f_;
};

uint64_t ProcStartTime(pid_t pid);

}  // namespace rdmasan::softnic

#endif  // RDMASAN_SOFTNIC_FABRIC_H_
