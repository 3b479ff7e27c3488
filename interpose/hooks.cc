#include "interpose/hooks.h"
#include "interpose/interpose.h"

#include "interpose/destroyed.h"
#include "interpose/faults.h"
#include "interpose/off_options.h"
#include "interpose/ptr_table.h"
#include "interpose/thread_domains.h"
#include "interpose/watchdog.h"

#include <signal.h>
#include <time.h>
#if defined(__x86_64__)
#include <x86intrin.h>
#endif
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <errno.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "absl/strings/str_cat.h"
#include "checkers/engine.h"
#include "core/biased_lock.h"
#include "core/options.h"
#include "core/report.h"
#include "softnic/fingerprint.h"
#include "softnic/softnic.h"
#include "traces/trace.h"

namespace rdmasan::interpose {

std::atomic<uint64_t> g_ids_forgotten{1};

namespace {

// Object pointer -> id and the object's queue limits, read on every
// data-path call without a lock.  One 64-bit value per object: the id in
// the low kIdBits, then the QP's or SRQ's max send SGE and max receive SGE
// as the provider returned them at creation (capped at kMaxSge), then its
// send and receive queue depths, each as the exponent of the next power of
// two (plus one; 0: unknown): a bound of the WRs a post can place.
class Registry {
 public:
  static constexpr int kIdBits = 36, kSgeBits = 9, kWrBits = 5;
  static constexpr uint64_t kIdMask = (uint64_t{1} << kIdBits) - 1;
  static constexpr uint32_t kMaxSge = (1u << kSgeBits) - 1;

  core::ObjId Assign(const void* obj, const ObjLimits& l) {
    core::ObjId id = next_.fetch_add(1, std::memory_order_relaxed);
    if (id > kIdMask) return 0;  // ids exhausted: the object goes untracked
    const uint64_t v = id | uint64_t{std::min(l.max_send_sge, kMaxSge)} << kIdBits |
                       uint64_t{std::min(l.max_recv_sge, kMaxSge)} << (kIdBits + kSgeBits) |
                       uint64_t{WrCode(l.max_send_wr)} << (kIdBits + 2 * kSgeBits) |
                       uint64_t{WrCode(l.max_recv_wr)} << (kIdBits + 2 * kSgeBits + kWrBits);
    return table_.Put(obj, v) ? id : 0;  // full: the object goes untracked
  }
  void Alias(const void* obj, core::ObjId id) { table_.Put(obj, id & kIdMask); }
  core::ObjId Find(const void* obj) const { return FindValue(obj) & kIdMask; }
  ObjLimits Limits(const void* obj) const { return LimitsOf(FindValue(obj)); }
  ObjInfo Info(const void* obj) const {
    const uint64_t v = FindValue(obj);
    return {v & kIdMask, LimitsOf(v)};
  }
  static uint32_t MaxSendSgeOf(uint64_t v) { return static_cast<uint32_t>(v >> kIdBits) & kMaxSge; }
  static uint32_t MaxRecvSgeOf(uint64_t v) {
    return static_cast<uint32_t>(v >> (kIdBits + kSgeBits)) & kMaxSge;
  }
  static ObjLimits LimitsOf(uint64_t v) {
    return {MaxSendSgeOf(v), MaxRecvSgeOf(v),
            WrBound(static_cast<uint32_t>(v >> (kIdBits + 2 * kSgeBits)) & ((1u << kWrBits) - 1)),
            WrBound(static_cast<uint32_t>(v >> (kIdBits + 2 * kSgeBits + kWrBits)) & ((1u << kWrBits) - 1))};
  }
  // The whole value (0 if unknown).
  uint64_t FindValue(const void* obj) const {
    // Each thread remembers the last few objects it named (a data path
    // names the same QP and CQ over and over), good until any object is
    // forgotten: an address may then be reused by another object.
    Cache& c = t_cache;
    const uint64_t gen = g_ids_forgotten.load(std::memory_order_acquire);
    if (c.gen == gen) {
      for (size_t i = 0; i < Cache::kWays; ++i)
        if (c.obj[i] == obj) return c.value[i];
    } else {
      c = Cache();
      c.gen = gen;
    }
    const uint64_t v = table_.Get(obj);
    if (v) {
      c.obj[c.next] = obj;
      c.value[c.next] = v;
      c.next = (c.next + 1) % Cache::kWays;
    }
    return v;
  }
  void Forget(const void* obj) {
    table_.Erase(obj);
    g_ids_forgotten.fetch_add(1, std::memory_order_acq_rel);
  }

 private:
  struct Cache {
    static constexpr size_t kWays = 4;
    uint64_t gen = 0;
    const void* obj[kWays] = {};
    uint64_t value[kWays] = {};
    size_t next = 0;
  };
  // A queue depth as 1 + the exponent of the next power of two; 0 unknown.
  static uint32_t WrCode(uint32_t max_wr) {
    if (!max_wr) return 0;
    uint32_t e = 0;
    while (e < 30 && (1u << e) < max_wr) ++e;
    return e + 1;
  }
  static uint32_t WrBound(uint32_t code) { return code ? 1u << (code - 1) : 0; }

  static thread_local Cache t_cache;
  std::atomic<core::ObjId> next_{1};
  PtrTable table_;
};

thread_local Registry::Cache Registry::t_cache;

// Made at the first use, then one load in line.
std::atomic<Registry*> g_registry{nullptr};
[[gnu::noinline]] Registry& MakeObjects() {
  static Registry* r = new Registry();  // outlives every atexit handler
  g_registry.store(r, std::memory_order_release);
  return *r;
}
inline Registry& Objects() {
  Registry* r = g_registry.load(std::memory_order_acquire);
  return __builtin_expect(r != nullptr, 1) ? *r : MakeObjects();
}

// The trace of this process image (option trace=PATH), opened at its first
// event (traces/tree.cc names it).  Opened again after a fork (the child's
// own) and after an exec that failed (the trace was closed before it).
std::atomic<traces::TraceWriter*> g_trace{nullptr};
std::mutex g_open_mu;
bool g_trace_opened = false;  // under g_open_mu

// The process whose state this is: a vfork child (sharing the memory) or a
// process cloned behind the fork hook is not, and exits untouched.
std::atomic<pid_t> g_image_pid{0};
// The run this image belongs to (traces/tree.cc): the first image's pid and
// start time, passed on through the environment; read or made at the
// shim's start, before the program can fork or exec (TraceRun).
constexpr char kTreeEnv[] = "RDMASAN_TRACE_TREE";
std::once_flag g_run_once;
const std::string* g_run = nullptr;
std::atomic<bool> g_atexit_registered{false};
std::atomic<bool> g_started{false};  // atexit registered and the trace opened
// Set once the end-of-run work (trace, SARIF, summary, exit status) began.
std::atomic<bool> g_exit_done{false};

// Signals whose default action ends the process, and which the shim
// handles where the program left that default.  A crash (kCrashSignals)
// leaves the trace's valid prefix as PATH.incomplete, recognisable; any
// other (SIGTERM, SIGINT, SIGHUP, SIGALRM, SIGUSR1, real-time signals, ...)
// is how a CI job or a user stops a program: its trace is closed properly.
//
// The crash signals of the `crash` check (interpose/watchdog.h) are handled
// in every checked run, as AddressSanitizer handles SIGSEGV: nothing is
// paid until one arrives, the program's own handlers stay its own, and the
// process still dies of the signal (its exit status is unchanged).  The
// termination signals of the `hang` check only when HangSignalsWanted().
// softnic's safe copies (softnic/safe_copy.cc) install their SIGSEGV/SIGBUS
// handler at their first copy, after ours (the first verbs event), and
// chain to it for every fault that is not theirs.
constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL, SIGTRAP, SIGSYS};
constexpr int kReportedCrashSignals[] = {SIGSEGV, SIGBUS, SIGABRT, SIGFPE, SIGILL};
constexpr int kTerminationSignals[] = {SIGTERM, SIGINT,  SIGQUIT, SIGHUP,    SIGALRM,
                                       SIGUSR1, SIGUSR2, SIGPIPE, SIGVTALRM, SIGPROF,
                                       SIGXCPU, SIGXFSZ, SIGIO,   SIGPWR,    SIGSTKFLT};
struct sigaction g_old_actions[NSIG];
std::atomic<bool> g_handled[NSIG];
// In-process fuzzing (interpose/fuzz_api.cc): sees every event and its
// findings; while set, the crash signals are the fuzzer's.
std::atomic<FuzzEventHook> g_fuzz_hook{nullptr};

bool IsCrashSignal(int sig) {
  for (int c : kCrashSignals)
    if (c == sig) return true;
  return false;
}

bool IsReportedCrash(int sig) {
  for (int c : kReportedCrashSignals)
    if (c == sig) return true;
  return false;
}

// The thread inside OnFatalSignal (0: none).
std::atomic<pid_t> g_fatal_tid{0};

// Puts `sig` back to the program's previous disposition (the default).
void RestoreDisposition(int sig) {
  if (sig > 0 && sig < NSIG) sigaction(sig, &g_old_actions[sig], nullptr);
}

// A report from a signal handler allocates and takes locks; the signal may
// have interrupted a thread holding one of them (malloc's, the reporter's).
// So before reporting: the signal goes back to its previous disposition and
// is unblocked in this thread (a fault inside the report then takes the
// default action at once), and a timer sends it to this thread again in
// 10 s, ending the process by it if the report cannot finish.
void ArmDeadline(int sig) {
  RestoreDisposition(sig);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  struct sigevent sev = {};
  sev.sigev_notify = SIGEV_THREAD_ID;
  sev.sigev_signo = sig;
  sev._sigev_un._tid = static_cast<pid_t>(syscall(SYS_gettid));
  int timer = -1;  // the kernel's timer id
  if (syscall(SYS_timer_create, CLOCK_MONOTONIC, &sev, &timer) != 0) return;
  struct itimerspec its = {};
  its.it_value.tv_sec = 10;
  syscall(SYS_timer_settime, timer, 0, &its, nullptr);
}

// The signal that ends the process: report a crash (or a hang, for a
// termination signal while the program waits in verbs), write what the
// trace holds (and close it, unless the process crashed), then let the
// program's previous disposition (the default) run.
void OnFatalSignal(int sig, siginfo_t* info, void* ucontext) {
  const int saved_errno = errno;
  const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
  pid_t none = 0;
  if (!g_fatal_tid.compare_exchange_strong(none, tid)) {
    // A second fatal signal: inside this handler (a fault in the report)
    // it takes the default action now; on another thread it waits for the
    // first one to end the process (at most the deadline's 10 s).
    if (none != tid) {
      timespec ts = {11, 0};
      while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
    }
    RestoreDisposition(sig);
    raise(sig);
    return;
  }
  const bool inside_shim = Reentry::Depth() > 0;
  Reentry re;  // what the reports free and allocate is rdmasan's own
  const bool crash = IsReportedCrash(sig) && Checking();
  const bool hang = watchdog::IsHangSignal(sig) && watchdog::Enabled();
  if (crash || hang) ArmDeadline(sig);
  if (crash) watchdog::ReportCrash(sig, info, ucontext);
  if (hang) watchdog::ReportHangAtSignal(sig, inside_shim);
  if (traces::TraceWriter* w = g_trace.load(std::memory_order_acquire)) {
    if (IsCrashSignal(sig))
      w->FlushFromSignalHandler();
    else
      w->CloseFromSignalHandler();
  }
  softnic::CleanUpAtFatalSignal();  // the fabric file, if this process is its last user
  RestoreDisposition(sig);
  errno = saved_errno;
  raise(sig);
}

// Installs OnFatalSignal for `sig` if the program left it at the default.
void HandleIfDefault(int sig) {
  struct sigaction old;
  if (sig <= 0 || sig >= NSIG || g_handled[sig].load(std::memory_order_relaxed) ||
      sigaction(sig, nullptr, &old) != 0)
    return;
  // softnic's termination handler (installed at attach, where the program
  // left the default) only removes the fabric file, as OnFatalSignal does:
  // it counts as the default, and the default is what is put back.
  if (softnic::IsOwnTerminationHandler(old)) {
    old = {};
    old.sa_handler = SIG_DFL;
    sigemptyset(&old.sa_mask);
  }
  if (old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return;
  struct sigaction sa = {};
  sa.sa_sigaction = OnFatalSignal;
  // It never returns (the signal is raised again at the default), so the
  // flag changes nothing here; a restarting handler is one softnic's waits
  // need not end for (softnic/interrupt.h).
  sa.sa_flags = SA_SIGINFO | SA_RESTART;
  sigemptyset(&sa.sa_mask);
  g_old_actions[sig] = old;
  if (sigaction(sig, &sa, nullptr) == 0) g_handled[sig].store(true, std::memory_order_relaxed);
}

// At the first verbs event, after the trace opened: the crash signals in
// every checked run, the termination signals for hang reports.
void InstallSignalHandlers() {
  if (Checking() && !g_fuzz_hook.load(std::memory_order_relaxed))
    for (int sig : kReportedCrashSignals) HandleIfDefault(sig);
  if (watchdog::HangSignalsWanted())
    for (int sig : {SIGTERM, SIGINT, SIGALRM, SIGHUP}) HandleIfDefault(sig);
}

void CloseTrace();
void CloseTraceBeforeHalt();

uint64_t MonotonicNs() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return uint64_t(ts.tv_sec) * 1000000000ull + ts.tv_nsec;
}

// The trace's clock: the time-stamp counter where there is one (a few
// cycles to read, where clock_gettime costs tens of ns on some VMs), else
// CLOCK_MONOTONIC.  Its rate goes into the trace header.
#if defined(__x86_64__)
uint64_t TraceClock() { return __rdtsc(); }
std::pair<std::string, std::string> ClockProperty(std::vector<std::pair<std::string, std::string>>* props) {
  const uint64_t n0 = MonotonicNs(), t0 = __rdtsc();
  uint64_t n1;
  do n1 = MonotonicNs();
  while (n1 - n0 < 2'000'000);  // 2 ms of calibration, only when tracing
  const uint64_t t1 = __rdtsc();
  props->push_back({"clock", "tsc"});
  return {"clock_hz", absl::StrCat(static_cast<uint64_t>((t1 - t0) * 1e9 / (n1 - n0)))};
}
#else
uint64_t TraceClock() { return MonotonicNs(); }
std::pair<std::string, std::string> ClockProperty(std::vector<std::pair<std::string, std::string>>* props) {
  props->push_back({"clock", "ns"});
  return {"clock_hz", "1000000000"};
}
#endif

// Serializes the flushes of the trace outside signal handlers (the periodic
// flusher, before a blocking call) with its Close at exit.
std::mutex g_flush_mu;

// The periodic flusher: events are never older than kFlushEvery in a
// thread's buffer, so a program killed with SIGKILL (or hung and killed by
// CI) leaves a trace with its events but the last moment's.  A detached
// thread started with the trace; a forked child has none (its parent's
// trace is not its own).
constexpr auto kFlushEvery = std::chrono::milliseconds(200);

void FlushIfUnwritten(uint64_t* flushed_events) {
  std::lock_guard<std::mutex> l(g_flush_mu);
  traces::TraceWriter* w = g_trace.load(std::memory_order_acquire);
  if (!w) return;
  const uint64_t events = w->stats().events;
  if (events == *flushed_events) return;
  *flushed_events = events;
  (void)w->Flush();
}

void StartPeriodicFlush() {
  std::thread([] {
    Reentry re;  // what it frees is rdmasan's own
    uint64_t flushed = 0;
    for (;;) {
      std::this_thread::sleep_for(kFlushEvery);
      FlushIfUnwritten(&flushed);
    }
  }).detach();
}

void OpenTrace() {
  Reentry re;
  const std::string& pattern = core::GlobalOptions().trace;
  if (pattern.empty()) return;
  traces::TraceHeader h = traces::CurrentProcessHeader();
  h.properties.push_back({"RDMASAN_OPTIONS", getenv("RDMASAN_OPTIONS") ? getenv("RDMASAN_OPTIONS") : ""});
  h.properties.push_back(ClockProperty(&h.properties));
  h.properties.push_back({"ppid", absl::StrCat(getppid())});
  auto w = traces::OpenImageTrace(pattern, getpid(), TraceRun(), std::move(h));
  if (!w.ok()) {
    core::Diag(absl::StrCat("cannot record the trace: ", w.status().message()));
    return;
  }
  g_trace.store(w->release(), std::memory_order_release);
  // Only where the program left the default: its own handlers stay its own.
  for (int sig : kCrashSignals) HandleIfDefault(sig);
  for (int sig : kTerminationSignals) HandleIfDefault(sig);
  for (int sig = SIGRTMIN; sig <= SIGRTMAX; ++sig) HandleIfDefault(sig);
  StartPeriodicFlush();
}

}  // namespace

void FlushTraceBeforeBlocking() {
  if (!g_trace.load(std::memory_order_acquire)) return;
  uint64_t unknown = UINT64_MAX;
  FlushIfUnwritten(&unknown);
}

const std::string& TraceRun() {
  std::call_once(g_run_once, [] {
    // The first image of a run finds none and leaves its own in its
    // environment, which its forked children and exec'd images inherit.
    if (const char* run = getenv(kTreeEnv); run && *run) {
      g_run = new std::string(run);
      return;
    }
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    g_run = new std::string(absl::StrCat(getpid(), ".", ts.tv_sec, ".", ts.tv_nsec));
    if (!core::GlobalOptions().trace.empty()) setenv(kTreeEnv, g_run->c_str(), 0);
  });
  return *g_run;
}

void AfterForkInChild() {
  core::BiasAfterFork();
  // The child must not write, close or rename its parent's trace; its own
  // opens at its next event (PATH.<pid>).
  if (traces::TraceWriter* w = g_trace.exchange(nullptr, std::memory_order_acq_rel)) w->AbandonAfterFork();
  new (&g_open_mu) std::mutex();  // another thread of the parent may have held them
  new (&g_flush_mu) std::mutex();
  g_trace_opened = false;
  g_image_pid.store(getpid(), std::memory_order_relaxed);
  g_started.store(false, std::memory_order_release);
  DecisionsAfterForkInChild();
}

bool Started() { return g_started.load(std::memory_order_acquire); }

void BeforeExec() {
  if (g_image_pid.load(std::memory_order_relaxed) != getpid()) return;  // a vfork child
  // The new image's events go to a trace of its own (PATH.<pid>[.<n>]);
  // this one must be complete, as nothing of this image runs afterwards.
  CloseTrace();
  std::lock_guard<std::mutex> l(g_open_mu);
  g_trace_opened = false;  // the exec may fail: the next event opens another
}

namespace {

void CloseTrace() {
  Reentry re;  // what the writer frees is rdmasan's own
  std::lock_guard<std::mutex> l(g_flush_mu);
  traces::TraceWriter* w = g_trace.exchange(nullptr, std::memory_order_acq_rel);
  if (!w) return;
  absl::Status st = w->Close();
  if (!st.ok()) core::Diag(absl::StrCat("trace: ", st.message()));
  // The writer is not deleted: a thread still inside Append may touch it.
}

// One engine per process (see checkers/engine.h for its locks).  It numbers
// the events only when they are recorded: the trace's order is all that
// reads the numbers, and one counter shared by every thread would be the
// one cache line that threads on separate QPs still fight over.
std::atomic<checkers::Engine*> g_engine{nullptr};  // once made
[[gnu::noinline]] checkers::Engine& MakeEngine() {
  static checkers::Engine* e = new checkers::Engine(/*assign_seq=*/!core::GlobalOptions().trace.empty(),
                                                    core::GlobalReporter().checks());
  g_engine.store(e, std::memory_order_release);
  return *e;
}
inline checkers::Engine& GetEngine() {
  checkers::Engine* e = g_engine.load(std::memory_order_acquire);
  return __builtin_expect(e != nullptr, 1) ? *e : MakeEngine();
}

thread_local uint32_t t_tid = 0;

uint32_t Tid() {
  if (!t_tid) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

// halt_on_error: the reporter ends the process itself.
void CloseTraceBeforeHalt() {
  g_exit_done.store(true);
  CloseTrace();
}

// The end of the run, at exit or _exit: the trace closed, the decisions'
// summary, the findings' summary and SARIF log; the reporter's exit status.
int FinishRun() {
  Reentry re;  // what the trace writer and the reporter free is rdmasan's own
  CloseTrace();
  core::Reporter& r = core::GlobalReporter();
  // The decisions per point ("decisions (seed 42): wc.error 1, sched.pick
  // 120"), where the reports went, before their summary.
  if (std::string decisions = DecisionSummary(); !decisions.empty()) r.Message(decisions);
  FinishDecisionLog();
  return r.Finish();
}

void AtExit() {
  if (g_exit_done.exchange(true) || g_image_pid.load(std::memory_order_relaxed) != getpid()) return;
  int code = FinishRun();
  if (code) {
    // Like the sanitizers' exitcode: the run had errors.  Flush what the
    // program wrote first; _exit skips the remaining atexit work, so what
    // must happen at exit happens here (softnic's fabric file).
    fflush(nullptr);
    core::RunBeforeExitHooks();
    _exit(code);
  }
}

}  // namespace

int ExitStatusAtUnderscoreExit(int status) {
  // As exit() would: only where AtExit is registered, in its own process,
  // and once; and only in an image that made verbs calls itself: a forked
  // child that did not (the fork, failed exec, _exit(127) idiom) has no
  // trace or findings of its own, and may hold locks its parent's other
  // threads held at the fork.
  if (!g_started.load(std::memory_order_acquire) || !g_atexit_registered.load(std::memory_order_acquire) ||
      g_image_pid.load(std::memory_order_relaxed) != getpid() || g_exit_done.exchange(true))
    return status;
  const int code = FinishRun();
  core::RunBeforeExitHooks();  // what atexit would have done (softnic's fabric file)
  return code ? code : status;
}

std::atomic<int> g_checking{-1};  // -1: not read yet

bool CheckingSlow() {
  int v = g_checking.load(std::memory_order_relaxed);
  if (v < 0) {
    v = core::GlobalOptions().checking ? 1 : 0;
    g_checking.store(v, std::memory_order_relaxed);
  }
  return v;
}

void SetChecking(bool on) { g_checking.store(on ? 1 : 0, std::memory_order_relaxed); }

core::ObjId Assign(const void* obj, const ObjLimits& limits) {
  ForgetDestroyed(obj);  // a new object at a destroyed one's address
  return Objects().Assign(obj, limits);
}

core::ObjId Id(const void* obj) { return obj ? Objects().Find(obj) : 0; }

void AssignAlias(const void* obj, core::ObjId id) {
  if (!obj || !id) return;
  ForgetDestroyed(obj);
  Objects().Alias(obj, id);
}

ObjLimits Limits(const void* obj) { return obj ? Objects().Limits(obj) : ObjLimits{}; }

ObjInfo Lookup(const void* obj) { return obj ? Objects().Info(obj) : ObjInfo{}; }

SendObjInfo LookupSend(const void* obj) {
  if (!obj) return {};
  const uint64_t v = Objects().FindValue(obj);
  return {v & Registry::kIdMask, Registry::MaxSendSgeOf(v)};
}

RecvObjInfo LookupRecv(const void* obj) {
  if (!obj) return {};
  const uint64_t v = Objects().FindValue(obj);
  return {v & Registry::kIdMask, Registry::MaxRecvSgeOf(v)};
}

void Forget(const void* obj) { Objects().Forget(obj); }

namespace {

// What the first event of a process image starts (Emit): the exit hook,
// the trace, the watchdog, the signal handlers.
[[gnu::noinline, gnu::cold]] void StartAtFirstEvent() {
  if (!g_image_pid.load(std::memory_order_relaxed)) g_image_pid.store(getpid(), std::memory_order_relaxed);
  if (!g_atexit_registered.exchange(true)) atexit(AtExit);
  // halt_on_error ends the process from inside the reporter (its lock
  // held): the _exit hook must then pass straight through.
  core::SetBeforeHaltHook(CloseTraceBeforeHalt);
  {
    std::lock_guard<std::mutex> l(g_open_mu);
    if (!g_trace_opened) {
      g_trace_opened = true;
      OpenTrace();
    }
  }
  // softnic fingerprints posted destinations only for the check that
  // reads them (softnic/fingerprint.h): off, a post pays one load.
  softnic::SetDestinationFingerprints(
      core::GlobalReporter().checks().Enabled(core::CheckId::kRecvBufferModified));
  g_started.store(true, std::memory_order_release);
  watchdog::Start();
  InstallSignalHandlers();
}

}  // namespace

void Emit(core::Event& e, std::vector<checkers::RetiredWr>* retired) {
  // Once per process; one load on every later event.
  if (__builtin_expect(!g_started.load(std::memory_order_acquire), 0)) StartAtFirstEvent();
  std::vector<core::Finding> findings;
  GetEngine().OnEvent(e, &findings, retired);
  watchdog::Note(e);
  // Recorded outside the engine's locks: the writer is thread-safe, each
  // thread's events reach it in that thread's seq order, and the reader
  // merges the threads back into seq order (the engine's order).  Only
  // the trace reads the thread id.
  if (traces::TraceWriter* w = g_trace.load(std::memory_order_acquire)) {
    e.tid = Tid();
    e.time = TraceClock();
    w->Append(e);
  }
  for (const auto& f : findings) core::GlobalReporter().Report(f);
  if (FuzzEventHook h = g_fuzz_hook.load(std::memory_order_relaxed); __builtin_expect(h != nullptr, 0))
    h(e, findings);
}

namespace {

// Whether an event would reach the engine alone (Emit): the first event's
// work done, no trace to record it, no fuzz hook and no watchdog to see it.
inline bool EngineAlone() {
#if RDMASAN_OFF_OPTIONS_COMPILED_OUT
  return g_started.load(std::memory_order_acquire);  // interpose/off_options.h
#endif
  return g_started.load(std::memory_order_acquire) && !g_trace.load(std::memory_order_acquire) &&
         !g_fuzz_hook.load(std::memory_order_relaxed) && !watchdog::Enabled();
}

}  // namespace

bool EmitOneSend(const checkers::OneSend& p) { return EngineAlone() && GetEngine().PostOneSend(p); }

bool EmitOneRecv(const checkers::OneRecv& p) { return EngineAlone() && GetEngine().PostOneRecv(p); }

bool EmitPollSucceeded(core::ObjId cq, const core::Completion* wcs, size_t n,
                       std::vector<checkers::RetiredWr>* retired) {
  return EngineAlone() && GetEngine().PollSucceeded(cq, wcs, n, retired);
}

void SetFuzzEventHook(FuzzEventHook hook) { g_fuzz_hook.store(hook, std::memory_order_relaxed); }

bool LkeyInFlight(uint32_t lkey) { return Checking() && GetEngine().LkeyInFlight(lkey); }

std::vector<checkers::CqOutstanding> Outstanding() {
  if (!Checking()) return {};
  return GetEngine().Outstanding();
}

void OnCreateCq(ibv_cq* cq, ibv_context* ctx, ibv_comp_channel* channel, core::StackId stack) {
  core::Event e;
  e.kind = core::EventKind::kCreateCq;
  e.ret = cq ? 0 : -1;
  e.err = cq ? 0 : errno;
  e.stack = stack;
  e.parent = Id(ctx);
  e.channel = Id(channel);
  if (cq) {
    e.obj = Assign(cq);
    e.cqe = cq->cqe;
  }
  Emit(e);
}

void OnCreateQp(ibv_qp* qp, ibv_pd* pd, const ibv_qp_cap& cap, ibv_cq* send_cq, ibv_cq* recv_cq, ibv_srq* srq,
                ibv_qp_type type, int sq_sig_all, core::StackId stack) {
  // XRC: an initiator has no receive side (a receive CQ or SRQ given is
  // ignored by the device), a target has neither PD, CQs nor SRQ of its own
  // (its receives are its domain's SRQs').
  if (type == IBV_QPT_XRC_SEND) recv_cq = nullptr, srq = nullptr;
  if (type == IBV_QPT_XRC_RECV) pd = nullptr, send_cq = recv_cq = nullptr, srq = nullptr;
  core::Event e;
  e.kind = core::EventKind::kCreateQp;
  e.ret = qp ? 0 : -1;
  e.err = qp ? 0 : errno;
  e.stack = stack;
  e.parent = Id(pd);
  e.send_cq = Id(send_cq);
  e.recv_cq = Id(recv_cq);
  e.srq = Id(srq);
  e.qp_type = type;
  e.sq_sig_all = sq_sig_all;
  e.caps = {cap.max_send_wr, cap.max_recv_wr, cap.max_send_sge, cap.max_recv_sge, cap.max_inline_data};
  if (qp) {
    e.obj = Assign(qp, {cap.max_send_sge, cap.max_recv_sge, cap.max_send_wr, cap.max_recv_wr});
    e.qp_num = qp->qp_num;
    td::Bind(qp, pd);  // made with a parent domain that has a thread domain
  }
  Emit(e);
}

namespace {

// How many SGEs of a WR may be read: num_sge of them when that is within
// the object's limit, else none.  A larger num_sge is the program's bug,
// which a provider refuses before it reads any entry (the list may end
// after one entry, as in `num_sge = 1000` with a one-element array); the
// event keeps num_sge as given for sge-count.  Never more than an event
// keeps, and nothing of a null list.
int ReadableSges(const void* sg_list, int num_sge, uint32_t max_sge) {
  if (!sg_list || num_sge <= 0 || static_cast<uint32_t>(num_sge) > max_sge) return 0;
  return static_cast<int>(std::min<uint32_t>(static_cast<uint32_t>(num_sge), kMaxCopiedSges));
}

}  // namespace

uint32_t CopySendChain(const ibv_send_wr* wr, const ibv_send_wr* bad, core::Event* e, bool ud,
                       uint32_t max_sge, uint32_t max_wrs) {
  // Into the WRs the event already holds where it has them (a reused event
  // keeps its elements and their SGE storage): every field is written.
  auto& wrs = e->send_wrs;
  uint32_t i = 0;
  for (; wr && i < max_wrs; wr = wr->next, ++i) {
    if (wr == bad) e->bad_index = i;
    core::SendWr& w = i < wrs.size() ? wrs[i] : wrs.emplace_back();
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.send_flags = wr->send_flags;
    w.imm_data = wr->imm_data;
    w.num_sge = wr->num_sge;
    w.posted_at = 0;
    if (wr->opcode == IBV_WR_ATOMIC_CMP_AND_SWP || wr->opcode == IBV_WR_ATOMIC_FETCH_AND_ADD) {
      w.remote_addr = wr->wr.atomic.remote_addr;
      w.rkey = wr->wr.atomic.rkey;
      w.compare_add = wr->wr.atomic.compare_add;
      w.swap = wr->wr.atomic.swap;
    } else {
      w.remote_addr = wr->wr.rdma.remote_addr;
      w.rkey = wr->wr.rdma.rkey;
      w.compare_add = w.swap = 0;
    }
    // Only a UD QP's WRs hold an AH in the union (for others the same bytes
    // are the remote address, not worth a lookup).
    if (ud) {
      w.ah = Id(wr->wr.ud.ah);
      w.remote_qpn = wr->wr.ud.remote_qpn;
    } else {
      w.ah = 0;
      w.remote_qpn = 0;
    }
    if (__builtin_expect(wr->opcode == IBV_WR_BIND_MW || wr->opcode == IBV_WR_LOCAL_INV, 0)) {
      // No scatter list: the provider reads none (and num_sge may be
      // anything).  A bind's union holds the binding, not an RDMA address.
      w.sges.clear();
      w.num_sge = 0;
      if (wr->opcode == IBV_WR_BIND_MW) {
        const ibv_mw_bind_info& b = wr->bind_mw.bind_info;
        w.rkey = wr->bind_mw.rkey;
        w.remote_addr = 0;
        w.imm_data = 0;
        w.bind = {Id(wr->bind_mw.mw), Id(b.mr), b.addr, b.length, b.mw_access_flags};
      } else {
        w.remote_addr = 0;
        w.rkey = 0;
        w.bind = {};
      }
      continue;
    }
    w.bind = {};
    const int n = ReadableSges(wr->sg_list, wr->num_sge, max_sge);
    w.sges.resize(n);
    core::Sge* g = w.sges.data();
    for (int k = 0; k < n; ++k)
      g[k] = {wr->sg_list[k].addr, wr->sg_list[k].length, wr->sg_list[k].lkey, 0, 0};
  }
  if (wrs.size() > i) wrs.erase(wrs.begin() + i, wrs.end());
  return i;
}

uint32_t CopyRecvChain(const ibv_recv_wr* wr, const ibv_recv_wr* bad, core::Event* e, uint32_t max_sge,
                       uint32_t max_wrs) {
  uint32_t i = 0;
  for (; wr && i < max_wrs; wr = wr->next, ++i) {
    if (wr == bad) e->bad_index = i;
    core::RecvWr w;
    w.wr_id = wr->wr_id;
    w.num_sge = wr->num_sge;
    const int n = ReadableSges(wr->sg_list, wr->num_sge, max_sge);
    for (int k = 0; k < n; ++k)
      w.sges.push_back({wr->sg_list[k].addr, wr->sg_list[k].length, wr->sg_list[k].lkey, 0});
    e->recv_wrs.push_back(std::move(w));
  }
  return i;
}

uint32_t CopyOpsChain(const ibv_ops_wr* wr, const ibv_ops_wr* bad, core::Event* e, uint32_t max_sge,
                      uint32_t max_wrs) {
  uint32_t i = 0;
  for (; wr && i < max_wrs; wr = wr->next, ++i) {
    if (wr == bad) e->bad_index = i;
    core::SendWr& w = e->send_wrs.emplace_back();
    w.wr_id = wr->wr_id;
    w.opcode = wr->opcode;
    w.send_flags = wr->flags;
    w.imm_data = wr->tm.handle;
    w.rkey = wr->tm.unexpected_cnt;
    if (wr->opcode != IBV_WR_TAG_ADD) continue;
    w.remote_addr = wr->tm.add.recv_wr_id;
    w.compare_add = wr->tm.add.tag;
    w.swap = wr->tm.add.mask;
    w.num_sge = wr->tm.add.num_sge;
    const int n = ReadableSges(wr->tm.add.sg_list, wr->tm.add.num_sge, max_sge);
    for (int k = 0; k < n; ++k)
      w.sges.push_back(
          {wr->tm.add.sg_list[k].addr, wr->tm.add.sg_list[k].length, wr->tm.add.sg_list[k].lkey, 0, 0});
  }
  return i;
}

}  // namespace rdmasan::interpose
