// softnic/exec_order: WRs that execute out of post order, QPs that lag
// (exec_order.h has the rules they follow), and the driver thread that
// runs held WRs when the program makes no more calls.
//
// May not: decide anything but through ChaosDecide, allocate (but for the
// driver's thread, once per process), or let the driver run a WR before
// its wait has ended.
#include "softnic/exec_order.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cinttypes>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <new>

#include "softnic/access.h"

namespace rdmasan::softnic::exec {
namespace {

bool ReadOrAtomic(uint32_t op) {
  return op == IBV_WR_RDMA_READ || op == IBV_WR_ATOMIC_CMP_AND_SWP || op == IBV_WR_ATOMIC_FETCH_AND_ADD;
}

// What may start before an earlier READ or atomic without a fence.
bool OvertakesRead(uint32_t op) {
  switch (op) {
    case IBV_WR_SEND:
    case IBV_WR_SEND_WITH_IMM:
    case IBV_WR_SEND_WITH_INV:
    case IBV_WR_RDMA_WRITE:
    case IBV_WR_RDMA_WRITE_WITH_IMM:
    case IBV_WR_LOCAL_INV:
      return true;
    default:
      return false;
  }
}

// Whether `w` is an RDMA WRITE into memory registered with
// IBV_ACCESS_RELAXED_ORDERING (its rkey names such an MR, or a window on one).
bool RelaxedWrite(Exec& x, const SendWqe& w) {
  if (w.opcode != IBV_WR_RDMA_WRITE) return false;
  const uint32_t type = x.qp->shm->type;
  if (type != IBV_QPT_RC && type != IBV_QPT_UC) return false;
  uint32_t key = w.rkey;
  if (IsMwKey(key)) {
    ShmMw mw;
    if (!TrustedMw(x.mrs, key, &mw)) return false;
    key = mw.mr_key;
  }
  ShmMr m;
  return TrustedMr(x.h, x.mrs.own, x.mrs.self, key, &m) && (m.access & IBV_ACCESS_RELAXED_ORDERING);
}

// The WR behind the head WR, if it may overtake the head by point `p`.
SendWqe* Overtaker(Exec& x, SnQp* qp, const SendWqe& head, ChaosPoint p) {
  if (qp->sq_exec + 1 >= qp->sq_posted) return nullptr;
  SendWqe& next = qp->sq[(qp->sq_exec + 1) & (qp->sq.size() - 1)];
  if (next.flags & IBV_SEND_FENCE) return nullptr;
  if (p == ChaosPoint::kFence)
    return ReadOrAtomic(head.opcode) && OvertakesRead(next.opcode) ? &next : nullptr;
  return RelaxedWrite(x, next) ? &next : nullptr;
}

// Executes `next`, the WR behind the head, now: its outcome waits in
// qp->order until its turn.  A WR that cannot run now runs in its turn.
void RunAhead(Exec& x, SnQp* qp, SendWqe& head, SendWqe& next) {
  PlaceState* const place = x.place;
  x.place = nullptr;  // placed at once
  x.wr_id = next.wr_id;
  x.why[0] = 0;
  x.tm_srq = x.tm_handle = kNone;
  x.fin_pending = false;
  uint32_t len = 0;
  const int st = Execute(x, next, &len);
  if (x.fin_pending) DeliverFinLocked(x);
  if (st != kPending) {
    OrderState& o = qp->order;
    o.ahead = qp->sq_exec + 1;
    o.ahead_status = st;
    o.ahead_len = len;
    memcpy(o.ahead_why, x.why, sizeof(o.ahead_why));
  }
  x.place = place;
  x.wr_id = head.wr_id;
  x.why[0] = 0;
  x.tm_srq = x.tm_handle = kNone;
  x.fin_pending = false;
}

// The first time head WR `w` comes up: may it wait for a WR to overtake
// it (kFence, kRelaxed), or lag (kLag)?
void Decide(Exec& x, SnQp* qp, const SendWqe& w) {
  OrderState& o = qp->order;
  o.decided = qp->sq_exec;
  o.wait_until_ns = 0;
  o.overtaker = 0;
  char what[160];
  ChaosPoint p = ChaosPoint::kCount;
  if (ChaosOn(ChaosPoint::kFence) && ReadOrAtomic(w.opcode)) {
    p = ChaosPoint::kFence;
    snprintf(what, sizeof(what),
             "fence: wr_id 0x%" PRIx64
             " of QP 0x%x, a READ or atomic (1: its data lands after the unfenced WR "
             "behind it, which runs first)",
             w.wr_id, qp->shm->qpn);
  } else if (ChaosOn(ChaosPoint::kRelaxed) && RelaxedWrite(x, w)) {
    p = ChaosPoint::kRelaxed;
    snprintf(what, sizeof(what),
             "relaxed: wr_id 0x%" PRIx64
             " of QP 0x%x, a WRITE into a relaxed-ordering MR (1: the next such "
             "WRITE lands first)",
             w.wr_id, qp->shm->qpn);
  }
  if (p != ChaosPoint::kCount && ChaosDecide(p, qp->ordinal, w.wr_id, 2, what, qp->shm->qpn) == 1) {
    o.overtaker = 1 + static_cast<uint32_t>(p);
    o.wait_until_ns = NowNs() + kOrderStepNs;
    WakeDriver(x.p);
    return;
  }
  if (!ChaosOn(ChaosPoint::kLag)) return;
  snprintf(what, sizeof(what), "lag: wr_id 0x%" PRIx64 " of QP 0x%x (1: it waits while other QPs run)",
           w.wr_id, qp->shm->qpn);
  if (ChaosDecide(ChaosPoint::kLag, qp->ordinal, w.wr_id, 2, what, qp->shm->qpn) == 1) {
    o.wait_until_ns = NowNs() + kOrderStepNs;
    WakeDriver(x.p);
  }
}

// The driver.  One thread per process, started at the first hold; it
// sleeps on DriverCv() while nothing is held.  A pass holds DriverMu(), so
// the exit handler (StopDriver, registered after softnic's own detach
// handler and so run before it) waits for the pass under way and no pass
// starts after it.  A hold that a pass under way did not see still gets
// its pass: WakeDriver sets g_driver_woken, which the thread reads after
// each pass, and an idle thread looks again every kDriverIdleNs (a wake-up
// sent between its look and its wait is not lost for longer).  The mutex
// and the condition are never destroyed: the thread may still wait on
// them while the process exits.
std::mutex& DriverMu() {
  static auto* const mu = new std::mutex();
  return *mu;
}
std::condition_variable& DriverCv() {
  static auto* const cv = new std::condition_variable();
  return *cv;
}
bool g_driver_stop = false;               // under DriverMu()
std::atomic<bool> g_driver_woken{false};  // a hold since the last pass began
std::atomic<pid_t> g_driver_pid{0};       // the process whose driver runs
std::atomic<bool> g_driver_hooks{false};  // exit and fork handlers registered
std::atomic<bool> g_driver_on{true};      // SetDriverForTest
thread_local bool t_driver = false;       // this thread is the driver (it holds DriverMu())
constexpr uint64_t kDriverIdleNs = 50 * 1000 * 1000;

void StopDriver() {
  {
    std::lock_guard<std::mutex> l(DriverMu());
    g_driver_stop = true;
  }
  DriverCv().notify_all();
}

// In a forked child: the parent's thread is not there, and it may have
// held the lock at the fork.
void ForgetDriver() {
  new (&DriverMu()) std::mutex();
  new (&DriverCv()) std::condition_variable();
  g_driver_stop = false;
  g_driver_woken.store(false, std::memory_order_relaxed);
  g_driver_pid.store(0, std::memory_order_relaxed);
}

// Whether the head WR of `qp` (sq_mu held) is held and its grace not over.
bool HeldForTheProgram(const SnQp* qp, uint64_t now) {
  if (qp->place.index == qp->sq_exec && now < qp->place.due_ns + kDriverGraceNs) return true;
  const OrderState& o = qp->order;
  return o.decided == qp->sq_exec && o.wait_until_ns && now < o.wait_until_ns + kDriverGraceNs;
}

// One pass over the process's QPs (DriverMu() held): runs every held WR
// whose grace is over.  Never waits for a QP's lock.  True if WRs remain
// pending.
bool DrivePass(Process* p) {
  bool pending = false;
  std::lock_guard<std::mutex> g(p->mu);
  for (uint32_t i = 0; i < p->qp_slots(); ++i) {
    SnQp* qp = p->qps[i];
    if (!qp || !qp->send_cq) continue;
    if (!qp->sq_mu.try_lock()) {
      pending = true;
      continue;
    }
    std::lock_guard<QueueMutex> sq(qp->sq_mu, std::adopt_lock);
    if (qp->sq_exec >= qp->sq_posted) continue;
    if (!HeldForTheProgram(qp, NowNs())) {
      FabricLock lock(p->fab);
      RunSqLocked(p, qp);
    }
    pending |= qp->sq_exec < qp->sq_posted;
  }
  return pending;
}

void* DriverMain(void* arg) {
  Process* const p = static_cast<Process*>(arg);
  t_driver = true;
  std::unique_lock<std::mutex> l(DriverMu());
  for (;;) {
    if (g_driver_stop) return nullptr;
    g_driver_woken.store(false, std::memory_order_relaxed);
    const bool pending = g_driver_on.load(std::memory_order_relaxed) && DrivePass(p);
    if (g_driver_stop) return nullptr;
    if (pending || g_driver_woken.load(std::memory_order_relaxed))
      DriverCv().wait_for(l, std::chrono::nanoseconds(kOrderStepNs));
    else
      DriverCv().wait_for(l, std::chrono::nanoseconds(kDriverIdleNs),
                          [] { return g_driver_woken.load(std::memory_order_relaxed) || g_driver_stop; });
  }
}

}  // namespace

// Never waits for DriverMu(): its holder (a pass) may wait for the
// fabric lock or a QP's lock that the caller holds.
void SetDriverForTest(bool on) { g_driver_on.store(on, std::memory_order_relaxed); }

void WakeDriver(Process* p) {
  g_driver_woken.store(true, std::memory_order_relaxed);
  if (t_driver) return;  // a pass decided a new hold: it runs again soon
  if (g_driver_pid.load(std::memory_order_acquire) != p->pid) {
    if (!DriverMu().try_lock()) return;  // being started, or a pass (the thread is there)
    std::lock_guard<std::mutex> l(DriverMu(), std::adopt_lock);
    if (g_driver_pid.load(std::memory_order_relaxed) == p->pid || g_driver_stop) return;
    if (!g_driver_hooks.exchange(true)) {
      atexit(StopDriver);
      pthread_atfork(nullptr, nullptr, ForgetDriver);
    }
    // The thread takes no signal meant for the program.
    sigset_t all, old;
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    pthread_t t;
    if (pthread_create(&t, nullptr, DriverMain, p) == 0) {
      pthread_detach(t);
      g_driver_pid.store(p->pid, std::memory_order_release);
    }
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    return;
  }
  DriverCv().notify_one();
}

OrderStep OrderBeforeSlow(Exec& x, SnQp* qp, SendWqe& w, int* st, uint32_t* byte_len) {
  OrderState& o = qp->order;
  const uint64_t head = qp->sq_exec;
  if (o.ahead == head) {
    o.ahead = kNoPlacement;
    *st = o.ahead_status;
    *byte_len = o.ahead_len;
    memcpy(x.why, o.ahead_why, sizeof(x.why));
    return OrderStep::kRanAhead;
  }
  if (qp->place.index == head) return OrderStep::kRun;  // a message partly placed: under way
  // A wait decided now ends in a later call whatever the clock says: the
  // decision may have started the driver thread, which can take longer
  // than a step on a loaded machine.
  const bool fresh = o.decided != head;
  if (fresh) Decide(x, qp, w);
  if (!o.wait_until_ns) return OrderStep::kRun;
  if (o.overtaker) {
    const auto p = static_cast<ChaosPoint>(o.overtaker - 1);
    if (SendWqe* next = Overtaker(x, qp, w, p)) {
      // The overtaker lands now; the head lands a step later, not in the
      // same call: a reader polling memory between the requester's verbs
      // calls (or another process) sees the later WR's data without the
      // head's for a while, as placement shows a partly placed message.
      RunAhead(x, qp, w, *next);
      o.overtaker = 0;
      o.wait_until_ns = NowNs() + kOrderStepNs;
      return OrderStep::kWait;
    }
  }
  if (fresh || NowNs() < o.wait_until_ns) return OrderStep::kWait;
  o.wait_until_ns = 0;
  return OrderStep::kRun;
}

}  // namespace rdmasan::softnic::exec
