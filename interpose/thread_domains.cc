// The thread-domain gates (interpose/thread_domains.h).  Parent domains and
// TDs are known from ibv_alloc_parent_domain (interpose/domains.cc); a TD
// the shim never saw allocated (ibv_alloc_td is inline and not wrapped) gets
// its gate when the first parent domain names it.  Gates are never freed: a
// thread may still be inside one when its TD goes, and a TD allocated again
// at the same address gets the same (idle) gate.
#include "interpose/thread_domains.h"

#include <sys/syscall.h>
#include <unistd.h>

#include <mutex>
#include <new>
#include <string>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_format.h"
#include "core/checks.h"
#include "core/report.h"
#include "core/spin_lock.h"
#include "core/stack.h"
#include "interpose/hooks.h"
#include "interpose/interpose.h"
#include "interpose/ptr_table.h"

namespace rdmasan::interpose::td {

struct Gate {
  // The thread inside: its tid << 32 | the stack of its outermost call; 0
  // while none is.  Written by CAS (taking) and by its owner (clearing).
  alignas(64) std::atomic<uint64_t> owner{0};
  // The owner's call, for the report: Verb << 48 | the object's id; 0 until
  // the owner wrote it (cleared before the owner clears `owner`).
  std::atomic<uint64_t> what{0};
  uint32_t depth = 0;  // the owner's nested entries; only the owner touches it
  uint32_t number = 0;
  core::StackId created = 0;  // the first parent domain naming the TD, allocated at
};

std::atomic<uint32_t> g_bound{0};

namespace {

constexpr uint64_t kObjMask = (uint64_t{1} << 48) - 1;

struct Domains {
  std::mutex mu;
  absl::flat_hash_map<const ibv_td*, Gate*> by_td;
  absl::flat_hash_map<const ibv_pd*, Gate*> by_parent;
  uint32_t gates = 0;
};
Domains& Tables() {  // made on first use (a verb may come before constructors)
  static auto* const d = new Domains();
  return *d;
}
PtrTable g_objects;  // a bound QP or CQ -> its Gate*

thread_local uint32_t t_tid = 0;
uint32_t Tid() {
  if (!t_tid) t_tid = static_cast<uint32_t>(syscall(SYS_gettid));
  return t_tid;
}

// The offender's call, and the holder's, in words.
const char* Entered(Verb v) {
  switch (v) {
    case Verb::kPostSend:
      return "ibv_post_send on QP";
    case Verb::kPostRecv:
      return "ibv_post_recv on QP";
    case Verb::kWrBatch:
      return "ibv_wr_start on QP";
    case Verb::kPollCq:
      return "ibv_poll_cq on CQ";
    case Verb::kCqExPoll:
      return "ibv_start_poll on CQ";
    case Verb::kNone:
      break;
  }
  return "a verb on";
}
const char* Inside(Verb v) {
  switch (v) {
    case Verb::kPostSend:
      return "ibv_post_send on QP";
    case Verb::kPostRecv:
      return "ibv_post_recv on QP";
    case Verb::kWrBatch:
      return "an ibv_wr_* batch (ibv_wr_start to ibv_wr_complete) on QP";
    case Verb::kPollCq:
      return "ibv_poll_cq on CQ";
    case Verb::kCqExPoll:
      return "an extended poll (ibv_start_poll to ibv_end_poll) on CQ";
    case Verb::kNone:
      break;
  }
  return "a verb on";
}

// Pairs (offender's stack, holder's stack) already reported: a racing loop
// reaches the reporter once per pair.  Bounded; past it the reporter's own
// once-per-stack rule still holds.
std::mutex g_seen_mu;
absl::flat_hash_set<uint64_t>& Seen() {
  static auto* const seen = new absl::flat_hash_set<uint64_t>();
  return *seen;
}

[[gnu::noinline, gnu::cold]] void ReportRace(Gate* g, uint64_t holder, Verb v, core::ObjId obj,
                                             core::StackId stack) {
  const Reentry re;  // what reporting calls (free, open) is not the program's
  // The holder writes what it is inside right after taking the gate: wait
  // for it a little, as long as the same call holds the gate.
  uint64_t what = 0;
  for (int spins = 0; spins < 2000; ++spins) {
    what = g->what.load(std::memory_order_acquire);
    if (what || g->owner.load(std::memory_order_acquire) != holder) break;
    core::SpinWait(spins);
  }
  const auto holder_tid = static_cast<uint32_t>(holder >> 32);
  const auto holder_stack = static_cast<core::StackId>(holder);
  if (stack) {  // without a stack the reporter tells findings apart by their message
    std::lock_guard<std::mutex> l(g_seen_mu);
    const uint64_t key = uint64_t{stack} << 32 | holder_stack;
    if (Seen().contains(key)) return;
    if (Seen().size() < 4096) Seen().insert(key);
  }
  const auto hv = static_cast<Verb>(what >> 48);
  const core::ObjId hobj = what & kObjMask;
  std::string holder_call =
      what ? absl::StrFormat("%s 0x%x", Inside(hv), hobj) : std::string("a verb on an object");
  core::Finding f;
  f.check = core::CheckId::kThreadDomainRace;
  f.message = absl::StrFormat(
      "thread %u entered %s 0x%x while thread %u is inside %s, of the same thread domain (#%u), whose "
      "objects "
      "take no locks: the program promised to serialise their calls (ibv_alloc_td)",
      Tid(), Entered(v), obj, holder_tid, holder_call, g->number);
  f.stack = stack;
  f.related.push_back({core::StackKind::kInVerbs,
                       absl::StrFormat("the other thread (%u) in verbs at", holder_tid), holder_stack});
  if (g->created)
    f.related.push_back({core::StackKind::kCreated,
                         absl::StrFormat("parent domain of thread domain #%u created at", g->number),
                         g->created});
  core::GlobalReporter().Report(f);
}

}  // namespace

void NoteParentDomain(const ibv_pd* parent, const ibv_td* td, core::StackId stack) {
  if (!parent || !td) return;
  Domains& d = Tables();
  std::lock_guard<std::mutex> l(d.mu);
  Gate*& g = d.by_td[td];
  if (!g) {
    g = new (std::nothrow) Gate();
    if (!g) {
      d.by_td.erase(td);
      return;
    }
    g->number = ++d.gates;
  }
  if (!g->created) g->created = stack;
  d.by_parent[parent] = g;
}

void ForgetParentDomain(const ibv_pd* parent) {
  Domains& d = Tables();
  std::lock_guard<std::mutex> l(d.mu);
  d.by_parent.erase(parent);
}

void Bind(const void* obj, const ibv_pd* pd) {
  if (!obj || !pd) return;
  Gate* g;
  {
    Domains& d = Tables();
    std::lock_guard<std::mutex> l(d.mu);
    auto it = d.by_parent.find(pd);
    if (it == d.by_parent.end()) return;
    g = it->second;
  }
  const bool was = g_objects.Get(obj) != 0;
  if (g_objects.Put(obj, reinterpret_cast<uint64_t>(g)) && !was)
    g_bound.fetch_add(1, std::memory_order_relaxed);
}

void Unbind(const void* obj) {
  if (!obj || !g_objects.Get(obj)) return;
  g_objects.Erase(obj);
  g_bound.fetch_sub(1, std::memory_order_relaxed);
}

Gate* GateOf(const void* obj) { return obj ? reinterpret_cast<Gate*>(g_objects.Get(obj)) : nullptr; }

void Enter(Gate* g, Verb v, core::ObjId obj, core::StackId stack, uintptr_t pc, uintptr_t frame) {
  const uint64_t me = uint64_t{Tid()} << 32;
  const uint64_t cur = g->owner.load(std::memory_order_relaxed);
  if ((cur & ~uint64_t{0xffffffff}) == me) {  // this thread is inside already
    ++g->depth;
    return;
  }
  if (!stack && pc) stack = core::CaptureStackFrom(pc, frame);
  uint64_t expected = 0;
  if (g->owner.compare_exchange_strong(expected, me | stack, std::memory_order_acquire,
                                       std::memory_order_acquire)) {
    g->depth = 1;
    g->what.store(uint64_t{static_cast<uint8_t>(v)} << 48 | (obj & kObjMask), std::memory_order_release);
    return;
  }
  ReportRace(g, expected, v, obj, stack);
}

void Leave(Gate* g) {
  const uint64_t me = uint64_t{Tid()} << 32;
  if ((g->owner.load(std::memory_order_relaxed) & ~uint64_t{0xffffffff}) != me) return;
  if (--g->depth) return;
  g->what.store(0, std::memory_order_relaxed);
  g->owner.store(0, std::memory_order_release);
}

void Hold::Take(const void* obj, Verb v, core::StackId stack, uintptr_t pc, uintptr_t frame) {
  Gate* g = GateOf(obj);
  if (!g) return;
  // Leave only an entry that holds the gate (a racing one does not).
  Enter(g, v, Id(obj), stack, pc, frame);
  gate_ = g;
}

}  // namespace rdmasan::interpose::td
