// checkers/state_early: completions polled ahead of their post's books.
//
// The interposer books a post after the provider's post returns: the WR is
// on the device, and a NIC (softnic completes a WRITE inside the post) may
// complete it before the posting thread reaches the books.  A second
// thread that polls in that window hands Retire a completion that matches
// no WR; the WR then arrives in the books and would stay outstanding
// forever (a false dereg-in-flight, destroy-in-use or hang report).  Retire
// keeps such a completion on its QP (NoteEarly): a successful send's (its
// wr_id), an error or flush completion on an empty SQ, or a receive's on an
// empty RQ; an SRQ's receive on an empty SRQ, on the SRQ.  After each later
// post's books, MatchEarly retires what the kept completions name, as
// Retire would have: a send's WR with its wr_id (signaled, for a
// successful completion) and the unsignaled WRs before it, the RQ's next
// WR, or the SRQ's oldest WR with the wr_id.  A kept completion that no
// post matches within EarlyWcs::kPosts posts to its queue is dropped (it
// was not a race: a completion the books never had a WR for), and at most
// EarlyWcs::kMax are kept, the oldest dropped first.
//
// The events do not say whether a post was in flight when a completion
// matched nothing, so a completion that was no race (one of a WR the books
// never saw: a post through a provider's own API, or a leftover polled
// after the QP's reset) is kept too; a post of the same wr_id within
// kPosts then retires its WR at its post, and that WR's own completion
// may in turn retire the next one's at its post: the books can run one
// WR ahead of the device on that QP (findings missed there, never false
// ones).
//
// May not: change anything but the books of the queue's own lock domain
// (the post's); hand the WRs it retires to the payload re-hash (the post
// has no list for them: a buffer rewritten under such a WR goes unseen);
// keep an XRC receive's, a tag-matching completion, or a receive polled
// while its SRQ still held WRs (Retire then retires the SRQ's oldest).
// The same events in the same order keep the same books: a replay agrees
// with the live run.
#include "checkers/state.h"

namespace rdmasan::checkers {

void State::NoteEarly(EarlyWcs& e, const core::Completion& wc, bool send, bool recv) {
  if (e.n == EarlyWcs::kMax) {
    for (uint8_t k = 1; k < e.n; ++k) e.at[k - 1] = e.at[k];
    --e.n;
  }
  EarlyWc& w = e.at[e.n++];
  w.wr_id = wc.wr_id;
  w.ttl = EarlyWcs::kPosts;
  w.send = send;
  w.recv = recv;
  w.error = wc.status != IBV_WC_SUCCESS;
}

void State::MatchEarly(QpState& q) {
  EarlyWcs& e = q.early;
  uint8_t kept = 0;
  for (uint8_t k = 0; k < e.n; ++k) {
    EarlyWc w = e.at[k];
    bool matched = false;
    if (w.send) {
      const size_t n = q.sq.size();
      size_t i = 0;
      while (i < n && !(q.sq[i].wr_id == w.wr_id && (w.error || q.sq[i].signaled))) ++i;
      if (i < n) {
        RetireSends(q, 0, i, nullptr);
        matched = true;
      }
    }
    // A QP's receives complete in order: the RQ was empty when this one
    // was polled, so its WR is the first one posted since (with its wr_id,
    // where the completion may also be a send's).
    if (!matched && w.recv && !q.rq.empty() && (!w.send || q.rq.front().wr_id == w.wr_id)) {
      DropDests(q.rq.front());
      q.rq.pop_front();
      AdjustPending(q.rcq, -1);
      matched = true;
    }
    if (!matched && --w.ttl > 0) e.at[kept++] = w;
  }
  e.n = kept;
}

void State::MatchEarly(SrqState& srq) {
  // An SRQ's receives complete in any order: by wr_id (Retire's kSrq).
  EarlyWcs& e = srq.early;
  auto gone = [this](OutstandingWr& w) { DropDests(w); };
  uint8_t kept = 0;
  for (uint8_t k = 0; k < e.n; ++k) {
    EarlyWc w = e.at[k];
    if (!srq.rq.Retire(w.wr_id, gone) && --w.ttl > 0) e.at[kept++] = w;
  }
  e.n = kept;
}

}  // namespace rdmasan::checkers
