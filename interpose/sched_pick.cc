// interpose/sched_pick: what the scheduler's picks among several buffered
// completions read (sched.cc's PickAmong): the eligible completions of a
// CQ's buffer, PCT's priorities and change points, a stream's side in
// words.  Split from sched.cc at its picks.
//
// May not: be called but by sched.cc, under the CQ's lock (Eligible) or
// the PCT state's (PctInit, PctPriority).
#include <algorithm>
#include <utility>
#include <vector>

#include "core/decision.h"
#include "core/options.h"
#include "interpose/sched_state.h"

namespace rdmasan::interpose::sched::internal {

namespace {
constexpr uint64_t kTagPctPriority = 0x70637470;
constexpr uint64_t kTagPctChange = 0x70637463;
}  // namespace

void PctInit(Global& g, Pct& p) {
  if (p.init) return;
  p.init = true;
  const core::Options& o = core::GlobalOptions();
  p.depth = std::clamp(o.pct_depth, 1, 64);
  const uint64_t k = static_cast<uint64_t>(std::max(o.pct_steps, 1));
  for (int i = 1; i < p.depth; ++i)
    p.change.push_back(1 + g.decider->source().RunDraw(kTagPctChange, i, 0, k));
}

int64_t PctPriority(Global& g, Pct& p, uint64_t ident) {
  auto it = p.prio.find(ident);
  if (it != p.prio.end()) return it->second;
  const int64_t v = p.depth + static_cast<int64_t>(
                                  g.decider->source().RunDraw(kTagPctPriority, ident, 0, uint64_t{1} << 40));
  p.prio[ident] = v;
  return v;
}

// The eligible entries of the buffer, oldest first (indexes).
void Eligible(const Global& g, const CqState& st, std::vector<uint32_t>* out) {
  out->clear();
  // Small sets: the streams and QPs seen so far in the buffer.
  thread_local std::vector<uint64_t> streams;
  thread_local std::vector<std::pair<uint32_t, bool>> qps;  // qp_num, a barrier seen
  streams.clear();
  qps.clear();
  for (uint32_t i = 0; i < st.buf.size(); ++i) {
    const Entry& e = st.buf[i];
    bool ok = std::find(streams.begin(), streams.end(), e.stream) == streams.end();
    auto q = std::find_if(qps.begin(), qps.end(), [&](const auto& x) { return x.first == e.wc.qp_num; });
    if (q != qps.end() && (q->second || e.barrier)) ok = false;
    if (e.age < e.hold && !IsForced(g, st, e)) ok = false;  // held back: still blocks its stream
    if (ok) out->push_back(i);
    if (std::find(streams.begin(), streams.end(), e.stream) == streams.end()) streams.push_back(e.stream);
    if (q == qps.end())
      qps.emplace_back(e.wc.qp_num, e.barrier);
    else
      q->second |= e.barrier;
  }
}

const char* Side(const Entry& e) {
  switch (e.stream >> 62) {
    case 0:
      return "send";
    case 1:
      return "recv";
    case 2:
      return "srq";
    default:
      return "error";
  }
}

}  // namespace rdmasan::interpose::sched::internal
