// checkers/quiet: the data path's quick answer to "can any check speak
// about this event?".
//
// Nearly every post and poll of a working program raises nothing, and
// running each check on its own (its own walk of the chain, its own MR
// lookups) costs more than the verbs call it watches.  These filters test
// the conditions of every check of a post_send, post_recv or poll_cq in
// one pass over the event, against the same books, and return true only
// when none of them can fire; the engine then skips the check functions.
// When a filter returns false the checks run as always and alone decide
// and word the findings: a filter may be pessimistic (a failed post, an
// unusual state: it says "maybe" and the checks find nothing), never
// optimistic.  tests/unit compares engines with and without the filters
// on random event streams.
//
// May not: report, change the books, or look at anything a check does not.
#ifndef RDMASAN_CHECKERS_QUIET_H_
#define RDMASAN_CHECKERS_QUIET_H_

#include "checkers/check.h"

namespace rdmasan::checkers {

// post_send to a QP whose books are `q`: no check of kPostSend can report.
// `emitted`: the domain's reported (check, stack) keys (EmittedKey): a
// check that speaks once per stack (Repeated) and already spoke from this
// one cannot report again.  `enabled`: bit i for the check with CheckId i
// that runs (the condition of a check that does not run is not tested).
// In line in the engine's post path (checkers/ is one translation unit):
// as a call, its spills and reloads cost about as much as its tests.
[[gnu::always_inline]] inline bool PostSendQuiet(const core::Event& e, const QpState& q, const State& s,
                                                 MrCache& mrs, const absl::flat_hash_set<uint64_t>& emitted,
                                                 uint64_t enabled);
// PostSendQuiet for a OneSend (OneSendable) to the QP whose books are `q`:
// the same tests, on the one WR (a check added to one is added to both).
[[gnu::always_inline]] inline bool OneSendQuiet(const OneSend& p, const QpState& q, const State& s,
                                                MrCache& mrs, const absl::flat_hash_set<uint64_t>& emitted,
                                                uint64_t enabled);
// post_recv to a QP whose books are `q`: no check of kPostRecv can report.
bool PostRecvQuiet(const core::Event& e, const QpState& q, const State& s, MrCache& mrs);
// PostRecvQuiet for a OneRecv to the QP whose books are `q`, while the
// destinations index keeps no receives: the same tests, on the one WR (a
// check added to one is added to both).
bool OneRecvQuiet(const OneRecv& p, const QpState& q, const State& s, MrCache& mrs);
// poll_cq: no check of kPollCq can report.
bool PollQuiet(const core::Event& e);

}  // namespace rdmasan::checkers

#endif  // RDMASAN_CHECKERS_QUIET_H_
