// interpose/sched_ex: the scheduler's side of an ibv_cq_ex: reading the
// provider's completion into a buffer entry (start_poll .. next_poll), and
// the read_* functions the program calls, which read the completion the
// scheduler served (CqState::current).  Split from sched.cc at its
// ibv_cq_ex seam.
//
// May not: be called but by sched.cc and through the CQ's read_* pointers
// (the program's, between start_poll and end_poll, the CQ's lock held).
#include <cstring>

#include "interpose/sched_state.h"

namespace rdmasan::interpose::sched::internal {

void ReadEx(const ExFns& f, ibv_cq_ex* cq, Entry* e) {
  ibv_wc& wc = e->wc;
  std::memset(&wc, 0, sizeof(wc));
  wc.wr_id = cq->wr_id;
  wc.status = cq->status;
  const bool ok = cq->status == IBV_WC_SUCCESS;
  const uint64_t fl = f.wc_flags;
  if (f.read_vendor_err && !ok) wc.vendor_err = f.read_vendor_err(cq);
  if ((fl & IBV_WC_EX_WITH_QP_NUM) && f.read_qp_num) wc.qp_num = f.read_qp_num(cq);
  if (!ok) return;
  if (f.read_opcode) wc.opcode = f.read_opcode(cq);
  if (f.read_wc_flags) wc.wc_flags = f.read_wc_flags(cq);
  if ((fl & IBV_WC_EX_WITH_BYTE_LEN) && f.read_byte_len) wc.byte_len = f.read_byte_len(cq);
  if ((fl & IBV_WC_EX_WITH_IMM) && f.read_imm_data) wc.imm_data = f.read_imm_data(cq);
  if ((fl & IBV_WC_EX_WITH_SRC_QP) && f.read_src_qp) wc.src_qp = f.read_src_qp(cq);
  if ((fl & IBV_WC_EX_WITH_SLID) && f.read_slid) wc.slid = static_cast<uint16_t>(f.read_slid(cq));
  if ((fl & IBV_WC_EX_WITH_SL) && f.read_sl) wc.sl = f.read_sl(cq);
  if ((fl & IBV_WC_EX_WITH_DLID_PATH_BITS) && f.read_dlid_path_bits)
    wc.dlid_path_bits = f.read_dlid_path_bits(cq);
  if ((fl & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) && f.read_completion_ts) e->ts = f.read_completion_ts(cq);
  if ((fl & IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK) && f.read_completion_wallclock_ns)
    e->wallclock = f.read_completion_wallclock_ns(cq);
  if ((fl & IBV_WC_EX_WITH_CVLAN) && f.read_cvlan) e->cvlan = f.read_cvlan(cq);
  if ((fl & IBV_WC_EX_WITH_FLOW_TAG) && f.read_flow_tag) e->flow_tag = f.read_flow_tag(cq);
  if ((fl & IBV_WC_EX_WITH_TM_INFO) && f.read_tm_info) f.read_tm_info(cq, &e->tm);
}

namespace {

const Entry& Cur(ibv_cq_ex* cq) {
  static const Entry kNone{};
  CqState* st = StateOf(cq);
  return st ? st->current : kNone;
}

ibv_wc_opcode SReadOpcode(ibv_cq_ex* cq) { return Cur(cq).wc.opcode; }
uint32_t SReadVendorErr(ibv_cq_ex* cq) { return Cur(cq).wc.vendor_err; }
uint32_t SReadByteLen(ibv_cq_ex* cq) { return Cur(cq).wc.byte_len; }
__be32 SReadImm(ibv_cq_ex* cq) { return Cur(cq).wc.imm_data; }
uint32_t SReadQpNum(ibv_cq_ex* cq) { return Cur(cq).wc.qp_num; }
uint32_t SReadSrcQp(ibv_cq_ex* cq) { return Cur(cq).wc.src_qp; }
unsigned int SReadWcFlags(ibv_cq_ex* cq) { return Cur(cq).wc.wc_flags; }
uint32_t SReadSlid(ibv_cq_ex* cq) { return Cur(cq).wc.slid; }
uint8_t SReadSl(ibv_cq_ex* cq) { return Cur(cq).wc.sl; }
uint8_t SReadDlidPathBits(ibv_cq_ex* cq) { return Cur(cq).wc.dlid_path_bits; }
uint64_t SReadTs(ibv_cq_ex* cq) { return Cur(cq).ts; }
uint16_t SReadCvlan(ibv_cq_ex* cq) { return Cur(cq).cvlan; }
uint32_t SReadFlowTag(ibv_cq_ex* cq) { return Cur(cq).flow_tag; }
void SReadTmInfo(ibv_cq_ex* cq, ibv_wc_tm_info* out) { *out = Cur(cq).tm; }
uint64_t SReadWallclock(ibv_cq_ex* cq) { return Cur(cq).wallclock; }

}  // namespace

void HookReaders(ibv_cq_ex* cq) {
  // Only the readers the provider offers: the others stay null, as the
  // program found them.
  if (cq->read_opcode) cq->read_opcode = SReadOpcode;
  if (cq->read_vendor_err) cq->read_vendor_err = SReadVendorErr;
  if (cq->read_byte_len) cq->read_byte_len = SReadByteLen;
  if (cq->read_imm_data) cq->read_imm_data = SReadImm;
  if (cq->read_qp_num) cq->read_qp_num = SReadQpNum;
  if (cq->read_src_qp) cq->read_src_qp = SReadSrcQp;
  if (cq->read_wc_flags) cq->read_wc_flags = SReadWcFlags;
  if (cq->read_slid) cq->read_slid = SReadSlid;
  if (cq->read_sl) cq->read_sl = SReadSl;
  if (cq->read_dlid_path_bits) cq->read_dlid_path_bits = SReadDlidPathBits;
  if (cq->read_completion_ts) cq->read_completion_ts = SReadTs;
  if (cq->read_cvlan) cq->read_cvlan = SReadCvlan;
  if (cq->read_flow_tag) cq->read_flow_tag = SReadFlowTag;
  if (cq->read_tm_info) cq->read_tm_info = SReadTmInfo;
  if (cq->read_completion_wallclock_ns) cq->read_completion_wallclock_ns = SReadWallclock;
}

}  // namespace rdmasan::interpose::sched::internal
