// core/stack_unwind: stack capture (core/stack.h): the fast frame-pointer
// walk and the full walk by the unwind tables, the frames of rdmasan's own
// text left out, and each thread's last few stacks remembered so that a
// capture of a stack seen just before costs a compare: the frame records
// of the last walk from each call site (stack_fast, compared in line by
// core/stack.h), and behind them the last few walks' return addresses.
//
// May not: allocate from the heap, take a lock on the hit path, or read a
// word outside this thread's stack (the walk checks every frame pointer
// against the thread's stack bounds); the full walk is for calls off the
// data path only.
#include <elf.h>
#include <link.h>
#include <pthread.h>
#include <sys/auxv.h>
#include <unistd.h>
#include <unwind.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>

#include "core/spin_lock.h"
#include "core/stack.h"
#include "core/stack_internal.h"

namespace rdmasan::core {
namespace {

using stack_internal::IsReturnAddress;

// ---------------------------------------------------------------- capture --

struct StackBounds {
  uintptr_t lo;
  uintptr_t hi;
  bool init;
};
thread_local StackBounds tls_bounds;  // trivial: no TLS init hook

// Once per thread, out of line: the walks that find the bounds known need
// no registers saved for the call.
__attribute__((noinline)) void FindThreadStackBounds(StackBounds& b) {
  b.init = true;
  pthread_attr_t attr;
  if (pthread_getattr_np(pthread_self(), &attr) == 0) {
    void* addr = nullptr;
    size_t size = 0;
    if (pthread_attr_getstack(&attr, &addr, &size) == 0) {
      b.lo = reinterpret_cast<uintptr_t>(addr);
      b.hi = b.lo + size;
    }
    pthread_attr_destroy(&attr);
  }
}

const StackBounds& ThreadStackBounds() {
  StackBounds& b = tls_bounds;
  if (__builtin_expect(!b.init, 0)) FindThreadStackBounds(b);
  return b;
}

// ------------------------------------------------------ hidden text --
// rdmasan's own frames never appear in a report: a stack captured inside
// the shim (an ibv_wr_* batch that softnic posts, a hook the shim calls
// itself) starts at the application's call into the shim.  The hidden text
// is by default the shared object holding this code (librdmasan.so), found
// from its own ELF header; linked into the main program (the unit tests),
// nothing is hidden unless a test says so.

extern "C" const ElfW(Ehdr) __ehdr_start __attribute__((weak, visibility("hidden")));

constexpr size_t kMaxHidden = 4;
std::atomic<uintptr_t> g_hidden_lo[kMaxHidden];
std::atomic<uintptr_t> g_hidden_hi[kMaxHidden];
std::atomic<size_t> g_nhidden{0};
std::atomic<int> g_hidden_state{0};  // 0 = own object not looked at yet, 1 = being looked at, 2 = done
constinit SpinLock g_hidden_lock;

void AddHidden(uintptr_t lo, uintptr_t hi) {
  std::lock_guard<SpinLock> lock(g_hidden_lock);
  size_t n = g_nhidden.load(std::memory_order_relaxed);
  if (n >= kMaxHidden || lo >= hi) return;
  g_hidden_lo[n].store(lo, std::memory_order_relaxed);
  g_hidden_hi[n].store(hi, std::memory_order_relaxed);
  g_nhidden.store(n + 1, std::memory_order_release);
}

void HideOwnObject() {
  const ElfW(Ehdr)* eh = &__ehdr_start;
  if (!eh) return;
  const auto* phdrs = reinterpret_cast<const ElfW(Phdr)*>(reinterpret_cast<uintptr_t>(eh) + eh->e_phoff);
  if (reinterpret_cast<uintptr_t>(phdrs) == getauxval(AT_PHDR)) return;  // the main program
  uintptr_t bias = 0;
  bool have_bias = false;
  for (int i = 0; i < eh->e_phnum; ++i)
    if (phdrs[i].p_type == PT_LOAD && phdrs[i].p_offset == 0) {
      bias = reinterpret_cast<uintptr_t>(eh) - phdrs[i].p_vaddr;
      have_bias = true;
    }
  if (!have_bias) return;
  for (int i = 0; i < eh->e_phnum; ++i)
    if (phdrs[i].p_type == PT_LOAD && (phdrs[i].p_flags & PF_X))
      AddHidden(bias + phdrs[i].p_vaddr, bias + phdrs[i].p_vaddr + phdrs[i].p_memsz);
}

// The first capture of the process looks; one racing with it waits the
// few loads that takes, so no capture ever sees the text half hidden.
void HideOwnObjectOnce() {
  if (g_hidden_state.load(std::memory_order_acquire) == 2) return;
  int expected = 0;
  if (g_hidden_state.compare_exchange_strong(expected, 1, std::memory_order_acq_rel)) {
    HideOwnObject();
    g_hidden_state.store(2, std::memory_order_release);
    return;
  }
  for (int spins = 0; g_hidden_state.load(std::memory_order_acquire) != 2; ++spins) SpinWait(spins);
}

bool IsHidden(uintptr_t pc) {
  size_t n = g_nhidden.load(std::memory_order_acquire);
  for (size_t i = 0; i < n; ++i)
    if (pc - 1 >= g_hidden_lo[i].load(std::memory_order_relaxed) &&
        pc - 1 < g_hidden_hi[i].load(std::memory_order_relaxed))
      return true;
  return false;
}

// ------------------------------------------------------------- the walk --

// Frame record layout on x86-64 and AArch64: [fp] = caller's fp, [fp+8] =
// return address.  Reads only words inside [frame, stack top) of this
// thread's stack, which are mapped.  The raw walk: rbp may be anything
// where the program has no frame pointers, so the words it gives are only
// candidates (ValidFrames sorts them out).
__attribute__((no_sanitize("address", "thread", "undefined"))) size_t WalkFrames(uintptr_t pc,
                                                                                 uintptr_t frame,
                                                                                 uintptr_t* out) {
  size_t n = 0;
  out[n++] = pc;
  const StackBounds& b = ThreadStackBounds();
  if (frame < b.lo || frame + 2 * sizeof(uintptr_t) > b.hi || frame % sizeof(uintptr_t)) return n;
  uintptr_t prev = frame;
  uintptr_t bp = reinterpret_cast<const uintptr_t*>(frame)[0];
  while (n < kMaxStackFrames) {
    // Written so that a garbage bp near UINTPTR_MAX cannot wrap around.
    if (bp <= prev || bp % sizeof(uintptr_t) || bp > b.hi - 2 * sizeof(uintptr_t)) break;
    const uintptr_t* rec = reinterpret_cast<const uintptr_t*>(bp);
    uintptr_t ret = rec[1];
    if (ret < 4096) break;
    out[n++] = ret;
    prev = bp;
    bp = rec[0];
  }
  return n;
}

// From the raw walk to the stack: the walk ends at the first candidate
// past frame #0 that is not a return address (frame #0 is exact), and the
// frames in hidden text (rdmasan's own) are left out.
size_t ValidFrames(const uintptr_t* raw, size_t n, uintptr_t* out) {
  HideOwnObjectOnce();
  size_t m = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && !IsReturnAddress(raw[i])) break;
    if (!IsHidden(raw[i])) out[m++] = raw[i];
  }
  return m;
}

// Each thread's last few captured stacks: a loop posting from one call site
// and polling from another captures the same few stacks every time, and
// comparing a raw walk with them is cheaper than checking its frames
// (ValidFrames reads each return address's code), hashing and looking it
// up.  Ids never change meaning, so a stale entry is only a miss.
struct RecentStack {
  size_t n = 0;
  StackId id = 0;
  uintptr_t pcs[kMaxStackFrames] = {};
};
struct RecentStacks {
  static constexpr unsigned kEntries = 4;
  RecentStack e[kEntries];
  unsigned next = 0;  // the entry a miss replaces
  unsigned last = 0;  // the entry the last capture found or made
};
constinit thread_local RecentStacks t_recent_stacks;  // no TLS init hook

bool SamePcs(const uintptr_t* a, const uintptr_t* b, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (a[i] != b[i]) return false;
  return true;
}

// Whether the raw walk from (pc, frame) would give exactly r's pcs: the
// walk of WalkFrames, each candidate compared as it is read, stopping at
// the first that differs (a call from elsewhere differs at frame #0 or
// soon after).  The same reads as WalkFrames, so the same rules.
__attribute__((no_sanitize("address", "thread", "undefined"))) bool WalkMatches(const RecentStack& r,
                                                                                uintptr_t pc,
                                                                                uintptr_t frame) {
  if (r.pcs[0] != pc) return false;
  size_t n = 1;
  const StackBounds& b = ThreadStackBounds();
  if (!(frame < b.lo || frame + 2 * sizeof(uintptr_t) > b.hi || frame % sizeof(uintptr_t))) {
    uintptr_t prev = frame;
    uintptr_t bp = reinterpret_cast<const uintptr_t*>(frame)[0];
    while (n < kMaxStackFrames) {
      if (bp <= prev || bp % sizeof(uintptr_t) || bp > b.hi - 2 * sizeof(uintptr_t)) break;
      const uintptr_t* rec = reinterpret_cast<const uintptr_t*>(bp);
      const uintptr_t ret = rec[1];
      if (ret < 4096) break;
      if (n >= r.n || r.pcs[n] != ret) return false;
      ++n;
      prev = bp;
      bp = rec[0];
    }
  }
  return n == r.n;
}

// CaptureStackFrom when the stack is not the last one: the raw walk,
// compared with the other recent ones, or checked and interned.
__attribute__((noinline)) StackId CaptureOtherStack(uintptr_t pc, uintptr_t frame) {
  RecentStacks& recent = t_recent_stacks;
  uintptr_t raw[kMaxStackFrames];
  size_t n = WalkFrames(pc, frame, raw);
  for (unsigned i = 0; i < RecentStacks::kEntries; ++i) {
    const RecentStack& r = recent.e[i];
    if (r.n == n && r.id && SamePcs(raw, r.pcs, n)) {
      recent.last = i;
      return r.id;
    }
  }
  uintptr_t pcs[kMaxStackFrames];
  StackId id = InternStack(pcs, ValidFrames(raw, n, pcs));
  if (id) {
    recent.last = recent.next;
    RecentStack& r = recent.e[recent.next];
    recent.next = (recent.next + 1) % RecentStacks::kEntries;
    r.n = n;
    r.id = id;
    std::memcpy(r.pcs, raw, n * sizeof(uintptr_t));
  }
  return id;
}

// The stack from (pc, frame) without the in-line table: the last stack
// compared while it is walked, with nothing stored and no frame of
// arrays, then the other recent ones, then the checked walk interned.
StackId CaptureRecent(uintptr_t pc, uintptr_t frame) {
  const RecentStacks& recent = t_recent_stacks;
  if (const RecentStack& last = recent.e[recent.last]; last.id && WalkMatches(last, pc, frame))
    return last.id;
  return CaptureOtherStack(pc, frame);
}

// The frame records the walk from (pc, frame) reads (WalkFrames, the same
// reads and the same rules), each record's two words into rec: the record
// at `frame` if it lies in the thread's stack, then each one the chain
// leads to that passes the walk's checks.  Every record but the last
// therefore holds in its word [0] the address of a checked next record.
// Returns the number of records.
__attribute__((no_sanitize("address", "thread", "undefined"))) uint32_t RecordWalk(uintptr_t frame,
                                                                                   uintptr_t* rec_out) {
  uint32_t nrec = 0;
  const StackBounds& b = ThreadStackBounds();
  if (frame < b.lo || frame + 2 * sizeof(uintptr_t) > b.hi || frame % sizeof(uintptr_t)) return 0;
  const uintptr_t* rec = reinterpret_cast<const uintptr_t*>(frame);
  rec_out[0] = rec[0];
  rec_out[1] = rec[1];
  nrec = 1;
  uintptr_t prev = frame;
  uintptr_t bp = rec[0];
  for (size_t n = 1; n < kMaxStackFrames; ++n) {
    if (bp <= prev || bp % sizeof(uintptr_t) || bp > b.hi - 2 * sizeof(uintptr_t)) break;
    rec = reinterpret_cast<const uintptr_t*>(bp);
    rec_out[2 * nrec] = rec[0];
    rec_out[2 * nrec + 1] = rec[1];
    ++nrec;
    if (rec[1] < 4096) break;
    prev = bp;
    bp = rec[0];
  }
  return nrec;
}

}  // namespace

namespace stack_fast {

constinit thread_local SeenWalks t_seen_walks;  // no TLS init hook

__attribute__((noinline)) StackId CaptureWalked(uintptr_t pc, uintptr_t frame) {
  SeenWalks& t = t_seen_walks;
  if (t.busy) return CaptureRecent(pc, frame);  // inside another capture of this thread
  t.busy = true;
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  const StackId id = CaptureRecent(pc, frame);
  if (id) {
    // The way of pc's set that holds pc or is empty, else the one whose
    // turn it is.
    const unsigned set = Set(pc);
    unsigned i = set;
    if (t.pc[i] != pc && t.id[i]) {
      if (t.pc[i + 1] == pc || !t.id[i + 1]) {
        ++i;
      } else {
        i += t.victim[set / 2];
        t.victim[set / 2] ^= 1;
      }
    }
    t.id[i] = 0;
    t.pc[i] = pc;
    t.frame[i] = frame;
    t.nrec[i] = RecordWalk(frame, t.rec[i]);
    t.id[i] = id;
  }
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  t.busy = false;
  return id;
}

}  // namespace stack_fast

// The stacks this thread remembers were made with the old hidden text:
// forgotten (another thread's are only as stale as before).
void HideTextRange(uintptr_t lo, uintptr_t hi) {
  AddHidden(lo, hi);
  t_recent_stacks = RecentStacks();
  stack_fast::t_seen_walks = stack_fast::SeenWalks();
}

namespace {

struct UnwindState {
  uintptr_t pcs[2 * kMaxStackFrames];
  size_t n = 0;
};

_Unwind_Reason_Code CollectPc(struct _Unwind_Context* ctx, void* arg) {
  auto* st = static_cast<UnwindState*>(arg);
  if (st->n == sizeof(st->pcs) / sizeof(st->pcs[0])) return _URC_END_OF_STACK;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (ip == 0) return _URC_END_OF_STACK;
  st->pcs[st->n++] = ip;
  return _URC_NO_REASON;
}

}  // namespace

__attribute__((noinline)) StackId CaptureFullStackFrom(uintptr_t pc, uintptr_t frame) {
  UnwindState st;
  _Unwind_Backtrace(CollectPc, &st);
  // The unwinder starts in rdmasan's own frames: the stack begins at the
  // caller's call site, `pc`, as CaptureStackFrom's does.  Not found (an odd
  // caller, a frame without unwind tables): the frame-pointer walk.
  size_t at = 0;
  while (at < st.n && st.pcs[at] != pc) ++at;
  if (at == st.n) return CaptureStackFrom(pc, frame);
  const size_t n = std::min(st.n - at, kMaxStackFrames);
  uintptr_t pcs[kMaxStackFrames];
  return InternStack(pcs, ValidFrames(st.pcs + at, n, pcs));
}

__attribute__((noinline)) StackId CaptureStack() {
  StackId id = RDMASAN_CAPTURE_CALLER_STACK();
  asm volatile("" ::: "memory");  // no tail call: the walk starts from this frame
  return id;
}

}  // namespace rdmasan::core
