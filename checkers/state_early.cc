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
// empty RQ.  After each later post's books, MatchEarly retires what the
// kept completions name, as Retire would have: a send's WR with its wr_id
// (signaled, for a successful completion) and the unsignaled WRs before
// it, or the RQ's next WR.  A kept completion that no post matches within
// EarlyWcs::kPosts posts to its QP is dropped (it was not a race: a
// completion the books never had a WR for), and at most EarlyWcs::kMax are
// kept, the oldest dropped first.
//
// May not: change anything but the QP's own books (the post's lock domain
// holds them); hand the WRs it retires to the payload re-hash (the post
// has no list for them: a buffer rewritten under such a WR goes unseen);
// keep an SRQ's, an XRC receive's or an unclassified error completion (on a
// CQ both queues share, both empty).  The same events in the same order
// keep the same books: a replay agrees with the live run.
#include "checkers/state.h"

namespace rdmasan::checkers {

void State::NoteEarly(QpState& q, const core::Completion& wc, bool send, bool recv) {
  EarlyWcs& e = q.early;
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

}  // namespace rdmasan::checkers
