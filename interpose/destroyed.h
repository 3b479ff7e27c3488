// interpose/destroyed: handles the program destroyed, remembered so that a
// later call on one (a second destroy, a post to a destroyed QP, a poll of
// a destroyed CQ, a PD made on a closed device) is recognized, reported
// (use-after-destroy) and refused instead of handing freed memory to the
// provider.
//
// The last kSlots destroyed handles are kept with the id they had.  While
// a destroy verb runs, the block the provider frees that holds the handle
// is held back (a quarantine of the same kSlots): the handle's memory stays
// as the provider left it, so the inline verbs of <infiniband/verbs.h>
// (ibv_post_send reads qp->context->ops) still reach the shim instead of
// jumping through a reused block.  When a record is evicted its block is
// freed for real; a handle older than that is no longer recognized.
//
// May not: allocate (the quarantine runs inside free), or hold a lock
// while calling the real free.  Lookups are lock-free (a filter word, then
// a scan of kSlots atomics only for a handle the filter cannot clear).
#ifndef RDMASAN_INTERPOSE_DESTROYED_H_
#define RDMASAN_INTERPOSE_DESTROYED_H_

#include <atomic>
#include <cstddef>

#include "core/event.h"

namespace rdmasan::interpose {

// True once any handle was recorded (one relaxed load: the data path asks
// before it looks an object up for this).
extern std::atomic<size_t> g_destroyed_count;
inline bool AnyDestroyed() { return g_destroyed_count.load(std::memory_order_relaxed) != 0; }

// The id recorded for a destroyed object the shim gave no id (checking
// off, or made inside libibverbs): refused, never reported.
constexpr core::ObjId kUnknownObj = ~core::ObjId{0};

// Records that `obj`, which had id `id`, was destroyed successfully (after
// the provider's destroy returned 0).  Takes the block HoldFrees kept;
// true if there was one (the handle's memory is then the shim's until the
// record is evicted: a dead context's ops may be rewritten in it).  An
// object without id is recorded (as kUnknownObj) only with a held block.
// `kept`: the provider keeps the object's memory at least as long as the
// record lives (softnic's destroyed QPs, softnic.h): recorded as if held.
bool NoteDestroyed(const void* obj, core::ObjId id, bool kept = false);
// The id a destroyed handle had (kUnknownObj for one without an id), or 0
// (not destroyed, or forgotten).  A live handle costs one load of a filter
// after any destroy; only a possible match scans the records.
core::ObjId DestroyedId(const void* obj);
// Drops obj's record: a new object lives at that address now.
void ForgetDestroyed(const void* obj);

// While alive, this thread's free of the heap block that holds `obj` is
// held back (for NoteDestroyed); a block not claimed by then is freed.
class HoldFrees {
 public:
  explicit HoldFrees(const void* obj);
  ~HoldFrees();
  HoldFrees(const HoldFrees&) = delete;
  HoldFrees& operator=(const HoldFrees&) = delete;
};

// For the free() interposer: true if `p` was held back (do not free it).
bool HoldBack(void* p, size_t usable_size);
// Whether this thread is inside a HoldFrees (one thread-local load).
bool Holding();

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_DESTROYED_H_
