// checkers: pure checkers of the verbs rules (docs/RULES.md).
//
// The Engine takes Events in order and returns the Findings they raise:
// every check looks at the event against the books as they stood before it,
// then the event is applied.  Events in, Findings out; nothing else.
//
// May not: depend on anything but core/, read clocks, do I/O, call verbs,
// or look at application memory (payload hashes arrive inside Events).
// Not thread-safe: the caller orders events (one engine per process).
#ifndef RDMASAN_CHECKERS_ENGINE_H_
#define RDMASAN_CHECKERS_ENGINE_H_

#include <vector>

#include "absl/container/flat_hash_set.h"
#include "checkers/state.h"
#include "core/event.h"
#include "core/report.h"

namespace rdmasan::checkers {

class Engine {
 public:
  // Findings raised by `e`, in check order.
  std::vector<core::Finding> OnEvent(const core::Event& e);
  const State& state() const { return state_; }
  // Send WRs (with payload hashes) that the events so far retired.
  std::vector<RetiredWr> TakeRetired() { return state_.TakeRetired(); }

 private:
  State state_;
  absl::flat_hash_set<uint64_t> emitted_;  // (check, stack) already reported
};

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_ENGINE_H_
