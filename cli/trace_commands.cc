// `rdmasan replay` and `rdmasan trace dump|stats|decisions|export`: the
// offline side of traces.
//
// Decisions of the harness (kDecision events: injected faults, completion
// scheduling) are numbered in seq order from 1, as the checkers number
// them, so "decision #3" in a finding, in `trace dump` and in `replay` is
// the same one; `trace decisions` writes them as a decision log that
// `rdmasan run --schedule=FILE` re-applies.
//
// replay feeds a recorded trace to a fresh checkers engine and reports its
// findings through the same reporter as a live run, with the stacks
// symbolized offline from the trace's module map, so the check ids, stacks
// and SUMMARY lines are the live run's; it exits like a live run.  A
// truncated trace (killed process) replays its valid prefix with a warning;
// a damaged events chunk (its checksum fails) stops the replay where it is
// reached, with the error that refuses the trace elsewhere (exit 3).
// May not: run the program, or need RDMA hardware or the recorded binary's
// process (only its files, for symbols).
#include <infiniband/verbs.h>

#include <algorithm>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkers/engine.h"
#include "cli/cli.h"
#include "core/decision.h"
#include "core/options.h"
#include "core/report.h"
#include "core/terminal.h"
#include "traces/trace.h"

namespace rdmasan::cli {
namespace {

constexpr int kExitUsage = 2;
constexpr int kExitBadTrace = 3;

std::unique_ptr<traces::TraceReader> OpenTrace(const char* path,
                                               const traces::TraceReader::Options& options = {}) {
  auto r = traces::TraceReader::Open(path, options);
  if (!r.ok()) {
    std::fprintf(stderr, "rdmasan: %s\n", std::string(r.status().message()).c_str());  // names the file
    return nullptr;
  }
  return std::move(*r);
}

// The recorded run's options (checks, suppressions, report format...) so
// the replay judges as the live run did; then RDMASAN_OPTIONS and the
// command line, which win.
core::Options OptionsFrom(const CommandLine& cl, const traces::TraceHeader& h) {
  core::Options opts;
  for (const auto& [k, v] : h.properties)
    if (k == "RDMASAN_OPTIONS") core::ParseOptions(v, &opts).IgnoreError();
  if (const char* env = std::getenv("RDMASAN_OPTIONS")) core::ParseOptions(env, &opts).IgnoreError();
  for (const auto& item : cl.options) core::ParseOptions(item, &opts).IgnoreError();
  opts.trace.clear();
  return opts;
}

std::string Hex(uint64_t v) { return absl::StrFormat("0x%x", v); }

// "decision #3: wc.error RETRY_EXC_ERR on QP 0x5 wr_id=0x12 (obj 3, hit 2)"
std::string DecisionLine(const core::Event& e, uint64_t number) {
  return absl::StrFormat("decision #%d: %s (obj %d, hit %d)", number, core::DescribeDecisionEvent(e), e.obj,
                         e.length);
}

// One line per event: greppable key=value fields.
std::string DumpLine(const core::Event& e) {
  std::string out = absl::StrFormat("%d tid=%d %s", e.seq, e.tid, core::EventKindName(e.kind));
  auto field = [&](const char* name, uint64_t v, bool hex = false) {
    if (v) absl::StrAppend(&out, " ", name, "=", hex ? Hex(v) : absl::StrCat(v));
  };
  field("obj", e.obj);
  field("parent", e.parent);
  field("send_cq", e.send_cq);
  field("recv_cq", e.recv_cq);
  field("srq", e.srq);
  field("channel", e.channel);
  if (e.ret) absl::StrAppend(&out, " ret=", e.ret);
  if (e.err) absl::StrAppend(&out, " err=", e.err);
  field("addr", e.addr, true);
  field("len", e.length);
  field("lkey", e.lkey, true);
  field("rkey", e.rkey, true);
  field("access", e.access, true);
  field("qpn", e.qp_num, true);
  field("qp_type", e.qp_type);
  field("cqe", static_cast<uint64_t>(std::max(0, e.cqe)));
  if (e.caps.max_send_wr || e.caps.max_recv_wr)
    absl::StrAppend(&out, absl::StrFormat(" caps=%d/%d/%d/%d/%d", e.caps.max_send_wr, e.caps.max_recv_wr,
                                          e.caps.max_send_sge, e.caps.max_recv_sge, e.caps.max_inline_data));
  field("attr_mask", e.attr_mask, true);
  field("state", e.qp_state);
  field("count", e.count);
  if (e.bad_index != UINT32_MAX) absl::StrAppend(&out, " bad_index=", e.bad_index);
  for (const auto& w : e.send_wrs) {
    absl::StrAppend(&out, absl::StrFormat(" [wr_id=0x%x op=%d flags=0x%x", w.wr_id, w.opcode, w.send_flags));
    if (e.kind == core::EventKind::kPostSrqOps)  // an ibv_ops_wr (core/event.h)
      absl::StrAppend(&out, absl::StrFormat(" handle=%d unexpected_cnt=%d", w.imm_data, w.rkey),
                      w.opcode == IBV_WR_TAG_ADD ? absl::StrFormat(" tag=0x%x mask=0x%x recv_wr_id=0x%x",
                                                                   w.compare_add, w.swap, w.remote_addr)
                                                 : "");
    else if (w.opcode == IBV_WR_BIND_MW)
      absl::StrAppend(&out, absl::StrFormat(" mw=%d mr=%d bind=0x%x+%d access=0x%x rkey=0x%x", w.bind.mw,
                                            w.bind.mr, w.bind.addr, w.bind.length, w.bind.access, w.rkey));
    else if (w.opcode == IBV_WR_LOCAL_INV || w.opcode == IBV_WR_SEND_WITH_INV)
      absl::StrAppend(&out, absl::StrFormat(" invalidate_rkey=0x%x", w.imm_data));
    else if (w.rkey)
      absl::StrAppend(&out, absl::StrFormat(" raddr=0x%x rkey=0x%x", w.remote_addr, w.rkey));
    for (const auto& g : w.sges)
      absl::StrAppend(&out, absl::StrFormat(" sge=0x%x+%d/0x%x", g.addr, g.length, g.lkey));
    absl::StrAppend(&out, "]");
  }
  for (const auto& w : e.recv_wrs) {
    absl::StrAppend(&out, absl::StrFormat(" [wr_id=0x%x", w.wr_id));
    for (const auto& g : w.sges)
      absl::StrAppend(&out, absl::StrFormat(" sge=0x%x+%d/0x%x", g.addr, g.length, g.lkey));
    absl::StrAppend(&out, "]");
  }
  for (const auto& c : e.wcs)
    absl::StrAppend(&out, absl::StrFormat(" {wr_id=0x%x status=%d op=%d qpn=0x%x len=%d}", c.wr_id, c.status,
                                          c.opcode, c.qp_num, c.byte_len));
  field("stack", e.stack);
  if (!e.text.empty()) absl::StrAppend(&out, " text=\"", absl::CEscape(e.text), "\"");
  return out;
}

// Feeds every event of `r` to `fn`.  Returns 0, or kExitBadTrace after
// saying why the trace cannot be read further; a truncated trace (a killed
// writer) is read to its last whole chunk with a warning.
template <typename Fn>
int ForEachEvent(traces::TraceReader& r, Fn fn) {
  core::Event e;
  for (;;) {
    auto more = r.Next(&e);
    if (!more.ok()) {
      std::fprintf(stderr, "rdmasan: %s\n", std::string(more.status().message()).c_str());
      return kExitBadTrace;
    }
    if (!*more) break;
    fn(e);
  }
  if (r.truncated()) std::fprintf(stderr, "rdmasan: warning: %s\n", r.warning().c_str());
  return 0;
}

int Dump(traces::TraceReader& r) {
  uint64_t decisions = 0;
  return ForEachEvent(r, [&](const core::Event& e) {
    if (e.kind == core::EventKind::kDecision) {
      std::printf("%llu tid=%u %s\n", static_cast<unsigned long long>(e.seq), e.tid,
                  DecisionLine(e, ++decisions).c_str());
    } else {
      std::printf("%s\n", DumpLine(e).c_str());
    }
  });
}

// The recorded run's options, as it was started (only the trace's own
// record of RDMASAN_OPTIONS).
core::Options RecordedOptions(const traces::TraceHeader& h) {
  core::Options opts;
  for (const auto& [k, v] : h.properties)
    if (k == "RDMASAN_OPTIONS") core::ParseOptions(v, &opts).IgnoreError();
  return opts;
}

// The trace's decision log (core/decision.h's text format): the header
// naming the recorded reorder=, faults= and chaos=, then each decision in seq
// order.  `rdmasan run --schedule=FILE -- prog` re-applies it.
int Decisions(traces::TraceReader& r, const char* path) {
  const core::Options o = RecordedOptions(r.header());
  std::string out = core::FormatLogHeader(o.reorder, o.faults,
                                          absl::StrFormat("from trace %s of pid %d, seed %d", path,
                                                          static_cast<long long>(r.header().pid), o.seed),
                                          o.chaos);
  uint64_t decisions = 0;
  std::string bad;
  const int status = ForEachEvent(r, [&](const core::Event& e) {
    if (e.kind != core::EventKind::kDecision || !bad.empty()) return;
    ++decisions;
    core::Decision d;
    d.key.point = static_cast<core::Point>(e.count);
    d.key.obj = e.obj;
    d.key.hit = e.length;
    d.outcome = e.addr;
    // A log names only valid, non-zero decisions (ParseDecisionLog refuses
    // anything else): a trace that holds another is damaged.
    if (e.count >= static_cast<uint32_t>(core::kNumPoints) || d.key.hit == 0 || d.outcome == 0) {
      bad = absl::StrFormat("decision event at seq %d is not a valid decision (point %d, hit %d, outcome %d)",
                            e.seq, e.count, d.key.hit, d.outcome);
      return;
    }
    d.note = DecisionLine(e, decisions);
    absl::StrAppend(&out, core::FormatDecision(d));
  });
  if (status != 0) return status;
  if (!bad.empty()) {
    std::fprintf(stderr, "rdmasan: %s: %s\n", path, bad.c_str());
    return kExitBadTrace;
  }
  std::fputs(out.c_str(), stdout);
  return 0;
}

// Counts per verb and per QP, peak occupancy of the SQ, RQ and CQ books as
// the checkers' state reports them, error completions.
int Stats(traces::TraceReader& r) {
  checkers::Engine engine(/*assign_seq=*/false, core::CheckSet::None(),
                          /*one_thread=*/true);  // the books only
  std::map<std::string, uint64_t> per_kind;
  std::map<core::ObjId, uint64_t> posts_per_qp;
  std::map<core::ObjId, size_t> peak_sq, peak_rq;
  std::map<core::ObjId, uint64_t> peak_cq;
  std::map<uint32_t, uint64_t> per_point;  // decisions per core::Point
  uint64_t events = 0, errors = 0, flushes = 0, failed_calls = 0;
  const int status = ForEachEvent(r, [&](const core::Event& e) {
    ++events;
    ++per_kind[core::EventKindName(e.kind)];
    if (e.ret != 0) ++failed_calls;
    if (e.kind == core::EventKind::kPostSend || e.kind == core::EventKind::kPostRecv) ++posts_per_qp[e.obj];
    // A decision's wcs[0] names the completion it made an error, which the
    // poll that returns it counts.
    if (e.kind == core::EventKind::kDecision) ++per_point[e.count];
    if (e.kind != core::EventKind::kDecision)
      for (const auto& c : e.wcs) {
        if (c.status == IBV_WC_WR_FLUSH_ERR)
          ++flushes;
        else if (c.status != IBV_WC_SUCCESS)
          ++errors;
      }
    engine.OnEvent(e);
    engine.TakeRetired();
    if (e.kind == core::EventKind::kPostSend || e.kind == core::EventKind::kPostRecv) {
      if (const auto* q = engine.state().Qp(e.obj)) {
        peak_sq[e.obj] = std::max(peak_sq[e.obj], q->sq.size());
        peak_rq[e.obj] = std::max(peak_rq[e.obj], q->rq.size());
        for (core::ObjId cq : {q->send_cq, q->recv_cq})
          peak_cq[cq] = std::max(peak_cq[cq], engine.state().PendingOn(cq));
      }
    }
  });
  if (status != 0) return status;
  const auto& h = r.header();
  // The header's strings are the trace's: escaped, as `trace dump` does.
  std::printf("trace: %s (pid %lld, format %d.%d, tool %s)\n", core::EscapedControls(h.executable).c_str(),
              static_cast<long long>(h.pid), h.format_major, h.format_minor,
              core::EscapedControls(h.tool_version).c_str());
  std::printf("events: %llu in %zu chunks, %llu bytes (%.1f bytes/event)%s\n",
              static_cast<unsigned long long>(events), r.chunk_count(),
              static_cast<unsigned long long>(r.file_size()),
              events ? static_cast<double>(r.file_size()) / events : 0.0, r.truncated() ? ", truncated" : "");
  std::printf("calls per verb:\n");
  for (const auto& [k, n] : per_kind)
    std::printf("  %-22s %llu\n", k.c_str(), static_cast<unsigned long long>(n));
  std::printf("per QP: posts, peak SQ, peak RQ:\n");
  for (const auto& [qp, n] : posts_per_qp)
    std::printf("  QP 0x%llx  %llu posts  SQ %zu  RQ %zu\n", static_cast<unsigned long long>(qp),
                static_cast<unsigned long long>(n), peak_sq[qp], peak_rq[qp]);
  std::printf("per CQ: peak completions pending:\n");
  for (const auto& [cq, n] : peak_cq)
    if (cq)
      std::printf("  CQ 0x%llx  %llu\n", static_cast<unsigned long long>(cq),
                  static_cast<unsigned long long>(n));
  std::printf("errors: %llu error completions, %llu flushed, %llu failed calls\n",
              static_cast<unsigned long long>(errors), static_cast<unsigned long long>(flushes),
              static_cast<unsigned long long>(failed_calls));
  if (!per_point.empty()) {
    std::string line;
    for (const auto& [p, n] : per_point)
      absl::StrAppend(&line, line.empty() ? "" : ", ",
                      p < static_cast<uint32_t>(core::kNumPoints)
                          ? core::PointName(static_cast<core::Point>(p))
                          : absl::StrCat("point ", p),
                      " ", n);
    std::printf("decisions: %s\n", line.c_str());
  }
  return 0;
}

// Chrome trace-event JSON (ui.perfetto.dev and chrome://tracing open it):
// one track per QP with its posts and the completions that retire its WRs,
// counter tracks for each QP's SQ occupancy and each CQ's pending
// completions.  Events carry no clock (the checkers read none), so the time
// axis is the event sequence number: 1 us per verbs call.  Printed as it
// goes, one trace event per line, so a long trace is never held in memory.
class PerfettoExport {
 public:
  using Json = nlohmann::ordered_json;

  explicit PerfettoExport(traces::TraceReader& r)
      : r_(r),
        engine_(/*assign_seq=*/false, core::CheckSet::None(), /*one_thread=*/true),  // the books only
        pid_(r.header().pid ? r.header().pid : 1) {
    for (const auto& [k, v] : r.header().properties)
      if (k == "clock_hz") ticks_per_us_ = std::strtod(v.c_str(), nullptr) / 1e6;
  }

  int Run() {
    PrintHeader();
    const int status = ForEachEvent(r_, [this](const core::Event& e) { OnEvent(e); });
    std::printf("\n]}\n");
    return status;
  }

 private:
  // Executable paths may hold any bytes: invalid UTF-8 becomes U+FFFD
  // rather than an exception.
  static std::string Dump(const Json& j) {
    return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
  }
  // Microseconds, to the nanosecond.
  static double Us(double ts) { return std::round(ts * 1000) / 1000; }

  void PrintHeader() {
    const std::string& exe = r_.header().executable;
    Json other;
    other["time_axis"] =
        "microseconds since the first recorded event (traces without times: one verbs call per "
        "microsecond)";
    other["executable"] = exe;
    Json process = Meta("process_name");
    process["args"]["name"] = absl::StrFormat("%s (pid %d)", exe, pid_);
    std::printf("{\"displayTimeUnit\":\"ns\",\"otherData\":%s,\"traceEvents\":[\n%s", Dump(other).c_str(),
                Dump(process).c_str());
  }

  Json Meta(const char* name) const {
    Json m;
    m["ph"] = "M";
    m["name"] = name;
    m["pid"] = pid_;
    return m;
  }

  static void Print(const Json& event) { std::printf(",\n%s", Dump(event).c_str()); }

  void NameTrack(core::ObjId qp, uint32_t qpn) {
    if (!named_.insert(qp).second) return;
    Json m = Meta("thread_name");
    m["tid"] = qp;
    m["args"]["name"] = absl::StrFormat("QP 0x%x (qpn 0x%x)", qp, qpn);
    Print(m);
  }

  // Counters print on change.
  void Counter(const std::string& name, double ts, uint64_t value) {
    auto [it, fresh] = last_.try_emplace(name, value);
    if (!fresh && it->second == value) return;
    it->second = value;
    Json c;
    c["ph"] = "C";
    c["name"] = name;
    c["pid"] = pid_;
    c["ts"] = Us(ts);
    c["args"]["value"] = value;
    Print(c);
  }

  void OnEvent(const core::Event& e) {
    // Recorded times where the trace has them, else the event number.
    if (!t0_ && e.time) t0_ = e.time;
    const double ts = e.time && t0_ && ticks_per_us_ > 0 ? static_cast<double>(e.time - t0_) / ticks_per_us_
                                                         : static_cast<double>(e.seq);
    if (e.kind == core::EventKind::kPostSend || e.kind == core::EventKind::kPostRecv) Post(e, ts);
    for (const auto& c : e.wcs) Completion(c, ts);
    engine_.OnEvent(e);
    engine_.TakeRetired();
    if (e.kind == core::EventKind::kPostSend || e.kind == core::EventKind::kPostRecv ||
        e.kind == core::EventKind::kPollCq)
      Occupancy(e, ts);
  }

  void Post(const core::Event& e, double ts) {
    if (const checkers::QpState* q = engine_.state().Qp(e.obj)) NameTrack(e.obj, q->qpn);
    const bool send = e.kind == core::EventKind::kPostSend;
    const size_t n = send ? e.send_wrs.size() : e.recv_wrs.size();
    const uint64_t first = send ? (n ? e.send_wrs[0].wr_id : 0) : (n ? e.recv_wrs[0].wr_id : 0);
    Json x;
    x["ph"] = "X";
    x["name"] = send ? (n && e.send_wrs[0].opcode <= IBV_WR_ATOMIC_FETCH_AND_ADD
                            ? checkers::WrOpcodeName(e.send_wrs[0].opcode)
                            : "post_send")
                     : "post_recv";
    x["cat"] = "post";
    x["pid"] = pid_;
    x["tid"] = e.obj;
    x["ts"] = Us(ts);
    x["dur"] = 0.1;
    Json& args = x["args"];
    args["wrs"] = n;
    args["first_wr_id"] = absl::StrFormat("0x%x", first);
    args["ret"] = e.ret;
    if (send && n && (e.send_wrs[0].send_flags & IBV_SEND_SIGNALED)) args["signaled"] = true;
    Print(x);
  }

  void Completion(const core::Completion& c, double ts) {
    const checkers::State& st = engine_.state();
    core::ObjId qp = st.QpByNum(c.qp_num);
    if (!qp) return;
    if (const checkers::QpState* q = st.Qp(qp)) NameTrack(qp, q->qpn);
    Json i;
    i["ph"] = "i";
    i["s"] = "t";
    i["name"] = c.status == IBV_WC_SUCCESS        ? "completion"
                : c.status == IBV_WC_WR_FLUSH_ERR ? "flush"
                                                  : "error";
    i["cat"] = "completion";
    i["pid"] = pid_;
    i["tid"] = qp;
    i["ts"] = Us(ts);
    i["args"]["wr_id"] = absl::StrFormat("0x%x", c.wr_id);
    i["args"]["status"] = c.status;
    i["args"]["opcode"] = c.opcode;
    Print(i);
  }

  // Occupancy after the event.
  void Occupancy(const core::Event& e, double ts) {
    const checkers::State& st = engine_.state();
    absl::flat_hash_set<core::ObjId> qps, cqs;
    if (e.kind == core::EventKind::kPollCq) {
      cqs.insert(e.obj);
      for (const auto& c : e.wcs)
        if (core::ObjId qp = st.QpByNum(c.qp_num)) qps.insert(qp);
    } else if (const checkers::QpState* q = st.Qp(e.obj)) {
      qps.insert(e.obj);
      cqs.insert(e.kind == core::EventKind::kPostSend ? q->send_cq : q->recv_cq);
    }
    for (core::ObjId qp : qps)
      if (const checkers::QpState* q = st.Qp(qp)) {
        Counter(absl::StrFormat("SQ occupancy QP 0x%x", qp), ts, q->sq.size());
        if (!q->srq) Counter(absl::StrFormat("RQ occupancy QP 0x%x", qp), ts, q->rq.size());
      }
    for (core::ObjId cq : cqs)
      if (cq) Counter(absl::StrFormat("CQ 0x%x pending", cq), ts, st.PendingOn(cq));
  }

  traces::TraceReader& r_;
  checkers::Engine engine_;
  const long long pid_;
  uint64_t t0_ = 0;
  double ticks_per_us_ = 0;
  absl::flat_hash_set<core::ObjId> named_;
  absl::flat_hash_map<std::string, uint64_t> last_;
};

int ExportPerfetto(traces::TraceReader& r) { return PerfettoExport(r).Run(); }

// Frames as the live run printed them: the trace symbolizes by module
// offset; the recorded load bias gives back the process's address.
// Calls fn(event) for every event of `r` in order, on this thread, while
// another thread decodes the next batch.  Stops at the end or at the first
// malformed record (its error in *error, after the events before it).
// A batch is small enough to stay in the caches between its decoding and
// its checking (512 events of ~600 bytes); its Events are decoded into
// again each round, so their WR and completion slots are reused.
// A thread that ran out of batches sleeps until half of them are ready for
// it, not one: each wake-up is a futex call and a context switch on both
// sides (the two threads run at about the same pace, so waking at one
// batch woke the faster thread for every batch).  Eight batches, so the
// faster thread sleeps once per four of them (2 MB ahead at most).
constexpr size_t kDecodeBatch = 512, kDecodeBatches = 8, kWakeAt = kDecodeBatches / 2;

template <typename Fn>
void DecodeAhead(traces::TraceReader* r, absl::Status* error, Fn fn) {
  struct Batch {
    std::vector<core::Event> events = std::vector<core::Event>(kDecodeBatch);
    size_t n = 0;
    bool last = false;
    absl::Status error;
  };
  std::vector<Batch> batches(kDecodeBatches);
  std::mutex mu;
  struct Queue {
    std::deque<Batch*> batches;
    std::condition_variable cv;
    bool waiting = false;  // its taker sleeps until kWakeAt (or the last) are there
    bool closed = false;   // the last batch was given
  } free_batches, full_batches;
  for (Batch& b : batches) free_batches.batches.push_back(&b);
  // Batches go round: free -> decoder -> full -> checker -> free.
  auto take = [&](Queue& q) {
    std::unique_lock<std::mutex> l(mu);
    if (q.batches.empty()) {
      q.waiting = true;
      q.cv.wait(l, [&] { return q.batches.size() >= kWakeAt || (q.closed && !q.batches.empty()); });
      q.waiting = false;
    }
    Batch* b = q.batches.front();
    q.batches.pop_front();
    return b;
  };
  auto give = [&](Queue& q, Batch* b) {
    bool wake;
    {
      std::lock_guard<std::mutex> l(mu);
      q.batches.push_back(b);
      q.closed = b->last;
      wake = q.waiting && (q.batches.size() >= kWakeAt || q.closed);
    }
    if (wake) q.cv.notify_one();
  };
  std::thread decoder([&] {
    for (bool last = false; !last;) {
      Batch* b = take(free_batches);
      b->error = absl::OkStatus();
      b->n = r->NextBatch(b->events.data(), kDecodeBatch, &b->error);
      b->last = b->n < kDecodeBatch;
      last = b->last;
      give(full_batches, b);
    }
  });
  for (bool last = false; !last;) {
    Batch* b = take(full_batches);
    for (size_t i = 0; i < b->n; ++i) fn(b->events[i]);
    last = b->last;
    if (last) *error = b->error;
    give(free_batches, b);
  }
  decoder.join();
}

// Symbolizing opens the modules' files: once per stack.
std::vector<core::Frame> LiveFrames(const traces::TraceReader& r, core::StackId id) {
  static auto* cache = new absl::flat_hash_map<core::StackId, std::vector<core::Frame>>();
  if (auto it = cache->find(id); it != cache->end()) return it->second;
  std::vector<core::Frame> frames = r.Symbolize(id);
  for (auto& f : frames)
    for (const auto& m : r.header().modules)
      if (m.path == f.module) {
        f.pc = f.module_offset + m.bias;
        break;
      }
  (*cache)[id] = frames;
  return frames;
}

}  // namespace

namespace {

// A trace of a process tree (traces/tree.cc) names the others beside it,
// so a replay of PATH says where the children's and exec'd images' went.
void NoteTraceSet(const std::string& path) {
  std::vector<std::string> others = traces::TraceSetMembers(path);
  if (others.empty()) return;
  std::fprintf(stderr,
               "==rdmasan: note: %s has %zu more trace%s in its process tree (forked children, exec'd "
               "images): %s; `rdmasan replay` with several traces replays each\n",
               path.c_str(), others.size(), others.size() == 1 ? "" : "s",
               absl::StrJoin(others, " ").c_str());
}

int ReplayOne(const CommandLine& cl, const std::string& path, bool announce) {
  // The events chunks' checksums are checked by the decoding thread as it
  // reaches each chunk (in the cache then), not by this one first: a
  // damaged chunk stops the replay there with the error Open would give.
  std::unique_ptr<traces::TraceReader> r =
      OpenTrace(path.c_str(), traces::TraceReader::Options{.check_events_on_read = true});
  if (!r) return kExitBadTrace;
  if (announce)
    std::fprintf(stderr, "==rdmasan: replaying %s (pid %lld)\n", path.c_str(),
                 static_cast<long long>(r->header().pid));
  core::Options opts = OptionsFrom(cl, r->header());
  core::Reporter reporter(opts);
  // Options recorded on another machine (a suppressions file left there)
  // must not stop the replay: say what does not apply, and go on.
  for (const std::string& e : reporter.config_errors()) reporter.Message(e);
  reporter.SetReportPid(static_cast<int>(r->header().pid));
  checkers::Engine engine(/*assign_seq=*/false, reporter.checks(), /*one_thread=*/true);
  // Decoding and checking overlap: a thread decodes batches of events
  // while this one checks the previous batch.  The reader's stacks and
  // module map are complete once it is open, so symbolizing findings here
  // reads nothing the decoding thread changes.
  absl::Status error;
  uint64_t decisions = 0;
  std::vector<core::Finding> findings;
  DecodeAhead(r.get(), &error, [&](core::Event& e) {
    // The decisions, where the findings go, numbered as the findings name
    // them: a finding "after injected ... (decision #3)" follows its line.
    // (JSON lines stay JSON: there the findings' "context" names them.)
    if (e.kind == core::EventKind::kDecision && ++decisions && opts.report_format != "json")
      reporter.Message(DecisionLine(e, decisions));
    // A post the live run could have handed the engine as a compact record
    // goes that way here too: the same checks and books when it is quiet
    // (no check can speak), without the event's dispatch and copy;
    // otherwise the engine declines, changing nothing, and gets the event.
    if (checkers::OneRecv one; checkers::OneRecvOf(e, &one) && engine.PostOneRecv(one)) return;
    if (checkers::OneSend one; checkers::OneSendOf(e, &one) && engine.PostOneSend(one)) return;
    // No retired WRs asked for: the trace carries the retirement events
    // themselves.  (The engine keeps the event's seq: it numbers none.)
    findings.clear();
    engine.OnEvent(e, &findings, nullptr);
    for (const core::Finding& f : findings) {
      std::vector<std::vector<core::Frame>> related;
      for (const auto& rs : f.related) related.push_back(LiveFrames(*r, rs.stack));
      reporter.ReportSymbolized(f, LiveFrames(*r, f.stack), std::move(related));
    }
  });
  if (!error.ok()) {
    std::fprintf(stderr, "rdmasan: %s: %s\n", path.c_str(), std::string(error.message()).c_str());
    reporter.Finish();
    return kExitBadTrace;
  }
  if (r->truncated() && r->events_read() == 0) {
    // A cut trace with no events is no evidence of a clean run.
    std::fprintf(stderr, "rdmasan: %s: %s; it holds no events, so there is nothing to replay\n", path.c_str(),
                 r->warning().c_str());
    reporter.Finish();
    return kExitBadTrace;
  }
  if (r->truncated())
    std::fprintf(stderr, "==%lld==rdmasan: warning: %s: %s; replayed the first %llu events\n",
                 static_cast<long long>(r->header().pid), path.c_str(), r->warning().c_str(),
                 static_cast<unsigned long long>(r->events_read()));
  return reporter.Finish();
}

}  // namespace

// One trace: that process image's run, with a note naming the rest of its
// process tree.  Several: each in turn, each with books of its own (one
// process image each); the exit status is the first non-zero one.
int Replay(int argc, char** argv) {
  CommandLine cl;
  if (absl::Status s = ParseCommandLine(argc, argv, &cl); !s.ok()) return UsageError(s);
  if (cl.rest.empty()) {
    std::fprintf(stderr, "usage: rdmasan replay [--name=value ...] TRACE [TRACE ...]\n");
    return kExitUsage;
  }
  if (cl.rest.size() == 1) {
    NoteTraceSet(cl.rest[0]);
    return ReplayOne(cl, cl.rest[0], false);
  }
  int status = 0;
  for (const char* path : cl.rest) {
    const int one = ReplayOne(cl, path, true);
    if (!status) status = one;
  }
  return status;
}

int Trace(int argc, char** argv) {
  const std::string sub = argc > 0 ? argv[0] : "";
  const bool is_export = sub == "export" && argc == 3 && std::string(argv[1]) == "--format=perfetto";
  // dump and stats take the traces of a process tree at once.
  const bool many = (sub == "dump" || sub == "stats") && argc >= 2;
  if (!is_export && !many && (argc != 2 || sub != "decisions")) {
    std::fprintf(stderr,
                 "usage: rdmasan trace dump TRACE... | rdmasan trace stats TRACE... |\n"
                 "       rdmasan trace decisions TRACE > schedule.log |\n"
                 "       rdmasan trace export --format=perfetto TRACE > trace.json\n");
    return kExitUsage;
  }
  if (!many) {
    std::unique_ptr<traces::TraceReader> r = OpenTrace(argv[argc - 1]);
    if (!r) return kExitBadTrace;
    if (is_export) return ExportPerfetto(*r);
    return Decisions(*r, argv[argc - 1]);
  }
  int status = 0;
  for (int i = 1; i < argc; ++i) {
    if (argc > 2) std::printf("%s== %s ==\n", i > 1 ? "\n" : "", argv[i]);
    std::unique_ptr<traces::TraceReader> r = OpenTrace(argv[i]);
    const int one = !r ? kExitBadTrace : sub == "dump" ? Dump(*r) : Stats(*r);
    if (!status) status = one;
  }
  if (argc == 2) NoteTraceSet(argv[1]);
  return status;
}

}  // namespace rdmasan::cli
