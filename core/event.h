// core/event: the vocabulary every rdmasan module speaks.
//
// An Event is a copy of one verbs call as the application made it: the
// arguments that matter to the rules (WR chains with their SGEs, opcodes,
// flags, remote address and rkey, immediate data, attributes), the result
// (return value, errno, the index of *bad_wr), the calling thread, a
// sequence number, the stack id of the call, and stable object ids assigned
// by the interposer in creation order.  Events never hold application
// pointers (addresses appear only as numbers), so a live run and the replay
// of its trace feed the checkers identical values.
//
// May not: reference process state, allocate without bound (WR chains and
// completion batches are copied by value; small ones inline).
#ifndef RDMASAN_CORE_EVENT_H_
#define RDMASAN_CORE_EVENT_H_

#include <cstdint>
#include <string>

#include "absl/container/inlined_vector.h"

namespace rdmasan::core {

using StackId = uint32_t;  // 0 = none; see core/stack.h
using ObjId = uint64_t;    // 0 = none; unique per process, never reused

enum class EventKind : uint8_t {
  kOpenDevice,
  kCloseDevice,
  kAllocPd,
  kDeallocPd,
  kRegMr,
  kDeregMr,
  kCreateCompChannel,
  kDestroyCompChannel,
  kCreateCq,
  kDestroyCq,
  kCreateSrq,
  kModifySrq,
  kDestroySrq,
  kCreateQp,
  kModifyQp,
  kDestroyQp,
  kCreateAh,
  kDestroyAh,
  kPostSend,
  kPostRecv,
  kPostSrqRecv,
  kPollCq,
  kReqNotifyCq,
  kWaitCqEvent,  // entering ibv_get_cq_event on a channel (obj = channel)
  kGetCqEvent,   // it returned an event (obj = CQ)
  kAckCqEvents,
  kAsyncEvent,
  kRetire,     // send WRs retired by the last poll, payload hashed again
  kFreeRange,  // free/munmap/realloc released [addr, addr+length)
  kFork,
  kForkInit,
  // A decision of the harness (core/decision.h): count = the Point, obj =
  // the object decided about (0: none), length = the hit, addr = the
  // outcome; qp_num and wcs[0] (wr_id, status) say what it did, when it
  // concerns a QP or a completion.  Checkers keep the latest ones to name
  // in reports; no check fires on one.
  kDecision,
  // Memory windows (format 1.2, issue 13).  alloc_mw: obj = the MW, parent
  // = its PD, rkey = the key it was given, count = its ibv_mw_type.
  // dealloc_mw: obj = the MW, rkey = its key then.
  kAllocMw,
  kDeallocMw,
  // ibv_bind_mw (type 1 windows: the verb posts a BIND_MW WR itself): obj =
  // the QP, send_wrs[0] = that WR as the provider posted it (its rkey: the
  // window's new key, read back after the call).
  kBindMw,
  // ibv_rereg_mr: obj = the MR, count = the IBV_REREG_MR_* flags, parent =
  // the new PD (CHANGE_PD), addr/length/iova (CHANGE_TRANSLATION), access
  // (CHANGE_ACCESS); lkey/rkey = the MR's keys after the call.
  kReregMr,
  // A receive completion that invalidated a local key (IBV_WC_WITH_INV:
  // the peer's SEND_WITH_INV): obj = the CQ, qp_num = the receiving QP,
  // rkey = wc.invalidated_rkey, wcs[0] = the completion.
  kRemoteInv,
  // Why an error completion happened, as the device explains it (softnic):
  // obj = the CQ, wcs[0] = the completion (wr_id, status, qp_num), text =
  // the reason.  Emitted before the poll event that returns it.
  kWcReason,
  // ibv_resize_cq (format 1.3): obj = the CQ, cqe = its size after the call
  // (the provider's, as cq->cqe reads; the one asked for if it failed).
  kResizeCq,
  // Tag matching (format 1.4).  ibv_post_srq_ops: obj = the TM SRQ, ret /
  // err / bad_index as for a post, send_wrs = the operations, each an
  // ibv_ops_wr in SendWr's fields: wr_id, opcode = ibv_ops_wr_opcode,
  // send_flags = ibv_ops_flags, imm_data = tm.handle (TAG_ADD: the handle
  // the provider gave, read back after the call), rkey = tm.unexpected_cnt,
  // remote_addr = tm.add.recv_wr_id, compare_add = tm.add.tag, swap =
  // tm.add.mask, num_sge and sges = tm.add's list.
  kPostSrqOps,
  // A tag-matching completion (opcode TM_ADD, TM_DEL, TM_SYNC, TM_RECV or
  // TM_NO_TAG, or status TM_ERR or TM_RNDV_INCOMPLETE), emitted before the
  // poll event that returns it, which carries it too: obj = the CQ, wcs[0]
  // = the completion, count = its wc_flags (TM_MATCH, TM_DATA_VALID tell a
  // tagged buffer's completions apart from an ordinary receive's).  The
  // books retire it here; the poll event leaves it alone.
  kTmWc,
  // softnic found a completion's destination changed between its post and
  // the placement of its data (format 1.5): a receive's buffers, or an
  // RDMA READ's or atomic's local destination, written by the program
  // meanwhile (softnic/fingerprint.h; the check recv-buffer-modified).
  // Emitted before the poll event that returns the completion: obj = the
  // CQ, wcs[0] = the completion, count = 1 for a receive, 0 for a READ or
  // atomic.
  kDestModified,
  kCount
};

const char* EventKindName(EventKind k);

struct Sge {
  uint64_t addr = 0;
  uint32_t length = 0;
  uint32_t lkey = 0;
  uint64_t hash = 0;      // payload hash at post (send side), 0 if not taken
  uint64_t hash_now = 0;  // kRetire: the hash again when the WR was retired
};

// SendWr and RecvWr have a user-provided default constructor so that
// value-initialization (emplace_back(), resize()) sets the fields below
// and leaves the SGE vector's unused inline storage alone instead of
// zeroing the whole object first.
// What a BIND_MW WR binds (ibv_mw_bind_info, with the window): the new key
// is SendWr::rkey.  A zero length unbinds.
struct MwBind {
  ObjId mw = 0;
  ObjId mr = 0;
  uint64_t addr = 0;
  uint64_t length = 0;
  uint32_t access = 0;  // mw_access_flags
};

struct SendWr {
  SendWr() {}
  uint64_t wr_id = 0;
  uint32_t opcode = 0;      // ibv_wr_opcode
  uint32_t send_flags = 0;  // ibv_send_flags
  uint32_t imm_data = 0;    // or invalidate_rkey (LOCAL_INV, SEND_WITH_INV: the verbs union)
  uint64_t remote_addr = 0;
  uint32_t rkey = 0;  // BIND_MW: the window's new key
  uint32_t remote_qpn = 0;
  uint64_t compare_add = 0;
  uint64_t swap = 0;
  ObjId ah = 0;
  StackId posted_at = 0;  // kRetire: the stack of the post
  int32_t num_sge = 0;    // as given (may disagree with sges.size() if absurd)
  MwBind bind;            // BIND_MW only
  absl::InlinedVector<Sge, 2> sges;
};

struct RecvWr {
  RecvWr() {}
  uint64_t wr_id = 0;
  int32_t num_sge = 0;
  absl::InlinedVector<Sge, 2> sges;
};

struct Completion {
  uint64_t wr_id = 0;
  uint32_t status = 0;  // ibv_wc_status
  uint32_t opcode = 0;  // ibv_wc_opcode
  uint32_t qp_num = 0;
  uint32_t byte_len = 0;
  uint32_t vendor_err = 0;
};

struct QpCaps {
  uint32_t max_send_wr = 0;
  uint32_t max_recv_wr = 0;
  uint32_t max_send_sge = 0;
  uint32_t max_recv_sge = 0;
  uint32_t max_inline_data = 0;
};

struct Event {
  uint64_t seq = 0;
  uint64_t time = 0;  // trace clock ticks, set only when the run is traced
                      // (the trace header names the clock and its rate;
                      // for timelines: no check reads it)
  uint32_t tid = 0;
  EventKind kind = EventKind::kCount;
  int32_t ret = 0;  // the verb's return value (pointer verbs: 0 ok, -1 failed)
  int32_t err = 0;  // errno or returned error code when it failed
  StackId stack = 0;

  ObjId obj = 0;     // the object the call acts on or creates
  ObjId parent = 0;  // context for PD/CQ/channel, PD for MR/QP/SRQ/AH
  ObjId send_cq = 0, recv_cq = 0, srq = 0, channel = 0;

  // Attributes, by kind.
  uint64_t addr = 0;    // MR start, freed range start
  uint64_t length = 0;  // MR length, freed range length
  uint64_t iova = 0;
  uint32_t access = 0;  // MR access / QP access flags
  uint32_t lkey = 0, rkey = 0;
  uint32_t qp_type = 0;
  uint32_t qp_num = 0;
  uint32_t sq_sig_all = 0;
  QpCaps caps;      // returned caps (create_qp), SRQ max_wr in max_recv_wr
  int32_t cqe = 0;  // returned cqe
  uint32_t attr_mask = 0;
  uint32_t qp_state = 0;            // new state (modify_qp) or state reported by an event
  uint32_t count = 0;               // poll: entries asked; ack: nevents; notify: solicited_only
  uint32_t bad_index = UINT32_MAX;  // post: index of *bad_wr in the chain

  absl::InlinedVector<SendWr, 1> send_wrs;
  absl::InlinedVector<RecvWr, 1> recv_wrs;
  absl::InlinedVector<Completion, 4> wcs;
  std::string text;  // kWcReason: the device's reason
};

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_EVENT_H_
