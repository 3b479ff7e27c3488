// interpose/watchdog: hangs and crashes are findings.
//
// `hang`: with hang_timeout=S > 0, a thread started at the first verbs
// event watches the program's verbs progress (a successful post, a poll
// that returned completions, a CQ event returned, any successful control
// verb).  When there is none for S seconds while some thread polls empty
// CQs or blocks in ibv_get_cq_event, it reports once, with each waiting
// thread's stack and the books of the CQs they wait on (the outstanding WRs
// that could still complete there, armed or not).  It does not wait out
// hang_timeout when the books prove the hang: every thread of the program
// waits on CQs with no WR outstanding and no receive posted on any QP or
// SRQ bound to them, and no thread made a verbs call for 250 ms (see
// "proof" in watchdog.cc for what it leaves to the timeout).  The same
// report is made when the program is ended by SIGTERM, SIGINT, SIGALRM or
// SIGHUP while a thread waits (see HangSignalsWanted()).  `crash`: a SIGSEGV, SIGBUS,
// SIGFPE, SIGILL or SIGABRT of the program is reported with the stack from
// the signal's context; the process then dies of the signal as it would
// have.  Both name the faults the harness injected before them.
//
// The data path pays one relaxed load per hook when hang_timeout=0
// (Enabled() is false: no thread, no stack captures, no clock reads).  With
// it on, each thread counts its own progress and empty polls in its own
// slot (no shared cache line), and captures its stack once per streak of
// empty polls and at each blocking wait.
//
// May not: change what a verb returns, block the program's threads,
// report a program that makes progress, or report before hang_timeout a
// hang the books do not prove (when unsure, the timeout decides).  Signal-handler entry points
// (ReportCrash, ReportHangAtSignal) allocate and take locks: the caller
// (interpose/hooks.cc) arms a timer that ends the process by the signal
// if they cannot finish.
#ifndef RDMASAN_INTERPOSE_WATCHDOG_H_
#define RDMASAN_INTERPOSE_WATCHDOG_H_

#include <signal.h>

#include <atomic>
#include <cstdint>

#include "core/event.h"
#include "interpose/off_options.h"

namespace rdmasan::interpose::watchdog {

namespace internal {
extern std::atomic<bool> g_on;
}  // namespace internal

// Whether the hang watchdog runs (hang_timeout > 0, after the first verbs
// event).  One relaxed load: test it before calling the hooks below on the
// data path.
inline bool Enabled() {
#if RDMASAN_OFF_OPTIONS_COMPILED_OUT
  return false;  // bench/postpoll_bench_bare (interpose/off_options.h)
#endif
  return internal::g_on.load(std::memory_order_relaxed);
}

// At the first verbs event (hooks.cc): starts the watchdog thread when
// hang_timeout > 0.  Idempotent.
void Start();

// Every emitted event (hooks.cc Emit): progress, or the begin/end of a
// blocking wait (kWaitCqEvent / kGetCqEvent), or a failed non-blocking
// ibv_get_cq_event (an empty poll of the channel).  Only when Enabled().
void OnEvent(const core::Event& e);
inline void Note(const core::Event& e) {
  if (Enabled()) OnEvent(e);
}

// A poll of `cq` (an ibv_cq*, or the ibv_cq of an ibv_cq_ex) that returned
// no completion; `pc`/`frame` as for core::CaptureStackFrom, from the
// poll wrapper: the stack is captured at the first empty poll of a streak.
void OnEmptyPoll(const void* cq, uintptr_t pc, uintptr_t frame);

// A blocking wait that emits no event (ibv_get_async_event) as a scope.
// A thread waiting only for async events is listed in a hang report but
// never makes one: such a thread is idle by design.
class AsyncWaitScope {
 public:
  AsyncWaitScope(const void* context, uintptr_t pc, uintptr_t frame);
  ~AsyncWaitScope();
  AsyncWaitScope(const AsyncWaitScope&) = delete;
  AsyncWaitScope& operator=(const AsyncWaitScope&) = delete;

 private:
  bool on_;
};

// Whether the watchdog runs and the termination signals (SIGTERM, SIGINT,
// SIGALRM, SIGHUP) are handled for a hang report: hang_timeout > 0 only.
// Not merely because faults are injected or completions reordered: a
// server that a test harness stops with SIGTERM while it waits for a
// client that failed under an injected fault would be reported, and such
// runs must stay free of findings that are not true; a fuzzing campaign
// that wants hangs sets hang_timeout.
bool HangSignalsWanted();
bool IsHangSignal(int sig);

// From the signal handler of a crash signal: the `crash` report.
void ReportCrash(int sig, siginfo_t* info, void* ucontext);
// From the signal handler of a termination signal: the `hang` report if a
// thread waits in verbs and the program made no verbs progress for the
// last second (a program stopped while it works is not hung).  Nothing if
// the watchdog reported already.  The thread that took the signal must not
// be inside the checkers (`inside_shim` and not waiting): the books are
// then left out rather than risking its own locks.
void ReportHangAtSignal(int sig, bool inside_shim);

}  // namespace rdmasan::interpose::watchdog

#endif  // RDMASAN_INTERPOSE_WATCHDOG_H_
