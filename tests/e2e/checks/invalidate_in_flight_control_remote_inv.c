/* invalidate-in-flight (and rkey-not-bumped) near miss: the peer
 * invalidates the window with SEND_WITH_INV; the owner sees it in the
 * receive completion's wc_flags before it rebinds (with a new key) and
 * finally deallocates the window.
 * REQUIRES: windows */
#include "windows.h"

int main(void) {
  struct rig r;
  rig_setup(&r, NULL);
  char *buf = calloc(1, 4096);
  char *msgs = calloc(1, 256);
  struct ibv_mr *mr = rig_reg(&r, buf, 4096, WIN_MR_ACCESS);
  struct ibv_mr *mmr = rig_reg(&r, msgs, 256, RIG_ALL_ACCESS);
  struct ibv_mw *mw = win_alloc(&r, IBV_MW_TYPE_2);
  uint32_t key = mw->rkey;
  for (int io = 0; io < 3; ++io) {
    key = ibv_inc_rkey(key);
    win_bind(&r, mw, mr, buf + io * 1024, 512, key);
    /* The owner's receive for the peer's reply. */
    struct ibv_sge rs = rig_sge(mmr, msgs, 64);
    struct ibv_recv_wr rwr = {.wr_id = 100 + io, .sg_list = &rs, .num_sge = 1};
    struct ibv_recv_wr *rbad = NULL;
    if (ibv_post_recv(r.qp[0], &rwr, &rbad)) DIE("ibv_post_recv failed");
    /* The peer writes through the key, then replies with SEND_WITH_INV. */
    if (!win_peer_write(&r, mmr, msgs + 128, buf + io * 1024, key)) DIE("the peer's write failed");
    struct ibv_sge ss = rig_sge(mmr, msgs + 192, 8);
    struct ibv_send_wr swr;
    memset(&swr, 0, sizeof swr);
    swr.wr_id = 200 + io;
    swr.opcode = IBV_WR_SEND_WITH_INV;
    swr.send_flags = IBV_SEND_SIGNALED;
    swr.sg_list = &ss;
    swr.num_sge = 1;
    swr.invalidate_rkey = key;
    win_post(r.qp[1], &swr);
    rig_poll_ok(r.cq[1], 1);
    struct ibv_wc wc;
    if (rig_poll_n(r.cq[0], &wc, 1) != 1 || wc.status != IBV_WC_SUCCESS) DIE("no reply");
    if (!(wc.wc_flags & IBV_WC_WITH_INV) || wc.invalidated_rkey != key)
      DIE("the reply did not invalidate the key");
  }
  if (ibv_dealloc_mw(mw)) DIE("ibv_dealloc_mw failed");
  if (ibv_dereg_mr(mr)) DIE("ibv_dereg_mr failed");
  if (ibv_dereg_mr(mmr)) DIE("ibv_dereg_mr failed");
  free(buf);
  free(msgs);
  rig_teardown(&r);
  printf("DONE\n");
  return 0;
}
