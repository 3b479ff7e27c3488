/* windows.h: memory-window helpers for the window programs in
 * tests/e2e/checks (they need softnic's memory windows, issue 13: each
 * says `REQUIRES: windows`; RDMASAN_E2E_WINDOWS, ON by default, builds them).
 *
 * The client side is qp[0] (it owns the memory and the windows), the peer
 * is qp[1].  As in common.h, the call a test is about stays in the test's
 * own file; these helpers only build WRs, post setup work and poll. */
#ifndef RDMASAN_E2E_CHECKS_WINDOWS_H
#define RDMASAN_E2E_CHECKS_WINDOWS_H

#include "common.h"

#define WIN_MR_ACCESS (RIG_ALL_ACCESS | IBV_ACCESS_MW_BIND)

static inline struct ibv_mw *win_alloc(struct rig *r, enum ibv_mw_type type) {
  struct ibv_mw *mw = ibv_alloc_mw(r->pd, type);
  if (!mw) DIE("ibv_alloc_mw(type %d) failed: %s", (int)type, strerror(errno));
  return mw;
}

/* A BIND_MW WR (type 2) of [addr, +len) of mr, with key `rkey`, signaled. */
static inline struct ibv_send_wr win_bind_wr(uint64_t wr_id, struct ibv_mw *mw, struct ibv_mr *mr, void *addr,
                                             size_t len, uint32_t rkey) {
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_BIND_MW;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.bind_mw.mw = mw;
  wr.bind_mw.rkey = rkey;
  wr.bind_mw.bind_info.mr = mr;
  wr.bind_mw.bind_info.addr = (uintptr_t)addr;
  wr.bind_mw.bind_info.length = len;
  wr.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  return wr;
}

/* A signaled LOCAL_INV of `rkey`. */
static inline struct ibv_send_wr win_local_inv_wr(uint64_t wr_id, uint32_t rkey) {
  struct ibv_send_wr wr;
  memset(&wr, 0, sizeof wr);
  wr.wr_id = wr_id;
  wr.opcode = IBV_WR_LOCAL_INV;
  wr.send_flags = IBV_SEND_SIGNALED;
  wr.invalidate_rkey = rkey;
  return wr;
}

/* ibv_post_send of one WR, which must be accepted.  A macro: the post's
 * frame is the caller's line even in -O2 builds without frame pointers
 * (the POSTED-AT markers point there). */
#define win_post(qp, wr)                                                                           \
  do {                                                                                             \
    struct ibv_send_wr *win_bad_ = NULL;                                                           \
    int win_rc_ = ibv_post_send((qp), (wr), &win_bad_);                                            \
    if (win_rc_) DIE("ibv_post_send(opcode %d) failed: %s", (int)(wr)->opcode, strerror(win_rc_)); \
  } while (0)

/* Binds mw (type 2) with `rkey` and waits for the bind's completion. */
static inline void win_bind(struct rig *r, struct ibv_mw *mw, struct ibv_mr *mr, void *addr, size_t len,
                            uint32_t rkey) {
  struct ibv_send_wr wr = win_bind_wr(0xb1, mw, mr, addr, len, rkey);
  win_post(r->qp[0], &wr);
  rig_poll_ok(r->cq[0], 1);
}

/* Invalidates `rkey` with a signaled LOCAL_INV and waits for its completion. */
static inline void win_local_inv(struct rig *r, uint32_t rkey) {
  struct ibv_send_wr wr = win_local_inv_wr(0x1a, rkey);
  win_post(r->qp[0], &wr);
  rig_poll_ok(r->cq[0], 1);
}

/* The peer (qp[1]) writes 8 bytes through (addr, rkey) and waits for the
 * completion: whether it succeeded. */
static inline int win_peer_write(struct rig *r, struct ibv_mr *peer_mr, void *peer_buf, void *addr,
                                 uint32_t rkey) {
  struct ibv_sge sge = rig_sge(peer_mr, peer_buf, 8);
  struct ibv_send_wr wr = rig_write_wr(0x77, &sge, (uintptr_t)addr, rkey, 1);
  win_post(r->qp[1], &wr);
  struct ibv_wc wc;
  if (rig_poll_n(r->cq[1], &wc, 1) != 1) DIE("the peer's write did not complete");
  return wc.status == IBV_WC_SUCCESS;
}

#endif
