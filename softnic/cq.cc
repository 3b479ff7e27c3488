// softnic completion queues and channels: create/destroy, waiting for
// events, polling (ibv_poll_cq and the ibv_cq_ex start/next/end_poll
// interface), and arming.
//
// The ring lives in the fabric: requesters of any process push completions
// (PushCqeLocked), the owner polls them here without the fabric lock.  A
// poll that finds nothing now and then drives the owner's stalled send
// queues (ProgressCq), since no thread does it.  ibv_get_cq_event spins up
// to 20 us for an event before it sleeps, on a channel that had one in the
// last millisecond, and takes it from the channel's mailbox (no datagram).
#include "softnic/fingerprint.h"
#include "softnic/softnic.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <new>
#include <vector>

#include "core/spin_lock.h"
#include "softnic/access.h"
#include "softnic/chaos.h"
#include "softnic/internal.h"
#include "softnic/interrupt.h"
#include "softnic/owned.h"

namespace rdmasan::softnic {

ibv_comp_channel* CreateCompChannel(ibv_context* ctx) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  auto ch = NewOwned<SnChannel>();
  if (!ch) {
    errno = ENOMEM;
    return nullptr;
  }
  {
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    uint32_t slot = FreeSlot(h->channels);
    if (slot == kNone) {
      errno = EMFILE;
      return nullptr;
    }
    uint32_t gen = h->channels[slot].gen;
    ch->ch.fd = MakeEventSocket(p->fab, EventSocket::kChannel, slot, &gen);
    if (ch->ch.fd < 0) {
      return nullptr;
    }
    h->channels[slot].in_use = 1;
    h->channels[slot].proc = p->fab->self_proc();
    h->channels[slot].gen = gen;
    h->channels[slot].spin.store(kChanIdle);
    h->channels[slot].mail.store(0);
    h->channels[slot].dgrams.store(0);
    ch->slot = slot;
    ch->gen = gen;
  }
  ch->ch.context = ctx;
  ch->ch.refcnt = 0;
  return &ch.release()->ch;  // the program's handle now
}

int DestroyCompChannel(ibv_comp_channel* ibch) {
  Process* p = GetProcess();
  auto* ch = reinterpret_cast<SnChannel*>(ibch);
  if (ibch->refcnt) return EBUSY;
  if (p) {
    FabricLock lock(p->fab);
    p->fab->hdr()->channels[ch->slot].in_use = 0;
  }
  close(ibch->fd);
  delete ch;
  return 0;
}

namespace {

ibv_cq_ex* CreateCqCommon(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ibch,
                          uint32_t vector, uint64_t wc_flags) {
  Process* p = GetProcess();
  if (!p) return nullptr;
  if (cqe < 1 || cqe > static_cast<int>(kMaxCqe) || vector >= 1 || (ibch && ibch->context != ctx)) {
    errno = EINVAL;
    return nullptr;
  }
  auto cq = NewOwned<SnCq>();
  if (!cq) {
    errno = ENOMEM;
    return nullptr;
  }
  uint32_t nslots = 1;
  while (nslots < static_cast<uint32_t>(cqe) + 1) nslots <<= 1;
  std::lock_guard<std::mutex> g(p->mu);
  FabricLock lock(p->fab);
  ShmHeader* h = p->fab->hdr();
  uint32_t slot = FreeSlot(h->cqs);
  uint64_t ring = slot == kNone ? 0 : p->fab->Alloc(uint64_t(nslots) * sizeof(ShmCqe));
  if (slot == kNone || !ring) {
    errno = ENOMEM;
    return nullptr;
  }
  ShmCq& s = h->cqs[slot];
  s.in_use = 1;
  s.proc = p->fab->self_proc();
  s.gen++;
  s.ctx = Ctx(ctx)->slot;
  s.channel = ibch ? reinterpret_cast<SnChannel*>(ibch)->slot : kNone;
  s.channel_gen = ibch ? reinterpret_cast<SnChannel*>(ibch)->gen : 0;
  s.cqe = cqe;
  s.nslots = nslots;
  s.ring_off = ring;
  s.prod = 0;
  s.cons_seen = 0;
  s.overrun = 0;
  s.want_ts =
      (wc_flags & (IBV_WC_EX_WITH_COMPLETION_TIMESTAMP | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK)) != 0;
  s.attention.store(0);
  s.cons.store(0);
  s.armed.store(0);
  cq->slot = slot;
  cq->shm = &s;
  cq->ring = p->fab->At<ShmCqe>(ring);
  cq->nslots = nslots;
  cq->want_ts = s.want_ts != 0;
  ibv_cq_ex& x = cq->cqx;
  x.context = ctx;
  x.channel = ibch;
  x.cq_context = cq_context;
  x.handle = slot;
  x.cqe = cqe;
  pthread_mutex_init(&x.mutex, nullptr);
  pthread_cond_init(&x.cond, nullptr);
  InstallCqExOps(cq.get());
  static std::atomic<uint32_t> created{0};
  cq->ordinal = created.fetch_add(1, std::memory_order_relaxed) + 1;
  if (ibch) ++ibch->refcnt;
  p->cqs[slot] = cq.get();
  return &cq.release()->cqx;  // the program's handle now
}

}  // namespace

ibv_cq_ex* VCreateCqEx(ibv_context* ctx, ibv_cq_init_attr_ex* attr) {
  constexpr uint64_t kFlags = IBV_WC_EX_WITH_BYTE_LEN | IBV_WC_EX_WITH_IMM | IBV_WC_EX_WITH_QP_NUM |
                              IBV_WC_EX_WITH_SRC_QP | IBV_WC_EX_WITH_SLID | IBV_WC_EX_WITH_SL |
                              IBV_WC_EX_WITH_DLID_PATH_BITS | IBV_WC_EX_WITH_COMPLETION_TIMESTAMP |
                              IBV_WC_EX_WITH_COMPLETION_TIMESTAMP_WALLCLOCK | IBV_WC_EX_WITH_TM_INFO;
  if (attr->wc_flags & ~kFlags) {
    errno = EOPNOTSUPP;
    return nullptr;
  }
  if (attr->comp_mask & ~(IBV_CQ_INIT_ATTR_MASK_FLAGS | IBV_CQ_INIT_ATTR_MASK_PD)) {
    errno = EINVAL;
    return nullptr;
  }
  // IBV_CQ_INIT_ATTR_MASK_PD names a parent domain of this context (domain.cc).
  ibv_pd* pd = (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) ? attr->parent_domain : nullptr;
  if ((attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD) && (!pd || pd->context != ctx || !IsParentDomain(pd))) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq_ex* cq =
      CreateCqCommon(ctx, attr->cqe, attr->cq_context, attr->channel, attr->comp_vector, attr->wc_flags);
  return pd ? CqInDomain(cq, pd) : cq;
}

ibv_cq* CreateCq(ibv_context* ctx, int cqe, void* cq_context, ibv_comp_channel* ch, int vector) {
  if (vector < 0) {
    errno = EINVAL;
    return nullptr;
  }
  ibv_cq_ex* x = CreateCqCommon(ctx, cqe, cq_context, ch, vector, 0);
  return x ? ibv_cq_ex_to_cq(x) : nullptr;
}

// A new ring, sized as at creation, takes the unpolled completions at the
// same indices; producers (fabric lock) and the owner's poller (cq->mu)
// are both held off while the ring changes.  Smaller than what is waiting
// to be polled is EINVAL, as on rxe and mlx5.
int ResizeCq(ibv_cq* ibcq, int cqe) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  if (cqe < 1 || cqe > static_cast<int>(kMaxCqe)) return EINVAL;
  SnCq* cq = Cq(ibcq);
  uint32_t nslots = 1;
  while (nslots < static_cast<uint32_t>(cqe) + 1) nslots <<= 1;
  std::lock_guard<QueueMutex> poller(cq->mu);
  FabricLock lock(p->fab);
  ShmCq& s = *cq->shm;
  const uint64_t cons = s.cons.load(std::memory_order_relaxed);
  const uint64_t prod = s.prod;
  if (prod < cons || prod - cons > cq->nslots) return EINVAL;  // a ring forged in shared memory
  if (prod - cons > static_cast<uint64_t>(cqe)) return EINVAL;
  const uint64_t ring = p->fab->Alloc(uint64_t(nslots) * sizeof(ShmCqe));
  if (!ring) return ENOMEM;
  ShmCqe* to = p->fab->At<ShmCqe>(ring);
  for (uint32_t i = 0; i < nslots; ++i) to[i].seq.store(0, std::memory_order_relaxed);
  for (uint64_t i = cons; i < prod; ++i) {
    const ShmCqe& from = cq->ring[i & (cq->nslots - 1)];
    ShmCqe& t = to[i & (nslots - 1)];
    memcpy(reinterpret_cast<uint8_t*>(&t) + sizeof(t.seq),
           reinterpret_cast<const uint8_t*>(&from) + sizeof(from.seq), sizeof(ShmCqe) - sizeof(from.seq));
    t.seq.store(from.seq.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  const uint64_t old = s.ring_off;
  s.ring_off = ring;
  s.nslots = nslots;
  s.cqe = static_cast<uint32_t>(cqe);
  std::atomic_thread_fence(std::memory_order_release);
  cq->ring = to;
  cq->nslots = nslots;
  ibcq->cqe = cqe;
  p->fab->Free(old);
  return 0;
}

int DestroyCq(ibv_cq* ibcq) {
  Process* p = GetProcess();
  if (!p) return EINVAL;
  SnCq* cq = Cq(ibcq);
  {
    std::lock_guard<std::mutex> g(p->mu);
    FabricLock lock(p->fab);
    ShmHeader* h = p->fab->hdr();
    // This process's QPs sit below qp_end (the fabric's other 4,096 slots
    // are not read: their pages, untouched by a short program, would be
    // faulted in here).
    for (uint32_t i = 0; i < p->qp_slots(); ++i) {
      const ShmQp& q = h->qps[i];
      if (q.in_use && (q.send_cq == cq->slot || q.recv_cq == cq->slot) && q.proc == p->fab->self_proc())
        return EBUSY;
    }
    p->fab->Free(cq->shm->ring_off);
    cq->shm->in_use = 0;
    p->cqs[cq->slot] = nullptr;
  }
  if (ibcq->channel) --ibcq->channel->refcnt;
  pthread_mutex_destroy(&ibcq->mutex);
  pthread_cond_destroy(&ibcq->cond);
  DetachFromDomain(ibcq);
  delete cq;
  return 0;
}

namespace {

// Chaos (kCqEvent, `--chaos=cq_event`): ibv_get_cq_event(3) may return an
// event with no completion behind it.  Asked once per call, when no event
// is waiting: each CQ of the channel that is armed, and has had a
// completion since its last spurious event (so a program that re-arms,
// polls and waits again is not woken forever), may be decided to wake
// now.  The arm is consumed as a real event consumes it, and the event
// counts toward the acks as any other.
SnCq* SpuriousEvent(Process* p, ibv_comp_channel* ibch) {
  if (__builtin_expect(!ChaosOn(ChaosPoint::kCqEvent), 1)) return nullptr;
  std::vector<SnCq*> mine;
  {
    std::lock_guard<std::mutex> g(p->mu);
    for (SnCq* c : p->cqs)
      if (c && c->cqx.channel == ibch) mine.push_back(c);
  }
  std::sort(mine.begin(), mine.end(), [](const SnCq* a, const SnCq* b) { return a->ordinal < b->ordinal; });
  for (SnCq* c : mine) {
    uint64_t prod;
    {
      FabricLock lock(p->fab);  // requesters push completions under it
      prod = c->shm->prod;
    }
    if (c->shm->armed.load(std::memory_order_acquire) == 0 || prod == c->spurious_at.load()) continue;
    if (ChaosDecide(ChaosPoint::kCqEvent, c->ordinal, 0, 2, "a spurious event on the program's CQ") != 1)
      continue;
    if (c->shm->armed.exchange(0) == 0) continue;  // a completion took the arm (its event is on its way)
    c->spurious_at.store(prod);
    return c;
  }
  return nullptr;
}

// A waiter spins a while before it sleeps in the kernel, while events come
// often: a ping-pong of two event-driven processes then costs no system
// call per event (the producer hands the event over in the channel's
// mailbox, fabric.h) and no scheduler round trip (15-26 us on a 2-vCPU VM).
// A channel idle for longer than kSpinWindowNs sleeps at once, so a
// program that waits long wastes no CPU.  One thread of the process spins
// per channel; another waits on the socket as before.
constexpr uint64_t kSpinNs = 20 * 1000;
constexpr uint64_t kSpinWindowNs = 1000 * 1000;
// A producer between its hand-off and its store of the mail: bounded, in
// case it died there (the event is lost with it; the completion is not).
constexpr uint64_t kMailWaitNs = 10 * 1000 * 1000;

enum class Spun { kNothing, kDatagram, kMail };

// Takes the mail a producer handed over (spin == kChanDelivered).
bool TakeMail(ShmChannel& c, uint32_t msg[2]) {
  const uint64_t start = NowNs();
  uint64_t m;
  for (int spins = 0; !((m = c.mail.load(std::memory_order_acquire)) & kMailValid); ++spins) {
    if ((spins & 63) == 63 && NowNs() - start > kMailWaitNs) break;
    core::SpinWait(0);
  }
  c.mail.store(0, std::memory_order_relaxed);
  c.spin.store(kChanIdle, std::memory_order_release);
  if (!(m & kMailValid)) return false;
  msg[0] = static_cast<uint32_t>(m & (kMailValid - 1));
  msg[1] = static_cast<uint32_t>(m >> 32);
  return true;
}

// Spins for an event on `ch`: kMail with it in `msg`, kDatagram when one
// was sent to the socket meanwhile, kNothing when the spin ran out (or the
// channel was idle too long to spin at all).
Spun SpinForEvent(Process* p, SnChannel* ch, uint32_t msg[2]) {
  const uint64_t start = NowNs();
  if (start - ch->last_event_ns.load(std::memory_order_relaxed) > kSpinWindowNs || ch->slot >= kMaxChannels)
    return Spun::kNothing;
  ShmChannel& c = p->fab->hdr()->channels[ch->slot];
  const uint32_t seen = c.events.load(std::memory_order_acquire);
  uint32_t idle = kChanIdle;
  const bool mailbox = c.spin.compare_exchange_strong(idle, kChanSpinning, std::memory_order_acq_rel);
  Spun got = Spun::kNothing;
  for (int spins = 0;; ++spins) {
    if (mailbox && c.spin.load(std::memory_order_acquire) == kChanDelivered) {
      got = TakeMail(c, msg) ? Spun::kMail : Spun::kNothing;
      break;
    }
    if (c.events.load(std::memory_order_acquire) != seen) {
      got = Spun::kDatagram;
      break;
    }
    if ((spins & 63) == 63 && NowNs() - start > kSpinNs) break;
    core::SpinWait((spins & 255) == 255 ? 64 : 0);  // a pause; now and then the CPU goes to others
  }
  if (mailbox && got != Spun::kMail) {
    uint32_t spinning = kChanSpinning;
    // A producer that handed over meanwhile: its event is ours, now.
    if (!c.spin.compare_exchange_strong(spinning, kChanIdle, std::memory_order_acq_rel) && TakeMail(c, msg))
      got = Spun::kMail;
  }
  return got;
}

}  // namespace

int GetCqEvent(ibv_comp_channel* ibch, ibv_cq** cq_out, void** ctx_out) {
  Process* p = GetProcess();
  if (!p) return -1;
  const bool nonblock = fcntl(ibch->fd, F_GETFL) & O_NONBLOCK;
  bool chaos_asked = false;
  bool mailed = false;
  bool woken = false;  // poll(2) said the socket is readable: read it whatever the counts say
  uint32_t mail[2];
  SnChannel* const ch = reinterpret_cast<SnChannel*>(ibch);
  const std::atomic<uint32_t>* const dgrams =
      ch->slot < kMaxChannels ? &p->fab->hdr()->channels[ch->slot].dgrams : nullptr;
  for (;;) {
    uint32_t msg[2];
    ssize_t n;
    if (mailed) {
      msg[0] = mail[0];
      msg[1] = mail[1];
      mailed = false;
      n = sizeof(msg);
    } else if (woken || nonblock || !dgrams ||
               dgrams->load(std::memory_order_acquire) != ch->dgrams_taken.load(std::memory_order_relaxed)) {
      // A datagram may be queued (the counts differ, or a sender has not
      // counted its own yet and poll(2) woke us): read it.  Non-blocking,
      // always: a program that waits in epoll(7) on the fd, edge-triggered,
      // must not be told EAGAIN while a datagram sits in the socket.
      woken = false;
      n = RecvFromOwner(ibch->fd, msg, sizeof(msg), MSG_DONTWAIT);
      if (n == sizeof(msg)) ch->dgrams_taken.fetch_add(1, std::memory_order_relaxed);
    } else {
      n = -1;  // every datagram sent was read: no system call
      errno = EAGAIN;
    }
    if (n == sizeof(msg)) {
      SnCq* cq = nullptr;
      {
        std::lock_guard<std::mutex> g(p->mu);
        if (msg[0] < kMaxCqs) cq = p->cqs[msg[0]];
      }
      if (!cq || cq->cqx.channel != ibch || cq->shm->gen != msg[1]) continue;  // stale
      ch->last_event_ns.store(NowNs(), std::memory_order_relaxed);
      ++cq->events_reported;
      *cq_out = ibv_cq_ex_to_cq(&cq->cqx);
      *ctx_out = cq->cqx.cq_context;
      return 0;
    }
    if (n >= 0) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    if (!chaos_asked) {
      chaos_asked = true;
      if (SnCq* cq = SpuriousEvent(p, ibch)) {
        ++cq->events_reported;
        *cq_out = ibv_cq_ex_to_cq(&cq->cqx);
        *ctx_out = cq->cqx.cq_context;
        return 0;
      }
      errno = EAGAIN;
    }
    if (nonblock) return -1;
    switch (SpinForEvent(p, ch, mail)) {
      case Spun::kMail:
        mailed = true;
        continue;
      case Spun::kDatagram:
        continue;
      case Spun::kNothing:
        break;
    }
    // Block, but wake now and then to drive RNR retries and notice dead
    // peers of the QPs whose completions this channel reports.
    pollfd pfd{ibch->fd, POLLIN, 0};
    int r = poll(&pfd, 1, 20);
    if (r < 0 && (errno != EINTR || !RestartAfterSignal())) return -1;  // EINTR as read(2) gives it
    woken = r > 0;
    if (r == 0) {
      std::vector<SnCq*> mine;
      {
        std::lock_guard<std::mutex> g(p->mu);
        for (SnCq* c : p->cqs)
          if (c && c->cqx.channel == ibch) mine.push_back(c);
      }
      for (SnCq* c : mine) ProgressCq(p, c);
    }
  }
}

void AckCqEvents(ibv_cq* cq, unsigned n) {
  pthread_mutex_lock(&cq->mutex);
  cq->comp_events_completed += n;
  pthread_cond_signal(&cq->cond);
  pthread_mutex_unlock(&cq->mutex);
}

namespace {

// Scatters `len` staged bytes into the receive buffers `sge` names: only
// into MRs of this process that grant local write, by the process's own
// record (a completion in shared memory can be forged).  False if they
// name anything else or hold less (nothing is written then), or if they
// are no longer mapped (the copy cannot fault).
bool ScatterInto(Process* p, const ShmSge* sge, uint32_t nsge, const uint8_t* bytes, uint32_t len) {
  Seg dst[kStageSges];
  uint32_t nd = 0, off = 0;
  for (uint32_t i = 0; i < nsge && off < len; ++i) {
    uint32_t n = std::min(sge[i].length, len - off);
    if (!OwnRange(p->own_mrs, sge[i].lkey, sge[i].addr, n, IBV_ACCESS_LOCAL_WRITE)) return false;
    dst[nd++] = {sge[i].addr, n};
    off += n;
  }
  if (off < len) return false;  // more than the buffers hold: the requester checked, so forged
  if (!off) return true;
  // Straight from the completion's slot: the ring is this process's to
  // read until the poll moves the consumer index on.
  Seg src{reinterpret_cast<uint64_t>(bytes), off};
  return Move(p->pid, p->pid, dst, nd, p->pid, &src, 1) == 0;
}

bool ScatterStaged(Process* p, const ShmCqe& c) {
  uint8_t nsge = c.stage_nsge;
  uint32_t len = c.stage_len;
  if (nsge > kStageSges || len > kStageBytes) return false;
  ShmSge sge[kStageSges];
  for (uint32_t i = 0; i < nsge; ++i) sge[i] = StageSge(c, i);  // only those used: one line for one SGE
  return ScatterInto(p, sge, nsge, c.stage, len);
}

// The fields of a completion's first line every completion carries.
void FillFromFirstLine(SnCq* cq, const ShmCqe& c, ibv_wc* wc, bool recv) {
  wc->wr_id = c.wr_id;
  wc->status = static_cast<ibv_wc_status>(c.status);
  wc->opcode = static_cast<ibv_wc_opcode>(c.opcode);
  wc->byte_len = c.byte_len;
  wc->imm_data = c.imm_data;
  wc->qp_num = c.qp_num;
  wc->src_qp = c.src_qp;
  wc->wc_flags = c.wc_flags & ~(0x80000000u | kWcDestModified);
  if (__builtin_expect(c.wc_flags & kWcDestModified, 0))
    NoteModified(ibv_cq_ex_to_cq(&cq->cqx), c.qp_num, c.wr_id, recv);
}

// Takes a small receive staged in one line (kStagedInLine): its buffers
// from the QP's own record of the post at the WQE's ring slot.  Anything
// that does not match that record (a completion forged in shared memory)
// completes in error and writes nothing.
void TakeInLine(Process* p, SnCq* cq, const ShmCqe& c, ibv_wc* wc) {
  FillFromFirstLine(cq, c, wc, true);
  wc->vendor_err = 0;
  wc->pkey_index = 0;
  wc->slid = 1;
  wc->sl = 0;
  wc->dlid_path_bits = 0;
  // A program that polled a receive mostly posts next, and a post takes
  // the fabric lock, whose line the peer's post took last: fetch it now,
  // while the completion is taken and the receive reposted.
  __builtin_prefetch(&p->fab->hdr()->lock, 1);
  cq->cur_ts = cq->want_ts ? c.ts_ns : 0;
  cq->cur_tm_tag = 0;
  cq->cur_tm_priv = 0;
  SnQp* qp = c.qp_slot < kMaxQps ? p->qps[c.qp_slot] : nullptr;
  if (!qp || qp->shm->qpn != c.qp_num || qp->srq || c.sq_index >= qp->rq_shadow.size()) {
    wc->status = IBV_WC_LOC_PROT_ERR;
    wc->byte_len = 0;
    return;
  }
  const RecvShadow& post = qp->rq_shadow[c.sq_index];
  if (wc->status == IBV_WC_SUCCESS &&
      (post.wr_id != c.wr_id || post.num_sge > kStageSges || c.byte_len > kLineBytes ||
       !ScatterInto(p, post.sge, post.num_sge, LineBytes(c), c.byte_len))) {
    wc->status = IBV_WC_LOC_PROT_ERR;
    wc->byte_len = 0;
  }
  qp->rq_outstanding.NotePolled();
}

// Takes one completion (cq->mu held).  Returns false if none.
bool PollOne(Process* p, SnCq* cq, ibv_wc* wc) {
  ShmCq& s = *cq->shm;
  uint64_t cons = s.cons.load(std::memory_order_relaxed);
  ShmCqe& c = cq->ring[cons & (cq->nslots - 1)];
  if (c.seq.load(std::memory_order_acquire) != cons + 1) return false;
  if (c.stage_nsge == kStagedInLine) {
    TakeInLine(p, cq, c, wc);
    s.cons.store(cons + 1, std::memory_order_release);
    return true;
  }
  if (!c.is_send) __builtin_prefetch(&p->fab->hdr()->lock, 1);  // as TakeInLine
  FillFromFirstLine(cq, c, wc, !c.is_send);
  wc->vendor_err = c.vendor_err;
  wc->pkey_index = c.pkey_index;
  wc->slid = c.slid;
  wc->sl = c.sl;
  wc->dlid_path_bits = c.dlid_path_bits;
  if (c.stage_nsge && wc->status == IBV_WC_SUCCESS && !ScatterStaged(p, c)) {
    // A forged completion, or the receive buffer was unmapped under its
    // MR: the device could not write it.
    wc->status = IBV_WC_LOC_PROT_ERR;
    wc->byte_len = 0;
  }
  cq->cur_ts = c.ts_ns;
  cq->cur_tm_tag = c.tm_tag;
  cq->cur_tm_priv = c.tm_priv;
  // Retire queue slots: the completion is now seen by the application.
  SnQp* qp = c.qp_slot < kMaxQps ? p->qps[c.qp_slot] : nullptr;
  if (c.tm != kTmNone) {
    // A tag list operation or a tagged buffer: no receive WQE of the SRQ.
    RetireTmCqe(p, c);
  } else if (!c.is_send && c.xrc_srq) {
    // An XRC receive: its SRQ's slot, whichever process's target QP took
    // it (only one of ours, completing on this CQ, is retired).
    const uint32_t slot = c.xrc_srq - 1;
    SnSrq* srq = slot < kMaxSrqs ? p->srqs[slot] : nullptr;
    if (srq && srq->cq == cq && srq->outstanding.load(std::memory_order_relaxed) > 0)
      srq->outstanding.fetch_sub(1, std::memory_order_relaxed);
  } else if (qp && qp->shm->qpn == c.qp_num) {
    if (c.is_send) {
      uint64_t to = c.sq_index + 1;
      // sq_index is the low 32 bits of the WQE counter; rebuild the full one.
      uint64_t cur = qp->sq_retire_to.load(std::memory_order_relaxed);
      uint64_t full = (cur & ~0xffffffffull) | (to & 0xffffffffull);
      if (full < cur) full += 1ull << 32;
      qp->sq_retire_to.store(full, std::memory_order_release);
    } else if (qp->srq) {
      qp->srq->outstanding.fetch_sub(1, std::memory_order_relaxed);
    } else {
      qp->rq_outstanding.NotePolled();
    }
  } else if (!c.is_send && c.qp_slot < kMaxQps) {
    // QP destroyed since; nothing to retire.
  }
  s.cons.store(cons + 1, std::memory_order_release);
  return true;
}

// After an empty poll: drives pending work when something may be waiting
// on it (a stalled send queue, a flush raised by a peer) and, every 4096th
// empty poll, checks liveness anyway.  Returns true if it did.
bool ProgressIfDue(Process* p, SnCq* cq) {
  uint32_t att = cq->shm->attention.load(std::memory_order_relaxed);
  if (!cq->stalled.load(std::memory_order_relaxed) && !p->sq_stalled.load(std::memory_order_relaxed) &&
      att == cq->seen_attention && ++cq->empty_polls < 4096)
    return false;
  cq->seen_attention = att;
  cq->empty_polls = 0;
  ProgressCq(p, cq);
  return true;
}

// Whether the CQ's next slot looks published, read without cq->mu: an
// empty poll (a spinning program's usual one) takes no lock.  Another
// thread's poll may move the consumer index meanwhile; a wrong answer
// costs one locked PollOne that finds nothing, or a poll that returns 0
// while another thread takes the completion.
bool LooksReady(const SnCq* cq) {
  const uint64_t cons = cq->shm->cons.load(std::memory_order_relaxed);
  return cq->ring[cons & (cq->nslots - 1)].seq.load(std::memory_order_acquire) == cons + 1;
}

}  // namespace

int PollCqOp(ibv_cq* ibcq, int n, ibv_wc* wc) {
  Process* p = GetProcess();
  if (!p || n < 0) return -1;
  SnCq* cq = Cq(ibcq);
  int got = 0;
  if (LooksReady(cq)) {
    std::lock_guard<QueueMutex> g(cq->mu);
    while (got < n && PollOne(p, cq, &wc[got])) ++got;
  }
  if (got == 0 && ProgressIfDue(p, cq)) {
    std::lock_guard<QueueMutex> g(cq->mu);
    while (got < n && PollOne(p, cq, &wc[got])) ++got;
  }
  return got;
}

void CleanCqLocked(Process* p, SnCq* cq, uint32_t qp_slot, uint32_t qpn, SnSrq* srq) {
  ShmCq& s = *cq->shm;
  const uint64_t cons = s.cons.load(std::memory_order_relaxed);
  const uint64_t prod = s.prod;
  if (prod - cons > cq->nslots) return;  // a ring forged in shared memory
  // From the newest down, the others move up over the removed ones; the
  // consumer index then skips the slots they leave.
  uint64_t removed = 0;
  for (uint64_t i = prod; i-- > cons;) {
    ShmCqe& c = cq->ring[i & (cq->nslots - 1)];
    if (c.seq.load(std::memory_order_acquire) != i + 1) break;  // not published
    if (c.qp_slot == qp_slot && c.qp_num == qpn) {
      if (!c.is_send && srq && c.tm == kTmNone) srq->outstanding.fetch_sub(1, std::memory_order_relaxed);
      ++removed;
    } else if (removed) {
      ShmCqe& to = cq->ring[(i + removed) & (cq->nslots - 1)];
      memcpy(reinterpret_cast<uint8_t*>(&to) + sizeof(to.seq),
             reinterpret_cast<const uint8_t*>(&c) + sizeof(c.seq), sizeof(ShmCqe) - sizeof(c.seq));
      to.seq.store(i + removed + 1, std::memory_order_release);
    }
  }
  if (removed) s.cons.store(cons + removed, std::memory_order_release);
  (void)p;
}

int ReqNotifyCqOp(ibv_cq* ibcq, int solicited_only) {
  SnCq* cq = Cq(ibcq);
  if (!ibcq->channel) return EINVAL;
  cq->shm->armed.store(solicited_only ? 2 : 1, std::memory_order_seq_cst);
  return 0;
}

namespace {

SnCq* CqX(ibv_cq_ex* x) { return reinterpret_cast<SnCq*>(x); }

int StartPoll(ibv_cq_ex* x, ibv_poll_cq_attr* attr) {
  if (attr && attr->comp_mask) return EINVAL;
  Process* p = GetProcess();
  if (!p) return ENODEV;
  SnCq* cq = CqX(x);
  cq->mu.lock();
  if (!PollOne(p, cq, &cq->cur)) {
    cq->mu.unlock();
    ProgressIfDue(p, cq);  // so that a later start_poll finds the work
    return ENOENT;
  }
  x->wr_id = cq->cur.wr_id;
  x->status = cq->cur.status;
  return 0;
}

int NextPoll(ibv_cq_ex* x) {
  Process* p = GetProcess();
  SnCq* cq = CqX(x);
  if (!p || !PollOne(p, cq, &cq->cur)) return ENOENT;
  x->wr_id = cq->cur.wr_id;
  x->status = cq->cur.status;
  return 0;
}

void EndPoll(ibv_cq_ex* x) { CqX(x)->mu.unlock(); }
ibv_wc_opcode ReadOpcode(ibv_cq_ex* x) { return CqX(x)->cur.opcode; }
uint32_t ReadVendorErr(ibv_cq_ex* x) { return CqX(x)->cur.vendor_err; }
uint32_t ReadByteLen(ibv_cq_ex* x) { return CqX(x)->cur.byte_len; }
__be32 ReadImm(ibv_cq_ex* x) { return CqX(x)->cur.imm_data; }
uint32_t ReadQpNum(ibv_cq_ex* x) { return CqX(x)->cur.qp_num; }
uint32_t ReadSrcQp(ibv_cq_ex* x) { return CqX(x)->cur.src_qp; }
unsigned ReadWcFlags(ibv_cq_ex* x) { return CqX(x)->cur.wc_flags; }
uint32_t ReadSlid(ibv_cq_ex* x) { return CqX(x)->cur.slid; }
uint8_t ReadSl(ibv_cq_ex* x) { return CqX(x)->cur.sl; }
uint8_t ReadDlidPathBits(ibv_cq_ex* x) { return CqX(x)->cur.dlid_path_bits; }
uint64_t ReadTs(ibv_cq_ex* x) { return CqX(x)->cur_ts; }
uint64_t ReadWallclock(ibv_cq_ex* x) { return CqX(x)->cur_ts; }
void ReadTmInfo(ibv_cq_ex* x, ibv_wc_tm_info* info) {
  info->tag = CqX(x)->cur_tm_tag;
  info->priv = CqX(x)->cur_tm_priv;
}

}  // namespace

void InstallCqExOps(SnCq* cq) {
  ibv_cq_ex& x = cq->cqx;
  x.start_poll = StartPoll;
  x.next_poll = NextPoll;
  x.end_poll = EndPoll;
  x.read_opcode = ReadOpcode;
  x.read_vendor_err = ReadVendorErr;
  x.read_byte_len = ReadByteLen;
  x.read_imm_data = ReadImm;
  x.read_qp_num = ReadQpNum;
  x.read_src_qp = ReadSrcQp;
  x.read_wc_flags = ReadWcFlags;
  x.read_slid = ReadSlid;
  x.read_sl = ReadSl;
  x.read_dlid_path_bits = ReadDlidPathBits;
  x.read_completion_ts = ReadTs;
  x.read_completion_wallclock_ns = ReadWallclock;
  x.read_tm_info = ReadTmInfo;
}

}  // namespace rdmasan::softnic
