// interpose/watchdog: see watchdog.h.  Hangs are found from per-thread
// slots (progress and empty-poll counters, the wait a thread is in and the
// stack it waits at) that a watchdog thread sums every tick; crashes are
// reported from the context of the signal.
#include "interpose/watchdog.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <time.h>
#include <ucontext.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <chrono>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "checkers/state.h"
#include "core/options.h"
#include "core/report.h"
#include "core/stack.h"
#include "interpose/faults.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"

namespace rdmasan::interpose::watchdog {
namespace internal {
std::atomic<bool> g_on{false};
}  // namespace internal

namespace {

using internal::g_on;

uint64_t NowNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

enum Wait : int { kNone = 0, kCqEvent = 1, kAsyncEvent = 2 };

// A thread's part of the books.  Written by its thread only (plain
// load+store of its own atomics: no read-modify-write on the data path);
// read by the watchdog thread and by signal handlers.  Never freed: a slot
// of a thread that ended stays, idle.
struct Slot {
  std::atomic<uint64_t> progress{0};
  std::atomic<uint64_t> empty_polls{0};  // empty polls (and failed non-blocking CQ-event reads)
  // The current streak of empty polls (since the thread's last progress):
  // the CQs it polled (up to kStreakCqs) and where it polled the first.
  static constexpr int kStreakCqs = 4;
  std::atomic<int> streak_cqs{0};  // 0: no streak
  std::atomic<const void*> streak_cq[kStreakCqs] = {};
  std::atomic<core::StackId> streak_stack{0};
  std::atomic<uint64_t> streak_since{0};
  // The streak polled more CQs than streak_cq holds, or read a channel
  // without blocking: what it waits on is not all known (no proof).
  std::atomic<bool> streak_unknown{false};
  // A blocking wait in progress.
  std::atomic<int> wait{kNone};
  std::atomic<uint64_t> wait_obj{0};  // the channel's id (kCqEvent)
  std::atomic<core::StackId> wait_stack{0};
  std::atomic<uint64_t> wait_since{0};
  // Verbs calls that are more than waiting: every event but an empty poll,
  // an empty non-blocking CQ-event read or arming a CQ.  A proof of a hang
  // needs a grace period with none.
  std::atomic<uint64_t> calls{0};
  uint32_t tid = 0;
  // The watchdog's: empty_polls when the program's progress last changed,
  // and at its previous tick (whether the thread still polls).
  std::atomic<uint64_t> empty_at_stall{0};
  uint64_t empty_at_tick = 0;
  Slot* next = nullptr;
};

std::atomic<Slot*> g_slots{nullptr};
thread_local Slot* t_slot = nullptr;

Slot* MySlot() {
  if (Slot* s = t_slot) return s;
  Reentry re;  // the slot is rdmasan's own memory
  auto* s = new Slot();
  s->tid = static_cast<uint32_t>(syscall(SYS_gettid));
  Slot* head = g_slots.load(std::memory_order_acquire);
  do s->next = head;
  while (!g_slots.compare_exchange_weak(head, s, std::memory_order_acq_rel, std::memory_order_acquire));
  t_slot = s;
  return s;
}

template <typename T>
void Bump(std::atomic<T>& a) {
  a.store(a.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

void Progress(Slot* s) {
  Bump(s->progress);
  if (s->streak_cqs.load(std::memory_order_relaxed)) {
    s->streak_cqs.store(0, std::memory_order_relaxed);
    if (s->streak_unknown.load(std::memory_order_relaxed))
      s->streak_unknown.store(false, std::memory_order_relaxed);
  }
}

int g_timeout_s = 0;                       // hang_timeout
std::atomic<uint64_t> g_last_progress{0};  // NowNs() when the watchdog last saw the sum change
std::atomic<bool> g_reported{false};       // a hang was reported (once per process)
std::once_flag g_start_once;

// --------------------------------------------------------------- report --

struct Waiter {
  uint32_t tid = 0;
  int wait = kNone;  // kNone: polls
  core::StackId stack = 0;
  uint64_t since = 0;
  std::vector<core::ObjId> cqs;  // polled, or bound to the channel waited on
  core::ObjId channel = 0;
};

std::string Plural(uint64_t n, const char* one, const char* many) {
  return absl::StrCat(n, " ", n == 1 ? one : many);
}

std::string Seconds(uint64_t ns) { return absl::StrFormat("%.1f s", static_cast<double>(ns) / 1e9); }

// The threads that wait now: pollers whose empty polls went on after the
// progress stopped, and blocked waits.
std::vector<Waiter> Waiters(uint64_t now, const std::vector<checkers::CqOutstanding>& books) {
  std::vector<Waiter> out;
  for (Slot* s = g_slots.load(std::memory_order_acquire); s; s = s->next) {
    Waiter w;
    w.tid = s->tid;
    const int wait = s->wait.load(std::memory_order_acquire);
    if (wait != kNone) {
      w.wait = wait;
      w.stack = s->wait_stack.load(std::memory_order_relaxed);
      w.since = s->wait_since.load(std::memory_order_relaxed);
      if (wait == kCqEvent) {
        w.channel = s->wait_obj.load(std::memory_order_relaxed);
        for (const auto& b : books)
          if (w.channel && b.channel == w.channel) w.cqs.push_back(b.cq);
      }
    } else {
      const int n = std::min(s->streak_cqs.load(std::memory_order_acquire), Slot::kStreakCqs);
      if (n == 0 ||
          s->empty_polls.load(std::memory_order_relaxed) == s->empty_at_stall.load(std::memory_order_relaxed))
        continue;  // not polling, or it stopped polling when the progress stopped
      w.stack = s->streak_stack.load(std::memory_order_relaxed);
      w.since = s->streak_since.load(std::memory_order_relaxed);
      for (int i = 0; i < n; ++i)
        if (core::ObjId id = Id(s->streak_cq[i].load(std::memory_order_relaxed))) w.cqs.push_back(id);
    }
    (void)now;
    out.push_back(std::move(w));
  }
  // Oldest wait first; pollers and CQ-event waits before async waits.
  std::stable_sort(out.begin(), out.end(), [](const Waiter& a, const Waiter& b) {
    if ((a.wait == kAsyncEvent) != (b.wait == kAsyncEvent)) return b.wait == kAsyncEvent;
    return a.since < b.since;
  });
  return out;
}

std::string Describe(const Waiter& w, uint64_t now) {
  const std::string for_s = Seconds(now > w.since ? now - w.since : 0);
  if (w.wait == kAsyncEvent)
    return absl::StrFormat("thread %d blocks in ibv_get_async_event for %s", w.tid, for_s);
  std::vector<std::string> cqs;
  for (core::ObjId c : w.cqs) cqs.push_back(absl::StrFormat("CQ 0x%x", c));
  if (w.wait == kCqEvent)
    return absl::StrFormat("thread %d blocks in ibv_get_cq_event on channel 0x%x%s for %s", w.tid, w.channel,
                           cqs.empty() ? "" : absl::StrCat(" (", absl::StrJoin(cqs, ", "), ")"), for_s);
  return absl::StrFormat("thread %d polls %s with no completion for %s", w.tid,
                         cqs.empty() ? std::string("a CQ") : absl::StrJoin(cqs, ", "), for_s);
}

// The books of one CQ, lines of a report label.
std::string DescribeBooks(const checkers::CqOutstanding& b) {
  std::string head = absl::StrFormat("CQ 0x%x, %s", b.cq, b.armed ? "armed" : "not armed");
  if (b.events_unacked) absl::StrAppend(&head, ", ", Plural(b.events_unacked, "event", "events"), " unacked");
  const uint64_t could = b.CouldComplete();
  if (could == 0)
    absl::StrAppend(&head, ": nothing outstanding can ever complete on CQ ", absl::StrFormat("0x%x", b.cq));
  else
    absl::StrAppend(&head, ": ", Plural(could, "outstanding WR", "outstanding WRs"), " could still complete");
  std::string out = head;
  for (const auto& q : b.queues) {
    if (q.qp) {
      absl::StrAppend(&out, absl::StrFormat("\n    QP 0x%x (qpn 0x%x, %s): %s, %s, %s outstanding", q.qp,
                                            q.qpn, checkers::QpStateName(q.state),
                                            Plural(q.signaled_sends, "signaled send", "signaled sends"),
                                            Plural(q.unsignaled_sends, "unsignaled send", "unsignaled sends"),
                                            Plural(q.recvs, "receive", "receives")));
      if (q.unsignaled_sends && !q.signaled_sends && q.state != 6 /* ERR */)
        absl::StrAppend(&out, " (unsignaled sends complete only after a signaled one, or in a flush)");
    } else {
      absl::StrAppend(
          &out, absl::StrFormat("\n    SRQ 0x%x: %s posted", q.srq, Plural(q.recvs, "receive", "receives")));
    }
  }
  if (b.queues.empty()) absl::StrAppend(&out, "\n    no QP completes on it");
  return out;
}

std::string AfterInjections() {
  std::string lines = RecentInjections();
  if (lines.empty()) return "";
  return absl::StrCat("; after ", absl::StrReplaceAll(lines, {{"\n", "; "}}));
}

// The hang report: `stalled_ns` without progress; `why` ends the first
// line's head, `proven` (if not empty) follows the first waiter.  Returns
// false if there was no thread waiting on a CQ.
bool ReportHang(uint64_t stalled_ns, bool with_books, const char* why, const std::string& proven = "") {
  const uint64_t now = NowNs();
  std::vector<checkers::CqOutstanding> books;
  if (with_books) books = Outstanding();
  std::vector<Waiter> waiters = Waiters(now, books);
  if (waiters.empty() || waiters.front().wait == kAsyncEvent) return false;
  if (g_reported.exchange(true)) return true;
  core::Finding f;
  f.check = core::CheckId::kHang;
  const uint64_t secs = stalled_ns / 1000000000ull;
  if (proven.empty())
    f.message = absl::StrFormat("no verbs progress for %d s while %s%s: %s%s", secs,
                                Plural(waiters.size(), "thread waits", "threads wait"), why,
                                Describe(waiters.front(), now), AfterInjections());
  else
    f.message = absl::StrFormat("no verbs progress for %s while %s%s: %s; %s%s", Seconds(stalled_ns),
                                Plural(waiters.size(), "thread waits", "threads wait"), why,
                                Describe(waiters.front(), now), proven, AfterInjections());
  f.stack = waiters.front().stack;
  for (size_t i = 1; i < waiters.size(); ++i)
    f.related.push_back(
        {core::StackKind::kWaiting, absl::StrCat(Describe(waiters[i], now), ", at"), waiters[i].stack});
  // The books of each CQ waited on, then where the CQ was made.
  std::vector<core::ObjId> done;
  for (const Waiter& w : waiters)
    for (core::ObjId c : w.cqs) {
      if (std::find(done.begin(), done.end(), c) != done.end()) continue;
      done.push_back(c);
      for (const auto& b : books)
        if (b.cq == c)
          f.related.push_back({core::StackKind::kCreated,
                               absl::StrFormat("%s\n  CQ 0x%x created at", DescribeBooks(b), c), b.stack});
    }
  if (!with_books && !done.empty())
    f.related.push_back(
        {core::StackKind::kCreated, "(the books are left out: the signal interrupted rdmasan itself)", 0});
  core::GlobalReporter().Report(f);
  return true;
}

// ---------------------------------------------------------------- proof --
//
// A hang the books prove, reported after kProofGraceNs rather than
// hang_timeout: every thread of the program waits (polls CQs with no
// completion, or blocks in ibv_get_cq_event), every CQ waited on -- all
// the CQs of a channel waited on -- has nothing outstanding that can
// complete on it (no send WR of a QP whose send CQ it is, no receive
// posted to a QP or SRQ whose receive CQ it is: a posted receive can
// complete whenever a peer sends, unsignaled sends in an error), and no
// thread made a verbs call for the grace period.  Then nothing can ever
// change: a completion needs a post first, and every thread that could
// post waits.  Conservative where it cannot know: a thread the watchdog has
// no slot for (it never called verbs), a thread waiting for async events
// or outside verbs (a socket, a sleep, a lock), a streak over more CQs
// than a slot names, a non-blocking channel read, a CQ the books do not
// know (checking off), a traced run (the trace's flusher is a thread we
// cannot tell from the program's): all left to hang_timeout.  What the
// books cannot see: a thread that polls only dead CQs while it really waits
// for something else between its polls (a flag a peer writes with RDMA
// WRITE, a file descriptor, a clock) is reported at the grace, as it was at
// hang_timeout before; telling a peer in this process from one outside it
// would need the QPs' destinations, which the events do not carry.
//
// The grace: 250 ms, five ticks of 50 ms in each of which every waiter
// must poll again (or still block).  Long enough for the scheduling noise
// of a loaded machine (a thread descheduled between a verbs call and its
// event, a poller preempted for a tick only restarts the window, never
// proves), short enough that a campaign run that ends in such a hang costs
// a few tenths of a second instead of hang_timeout.  A program that polls
// a dead CQ with a deadline of its own is reported at 250 ms: what it
// waits for can never come, whatever its deadline.
constexpr uint64_t kProofGraceNs = 250000000ull;
constexpr auto kProofTick = std::chrono::milliseconds(50);
std::atomic<uint32_t> g_watch_tid{0};

// What the program's threads wait on, when all of them wait.
struct Waits {
  std::vector<const void*> polled;    // CQs (ibv_cq*) polled empty
  std::vector<core::ObjId> channels;  // completion channels blocked on
};

// The threads of this process now (/proc/self/task); empty if unreadable.
std::vector<uint32_t> LiveTids() {
  std::vector<uint32_t> tids;
  DIR* d = opendir("/proc/self/task");
  if (!d) return tids;
  while (dirent* e = readdir(d)) {
    uint32_t tid = 0;
    if (e->d_name[0] != '.' && absl::SimpleAtoi(e->d_name, &tid)) tids.push_back(tid);
  }
  closedir(d);
  return tids;
}

// Whether every live thread of the program (all but the watchdog) waits:
// it has a slot (the newest of its tid) that blocks in ibv_get_cq_event,
// or polls empty since the previous tick CQs the slot names all of.
// Compares with the previous tick's empty_at_tick: call before
// NoteTick().
bool AllWait(Waits* w) {
  const std::vector<uint32_t> tids = LiveTids();
  if (tids.empty()) return false;
  const uint32_t self = g_watch_tid.load(std::memory_order_relaxed);
  for (uint32_t tid : tids) {
    if (tid == self) continue;
    Slot* s = g_slots.load(std::memory_order_acquire);
    while (s && s->tid != tid) s = s->next;
    if (!s) return false;  // never called verbs: may be about to
    const int wait = s->wait.load(std::memory_order_acquire);
    if (wait == kCqEvent) {
      const core::ObjId ch = s->wait_obj.load(std::memory_order_relaxed);
      if (!ch) return false;
      w->channels.push_back(ch);
      continue;
    }
    if (wait != kNone) return false;  // async events: what follows one is not known
    const int n = s->streak_cqs.load(std::memory_order_acquire);
    if (n <= 0 || n > Slot::kStreakCqs || s->streak_unknown.load(std::memory_order_relaxed) ||
        s->empty_polls.load(std::memory_order_relaxed) == s->empty_at_tick)
      return false;  // not polling now, or not only CQs it names
    for (int i = 0; i < n; ++i) {
      const void* cq = s->streak_cq[i].load(std::memory_order_relaxed);
      if (!cq) return false;
      w->polled.push_back(cq);
    }
  }
  return !w->polled.empty() || !w->channels.empty();
}

void NoteTick() {
  for (Slot* s = g_slots.load(std::memory_order_acquire); s; s = s->next)
    s->empty_at_tick = s->empty_polls.load(std::memory_order_relaxed);
}

bool NothingOutstanding(const checkers::CqOutstanding& b) {
  for (const auto& q : b.queues)
    if (q.signaled_sends || q.unsignaled_sends || q.recvs) return false;
  return true;
}

// Whether the books prove that nothing can complete on any CQ of `w`; if
// so, *proven says why, for the report.
bool Prove(const Waits& w, std::string* proven) {
  const std::vector<checkers::CqOutstanding> books = Outstanding();
  std::vector<core::ObjId> cqs;
  auto add = [&](core::ObjId c) {
    if (std::find(cqs.begin(), cqs.end(), c) == cqs.end()) cqs.push_back(c);
  };
  for (const void* p : w.polled) {
    const core::ObjId id = Id(p);
    if (!id) return false;
    add(id);
  }
  for (core::ObjId ch : w.channels) {
    bool any = false;
    for (const auto& b : books)
      if (b.channel == ch) {
        add(b.cq);
        any = true;
      }
    if (!any) return false;
  }
  for (core::ObjId c : cqs) {
    auto it = std::find_if(books.begin(), books.end(), [c](const auto& b) { return b.cq == c; });
    if (it == books.end() || !NothingOutstanding(*it)) return false;
  }
  std::sort(cqs.begin(), cqs.end());
  std::vector<std::string> names;
  for (core::ObjId c : cqs) names.push_back(absl::StrFormat("0x%x", c));
  const bool one = cqs.size() == 1;
  *proven = absl::StrFormat(
      "proven by the books: CQ%s %s ha%s nothing outstanding that can complete on %s (no WR outstanding, no "
      "receive posted, on any QP or SRQ bound to %s), every thread of the program waits on %s, and no thread "
      "made a verbs call for %d ms",
      one ? "" : "s", absl::StrJoin(names, ", "), one ? "s" : "ve", one ? "it" : "them", one ? "it" : "them",
      one ? "it" : "them", kProofGraceNs / 1000000);
  return true;
}

// ------------------------------------------------------------- watchdog --

void WatchLoop() {
  Reentry re;  // what it allocates is rdmasan's own
  // The program's signals go to its own threads: a termination signal
  // must find the thread that waits (or any other), not this one.
  sigset_t all;
  sigfillset(&all);
  pthread_sigmask(SIG_BLOCK, &all, nullptr);
  g_watch_tid.store(static_cast<uint32_t>(syscall(SYS_gettid)), std::memory_order_relaxed);
  const uint64_t timeout_ns = uint64_t(g_timeout_s) * 1000000000ull;
  const bool prove = core::GlobalOptions().trace.empty();
  auto tick = std::chrono::milliseconds(
      g_timeout_s > 0 ? std::clamp<int64_t>(int64_t(g_timeout_s) * 1000 / 8, 10, 200) : 200);
  if (prove) tick = std::min(tick, kProofTick);
  auto sums = [](uint64_t* progress, uint64_t* calls) {
    *progress = *calls = 0;
    for (Slot* s = g_slots.load(std::memory_order_acquire); s; s = s->next) {
      *progress += s->progress.load(std::memory_order_relaxed);
      *calls += s->calls.load(std::memory_order_relaxed);
    }
  };
  uint64_t last_sum = ~uint64_t{0};
  uint64_t proof_since = 0, proof_calls = 0;  // the grace period under way (0: none)
  for (;;) {
    std::this_thread::sleep_for(tick);
    uint64_t sum = 0, calls = 0;
    sums(&sum, &calls);
    const uint64_t now = NowNs();
    if (sum != last_sum) {
      last_sum = sum;
      for (Slot* s = g_slots.load(std::memory_order_acquire); s; s = s->next)
        s->empty_at_stall.store(s->empty_polls.load(std::memory_order_relaxed), std::memory_order_relaxed);
      g_last_progress.store(now, std::memory_order_release);
      proof_since = 0;
      NoteTick();
      continue;
    }
    if (prove && !g_reported.load(std::memory_order_acquire)) {
      Waits w;
      if (!AllWait(&w)) {
        proof_since = 0;
      } else if (proof_since == 0 || calls != proof_calls) {
        proof_since = now;
        proof_calls = calls;
      } else if (now - proof_since >= kProofGraceNs) {
        std::string proven;
        const bool dead = Prove(w, &proven);
        uint64_t sum_after = 0, calls_after = 0;
        sums(&sum_after, &calls_after);  // nothing moved while the books were read
        if (dead && sum_after == sum && calls_after == calls)
          ReportHang(NowNs() - g_last_progress.load(std::memory_order_acquire), /*with_books=*/true, "",
                     proven);
        else
          proof_since = now;  // the books again after another grace
      }
    }
    NoteTick();
    const uint64_t stalled = now - g_last_progress.load(std::memory_order_acquire);
    if (timeout_ns && stalled >= timeout_ns && !g_reported.load(std::memory_order_acquire))
      ReportHang(stalled, /*with_books=*/true, "");
  }
}

}  // namespace

bool IsHangSignal(int sig) { return sig == SIGTERM || sig == SIGINT || sig == SIGALRM || sig == SIGHUP; }

bool HangSignalsWanted() { return core::GlobalOptions().hang_timeout > 0; }

void Start() {
  std::call_once(g_start_once, [] {
    if (!HangSignalsWanted()) return;
    g_timeout_s = core::GlobalOptions().hang_timeout;
    g_last_progress.store(NowNs(), std::memory_order_relaxed);
    g_on.store(true, std::memory_order_release);
    Reentry re;
    std::thread(WatchLoop).detach();
  });
}

void OnEvent(const core::Event& e) {
  using core::EventKind;
  Slot* s = MySlot();
  switch (e.kind) {
    case EventKind::kWaitCqEvent:
      Bump(s->calls);
      s->wait_obj.store(e.obj, std::memory_order_relaxed);
      s->wait_stack.store(e.stack, std::memory_order_relaxed);
      s->wait_since.store(NowNs(), std::memory_order_relaxed);
      s->wait.store(kCqEvent, std::memory_order_release);
      return;
    case EventKind::kGetCqEvent:
      s->wait.store(kNone, std::memory_order_release);
      if (e.ret == 0) {
        Bump(s->calls);
        Progress(s);
      } else {
        // A non-blocking channel read that found nothing: polling it (on
        // a channel the streak does not name: no proof).
        if (s->streak_cqs.load(std::memory_order_relaxed) == 0) {
          s->streak_stack.store(e.stack, std::memory_order_relaxed);
          s->streak_since.store(NowNs(), std::memory_order_relaxed);
          s->streak_cq[0].store(nullptr, std::memory_order_relaxed);
          s->streak_cqs.store(1, std::memory_order_release);
        }
        s->streak_unknown.store(true, std::memory_order_relaxed);
        Bump(s->empty_polls);
      }
      return;
    case EventKind::kPollCq:
      if (!e.wcs.empty()) {
        Bump(s->calls);
        Progress(s);
      }
      return;
    case EventKind::kReqNotifyCq:  // arming is no progress: a loop of arm + empty poll is a hang
    case EventKind::kRetire:       // a poll's by-products: the poll was the call
    case EventKind::kDecision:
    case EventKind::kRemoteInv:
    case EventKind::kWcReason:
    case EventKind::kTmWc:
    case EventKind::kDestModified:
    case EventKind::kFreeRange:  // libc, not verbs: nothing completes on a CQ by them
    case EventKind::kFork:
    case EventKind::kForkInit:
      return;
    default:
      Bump(s->calls);
      if (e.ret == 0) Progress(s);
      return;
  }
}

void OnEmptyPoll(const void* cq, uintptr_t pc, uintptr_t frame) {
  Slot* s = MySlot();
  Bump(s->empty_polls);
  const int n = s->streak_cqs.load(std::memory_order_relaxed);
  for (int i = 0; i < n && i < Slot::kStreakCqs; ++i)
    if (s->streak_cq[i].load(std::memory_order_relaxed) == cq) return;
  if (n >= Slot::kStreakCqs) {
    if (!s->streak_unknown.load(std::memory_order_relaxed))
      s->streak_unknown.store(true, std::memory_order_relaxed);
    return;
  }
  if (n == 0) {
    s->streak_stack.store(core::CaptureStackFrom(pc, frame), std::memory_order_relaxed);
    s->streak_since.store(NowNs(), std::memory_order_relaxed);
  }
  s->streak_cq[n].store(cq, std::memory_order_relaxed);
  s->streak_cqs.store(n + 1, std::memory_order_release);
}

AsyncWaitScope::AsyncWaitScope(const void* context, uintptr_t pc, uintptr_t frame) : on_(Enabled()) {
  if (!on_) return;
  Slot* s = MySlot();
  s->wait_obj.store(Id(context), std::memory_order_relaxed);
  s->wait_stack.store(core::CaptureStackFrom(pc, frame), std::memory_order_relaxed);
  s->wait_since.store(NowNs(), std::memory_order_relaxed);
  s->wait.store(kAsyncEvent, std::memory_order_release);
}

AsyncWaitScope::~AsyncWaitScope() {
  if (on_) MySlot()->wait.store(kNone, std::memory_order_release);
}

void ReportHangAtSignal(int sig, bool inside_shim) {
  if (!Enabled() || g_reported.load(std::memory_order_acquire)) return;
  const uint64_t stalled = NowNs() - g_last_progress.load(std::memory_order_acquire);
  if (stalled < 1000000000ull) return;  // it made progress within the last second: not hung
  // The books take the checkers' locks: not from a thread that may hold one.
  const bool waiting = t_slot && t_slot->wait.load(std::memory_order_relaxed) != kNone;
  const char* name = sigabbrev_np(sig);
  const std::string why = absl::StrCat(" when SIG", name ? name : "?", " ended it");
  ReportHang(stalled, !inside_shim || waiting, why.c_str());
}

namespace {

// The stack of a signal the thread raised itself (abort(), raise()): the
// frame-pointer walk stops in libc, which has none, so the unwinder walks
// the CFI instead, through the signal frame; the stack is intact, as the
// thread was in a call.  Frames from the interrupted pc on; 0 if it is not
// among them.
struct Unwound {
  uintptr_t pc = 0;  // the interrupted pc
  uintptr_t pcs[core::kMaxStackFrames];
  size_t n = 0;
  bool found = false;
};

_Unwind_Reason_Code CollectFrame(_Unwind_Context* ctx, void* arg) {
  auto* u = static_cast<Unwound*>(arg);
  int before = 0;
  const uintptr_t ip = _Unwind_GetIPInfo(ctx, &before);
  if (!u->found) {
    if (ip != u->pc) return _URC_NO_REASON;  // the handler's frames
    u->found = true;
    u->pcs[u->n++] = ip + 1;  // the pc itself, looked up at pc - 1 + 1
    return _URC_NO_REASON;
  }
  if (ip < 4096) return _URC_END_OF_STACK;
  u->pcs[u->n++] = ip;
  return u->n < core::kMaxStackFrames ? _URC_NO_REASON : _URC_END_OF_STACK;
}

core::StackId UnwindRaised(uintptr_t pc) {
  Unwound u;
  u.pc = pc;
  _Unwind_Backtrace(CollectFrame, &u);
  return u.found ? core::InternStack(u.pcs, u.n) : 0;
}

}  // namespace

void ReportCrash(int sig, siginfo_t* info, void* ucontext) {
  uintptr_t pc = 0, bp = 0, sp = 0;
  bool write = false;
#if defined(__x86_64__)
  if (const auto* uc = static_cast<const ucontext_t*>(ucontext)) {
    pc = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RIP]);
    bp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RBP]);
    sp = static_cast<uintptr_t>(uc->uc_mcontext.gregs[REG_RSP]);
    write = (uc->uc_mcontext.gregs[REG_ERR] & 2) != 0;
  }
#endif
  // The frame-pointer walk from the faulting function: a record on this
  // stack whose saved frame pointer is the interrupted one.  Frame #0 is
  // pc + 1: stacks hold return addresses, which are symbolized at pc - 1,
  // and a faulting pc is the instruction itself.  A call through a null
  // pointer faults at pc 0: its return address is at the top of the stack.
  uintptr_t record[2] = {bp, 0};
  uintptr_t first = pc ? pc + 1 : 0;
  if (pc < 4096 && sp && sp % sizeof(uintptr_t) == 0) first = *reinterpret_cast<const uintptr_t*>(sp);
  const bool fault = info && info->si_code > 0;  // raised by the CPU, not sent
  core::StackId stack = 0;
  if (!fault && info && info->si_code == SI_TKILL && info->si_pid == getpid() && pc) stack = UnwindRaised(pc);
  if (!stack && first) stack = core::CaptureStackFrom(first, reinterpret_cast<uintptr_t>(record));
  const char* name = sigabbrev_np(sig);
  std::string what = absl::StrCat("SIG", name ? name : "?");
  if (fault && (sig == SIGSEGV || sig == SIGBUS))
    absl::StrAppend(&what, absl::StrFormat(" on address 0x%x", reinterpret_cast<uintptr_t>(info->si_addr)));
  absl::StrAppend(&what, absl::StrFormat(" (pc 0x%x bp 0x%x sp 0x%x T%d)", pc, bp, sp,
                                         static_cast<int>(syscall(SYS_gettid))));
  if (fault && sig == SIGSEGV) absl::StrAppend(&what, write ? "; a WRITE access" : "; a READ access");
  if (!fault)
    absl::StrAppend(&what, info && info->si_code == SI_TKILL ? "; raised by the program" : "; sent");
  core::Finding f;
  f.check = core::CheckId::kCrash;
  f.message = absl::StrCat(what, AfterInjections());
  f.stack = stack;
  core::GlobalReporter().Report(f);
}

}  // namespace rdmasan::interpose::watchdog
