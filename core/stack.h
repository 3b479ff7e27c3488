// core/stack: call-stack capture, the process-wide stack depot, and
// symbolization.
//
// Capture is a fast frame-pointer walk, like the sanitizers' fast unwinder
// (and, for the few calls off the data path that name a library's frames in
// suppressions, a full one from the unwind tables, like their slow one):
// frame #0 is always the exact return address of the capturing call (right
// even when the application has no frame pointers); the deeper frames come
// from the rbp chain, checked to be aligned, increasing and inside the
// thread's stack, and each one to be a return address (inside a loaded
// object's text, right after a call instruction), so a chain that is no
// chain (a program built without frame pointers) ends the walk cleanly
// instead of giving garbage frames.  The frames in rdmasan's own text
// (librdmasan.so, which is built with frame pointers) are left out, so a
// stack captured anywhere inside the shim starts at the application's call
// into it.  Stacks are interned in a depot and named by a 32-bit StackId;
// the hit path of capture+intern (the same walk as the thread's last one)
// takes no lock and does not allocate.
//
// Symbolization (libdwfl) is slow, takes a lock and allocates: it is for
// report time only, never for the data path.  It never crashes on odd
// addresses and never reaches for the network (debuginfod is not used).
// It finds the PC's scopes itself (not dwarf_getscopes, which fails on
// every inlined call of a link-time optimized program, whose abstract
// origins lie in other CUs), and it never drops a physical frame.
//
// Built from one file per concern: stack_store.cc (the depot),
// stack_unwind.cc (capture), stack_code_map.cc (telling a return address
// from garbage) and stack_symbolize.cc.
#ifndef RDMASAN_CORE_STACK_H_
#define RDMASAN_CORE_STACK_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace rdmasan::core {

using StackId = uint32_t;  // 0 = none

inline constexpr size_t kMaxStackFrames = 32;

// The stack of the caller of CaptureStack: frame #0 is the return address of
// this call (the call site in the caller), then the caller's callers from the
// frame-pointer chain.  Returns 0 only if the depot is full.
StackId CaptureStack();

// ---------------------------------------------- the capture in line --
// Each thread's last stacks by call site (core/stack_unwind.cc fills
// them): the frame records the frame-pointer walk from (pc, frame) went
// through, each record's two words (the caller's frame, the return
// address) as it read them.  If every one of those words is still what
// it was, the walk would read the same words and give the same stack:
// the compare reads each record at an address known beforehand (the word
// before it), with none of the walk's checks, all of which those same
// words passed.  A thread's capture that interrupts another (a signal
// handler) finds the table busy and walks.
namespace stack_fast {

// Four entries, two ways in each of two sets (a post's and a receive's
// call sites alternating never push each other out).
struct SeenWalks {
  static constexpr unsigned kEntries = 4;
  bool busy = false;  // a capture of this thread is reading or filling the table
  uint8_t victim[kEntries / 2] = {};
  uintptr_t pc[kEntries] = {};
  uintptr_t frame[kEntries] = {};
  StackId id[kEntries] = {};     // 0: empty
  uint32_t nrec[kEntries] = {};  // records: the first at `frame`, each next at the word [0] of the one before
  uintptr_t rec[kEntries][2 * kMaxStackFrames] = {};
};
extern constinit thread_local SeenWalks t_seen_walks;

// The first entry of pc's set.
inline unsigned Set(uintptr_t pc) { return static_cast<unsigned>((pc * 0x9E3779B97F4A7C15ull) >> 63) * 2; }

// The walk (core/stack_unwind.cc): the stack interned, and an entry of
// the table filled for (pc, frame) unless `busy` was set on entry.
StackId CaptureWalked(uintptr_t pc, uintptr_t frame);

}  // namespace stack_fast

// In line where it is fast; out of line, unchecked, in a sanitizer's build
// (its words are other frames' records, and GCC 12's null check of a
// thread-local's address is wrong there: core/compiler.h).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RDMASAN_STACK_FAST __attribute__((no_sanitize("address", "thread", "undefined"), noinline))
#else
#define RDMASAN_STACK_FAST __attribute__((always_inline))
#endif

// The stack as seen from a function F: `pc` is F's return address and
// `frame` F's frame address.  Use the macro below inside an exported entry
// point, so that frame #0 is exactly the application's call site.  In line
// (stack_fast above): the same stack captured again from the same call
// site and frame costs a compare of the frame records its walk read.
RDMASAN_STACK_FAST inline StackId CaptureStackFrom(uintptr_t pc, uintptr_t frame) {
  stack_fast::SeenWalks& t = stack_fast::t_seen_walks;
  if (__builtin_expect(t.busy, 0)) return stack_fast::CaptureWalked(pc, frame);
  t.busy = true;
  // A capture that interrupts this one (a signal handler's) sees `busy`
  // before this one reads an entry, and leaves the table alone.
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  unsigned i = stack_fast::Set(pc);
  if (t.pc[i] != pc) ++i;
  StackId id = 0;
  if (t.pc[i] == pc && t.frame[i] == frame) {
    const uintptr_t* at = reinterpret_cast<const uintptr_t*>(frame);
    const uintptr_t* rec = t.rec[i];
    const uintptr_t* const end = rec + 2 * t.nrec[i];
    for (; rec != end; rec += 2) {
      if (at[0] != rec[0] || at[1] != rec[1]) break;
      at = reinterpret_cast<const uintptr_t*>(rec[0]);  // the next record: a word the walk checked
    }
    if (rec == end) id = t.id[i];
  }
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  t.busy = false;
  return __builtin_expect(id != 0, 1) ? id : stack_fast::CaptureWalked(pc, frame);
}

#undef RDMASAN_STACK_FAST

// The same stack walked with the unwind tables (.eh_frame, as
// _Unwind_Backtrace reads them) instead of the frame-pointer chain, so the
// frames of libraries built without frame pointers (Debian's UCX and Open
// MPI: a registration cache's functions) are there too.  Slow (microseconds,
// and the loader's lock): only for calls off the data path, e.g. a
// registration, or a free that hits registered memory.
StackId CaptureFullStackFrom(uintptr_t pc, uintptr_t frame);

#define RDMASAN_CAPTURE_CALLER_FULL_STACK()                                                       \
  ::rdmasan::core::CaptureFullStackFrom(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), \
                                        reinterpret_cast<uintptr_t>(__builtin_frame_address(0)))

#define RDMASAN_CAPTURE_CALLER_STACK()                                                        \
  ::rdmasan::core::CaptureStackFrom(reinterpret_cast<uintptr_t>(__builtin_return_address(0)), \
                                    reinterpret_cast<uintptr_t>(__builtin_frame_address(0)))

// Frames whose return address lies in [lo, hi) are left out of the stacks
// captured from now on (at most 4 ranges).  The text of librdmasan.so is
// hidden without asking; linked into the main program (the unit tests),
// nothing is, but what a test hides with this.
void HideTextRange(uintptr_t lo, uintptr_t hi);

// Interns an explicit list of return addresses (at most kMaxStackFrames are
// kept).  The same PCs always give the same id; n == 0 gives 0.
StackId InternStack(const uintptr_t* pcs, size_t n);

// The PCs of a stack (empty for 0 or an unknown id).
std::vector<uintptr_t> StackPcs(StackId id);

// Number of distinct stacks interned so far.
size_t StackDepotSize();

// One symbolized frame.  A PC with inlined calls yields several Frames with
// the same pc, innermost first.  Unknown parts are empty / 0.
struct Frame {
  uintptr_t pc = 0;             // the return address as captured
  std::string function;         // demangled
  std::string file;             // source path as DWARF gives it
  int line = 0;                 // line of the call instruction (pc - 1)
  std::string module;           // path of the ELF object holding pc
  uintptr_t module_offset = 0;  // pc as an address of that ELF file
};

// Symbolizes every PC of a stack (results cached per PC).  Stack PCs are
// return addresses, so pc - 1 is looked up: the line is the call's line.
std::vector<Frame> SymbolizeStack(StackId id);
std::vector<Frame> SymbolizePcs(const std::vector<uintptr_t>& pcs);
// symbol_cache=: a file of symbolized frames shared by the processes that
// name it (keyed by module build ID and offset); "" for none.  Forgets
// what this process symbolized before.
void SetSymbolCache(const std::string& path);

// Symbolizes (module path, module_offset) pairs as SymbolizeStack reported
// them, by opening the module files; for replaying a recorded trace,
// possibly in another process.  Frames get pc = module_offset.
std::vector<Frame> SymbolizeOffline(const std::vector<std::pair<std::string, uintptr_t>>& module_offsets);

// "0x55d0c0a1b2c3 in teardown client.c:88", the frame part of a report line
// after "#i ": unknown files print "(module+0xoff)", unknown everything
// "(<unknown>)".
std::string FormatFrame(const Frame& frame);

}  // namespace rdmasan::core

#endif  // RDMASAN_CORE_STACK_H_
