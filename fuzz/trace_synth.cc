// trace_synth: writes synthetic traces.
//   trace_synth corpus DIR    the fuzzer's seed corpus: small valid traces
//                             (one and several threads, every event kind,
//                             decisions,
//                             stacks) and damaged ones (truncated, flipped,
//                             bad magic, newer major version).  The
//                             corpus also keeps pingpong_v1_0.trace, as
//                             the format 1.0 writer wrote it (not
//                             regenerated): 1.1 readers must read it.
//   trace_synth bench N PATH  writes N post/poll events to PATH, then times
//                             reading them back (events/s)
//   trace_synth read PATH [R] times reading PATH with the reader alone, R
//                             rounds (default 1), and prints the best
// Not a test: a tool for the corpus and for the replay-speed figure.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "core/event.h"
#include "core/stack.h"
#include "traces/trace.h"

namespace {

using rdmasan::core::Event;
using rdmasan::core::EventKind;
namespace traces = rdmasan::traces;

traces::TraceHeader FixedHeader() {
  traces::TraceHeader h;  // deterministic: no real process data
  h.tool_version = "0.1.0";
  h.pid = 4242;
  h.executable = "/usr/bin/ibv_rc_pingpong";
  h.argc = 2;
  h.argv = {"ibv_rc_pingpong", "-g0"};
  h.start_time_ns = 1700000000000000000;
  h.device_attrs = {{"name", "softnic0"}, {"max_qp_wr", "4096"}};
  h.properties = {{"options", "trace=x"}};
  h.modules = {{"/usr/bin/ibv_rc_pingpong", 0x555555554000, 0x555555554000, 0x555555560000, "abcd"}};
  return h;
}

rdmasan::core::StackId Stack(uintptr_t base, int n) {
  uintptr_t pcs[8];
  for (int i = 0; i < n; ++i) pcs[i] = base + 0x20 * i + 5;
  return rdmasan::core::InternStack(pcs, n);
}

// The next event of one synthetic thread: kind, sequence number, thread,
// object and stack.  (The corpus in fuzz/corpus depends on every field of
// every event below: change them and regenerate it.)
Event& Next(std::vector<Event>* out, EventKind kind, uint64_t* seq, uint32_t tid, uint64_t obj,
            rdmasan::core::StackId stack) {
  Event& e = out->emplace_back();
  e.kind = kind;
  e.seq = (*seq)++;
  e.tid = tid;
  e.obj = obj;
  e.stack = stack;
  return e;
}

// One ping-pong iteration's events.
void PingPong(std::vector<Event>* out, uint64_t* seq, uint64_t wr, uint32_t tid) {
  const auto post = Stack(0x555555555000, 4), poll = Stack(0x555555556000, 3);
  Event& r = Next(out, EventKind::kPostRecv, seq, tid, 7, post);
  rdmasan::core::RecvWr& posted = r.recv_wrs.emplace_back();
  posted.wr_id = wr;
  posted.num_sge = 1;
  posted.sges.push_back({0x7f0000200000 + (wr % 16) * 4096, 4096, 0x1234});
  rdmasan::core::SendWr w;
  w.wr_id = wr;
  w.opcode = 2;
  w.send_flags = 2;
  w.num_sge = 1;
  w.sges = {{0x7f0000100000 + (wr % 16) * 4096, 64, 0x5678, wr * 0x9e3779b97f4a7c15ull, 0}};
  Next(out, EventKind::kPostSend, seq, tid, 7, post).send_wrs.push_back(w);
  Event& p = Next(out, EventKind::kPollCq, seq, tid, 3, poll);
  p.count = 16;
  p.ret = 2;
  p.wcs = {{wr, 0, 0, 0x11, 64, 0}, {wr, 0, 128, 0x11, 64, 0}};
  w.posted_at = post;
  w.sges[0].hash_now = w.sges[0].hash;
  Next(out, EventKind::kRetire, seq, tid, 7, rdmasan::core::StackId{}).send_wrs.push_back(w);
}

bool Write(const std::string& path, const std::vector<Event>& events, bool close = true) {
  auto w = traces::TraceWriter::Open(path, FixedHeader());
  if (!w.ok()) {
    std::fprintf(stderr, "%s\n", std::string(w.status().message()).c_str());
    return false;
  }
  for (const Event& e : events) (*w)->Append(e);
  if (!close) {
    (void)(*w)->Flush();
    (*w)->FlushFromSignalHandler();
    std::string bytes;
    {
      std::ifstream f(path + ".incomplete", std::ios::binary);
      std::stringstream ss;
      ss << f.rdbuf();
      bytes = ss.str();
    }
    (void)(*w)->Close();
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
    return true;
  }
  return (*w)->Close().ok();
}

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void Spit(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

int Corpus(const std::string& dir) {
  uint64_t seq = 1;
  std::vector<Event> pp;
  for (uint64_t wr = 1; wr <= 20; ++wr) PingPong(&pp, &seq, wr, 100);
  if (!Write(dir + "/pingpong.trace", pp)) return 1;
  // Every kind, with odd values.
  std::vector<Event> all;
  for (int k = 0; k < static_cast<int>(EventKind::kCount); ++k) {
    Event e;
    e.kind = static_cast<EventKind>(k);
    e.seq = 100 + k;
    e.tid = 9;
    e.ret = -1;
    e.err = 12;
    e.stack = Stack(0x555555557000 + k * 0x100, 1 + k % 5);
    e.obj = k + 1;
    e.parent = 1;
    e.addr = 0x7f0000000000 + k;
    e.length = 1 << k % 20;
    e.access = 7;
    e.lkey = e.rkey = 0x100 + k;
    e.qp_type = 2;
    e.qp_num = 0x11;
    e.caps = {64, 64, 2, 2, 32};
    e.cqe = 128;
    e.attr_mask = 0x1fff;
    e.qp_state = 3;
    e.count = 4;
    e.bad_index = k % 3 == 0 ? 0 : UINT32_MAX;
    e.wcs = {{5, 12, 0, 0x11, 0, 0x81}};
    all.push_back(e);
  }
  if (!Write(dir + "/every_kind.trace", all)) return 1;
  // A run with injected faults and scheduling decisions (format 1.1's
  // length-prefixed decision records) among its post/poll events.
  {
    std::vector<Event> dec;
    uint64_t s = 1;
    for (uint64_t wr = 1; wr <= 8; ++wr) {
      PingPong(&dec, &s, wr, 100);
      Event& d = Next(&dec, EventKind::kDecision, &s, 100, 3, rdmasan::core::StackId{});
      d.count = wr % 2 ? 10 : 15;  // wc.error, sched.pick
      d.length = wr;
      d.addr = wr % 2 ? 12 : 2;
      d.qp_num = 0x11;
      if (wr % 2) d.wcs = {{wr, 12, 0, 0x11, 0, 0}};
    }
    if (!Write(dir + "/decisions.trace", dec)) return 1;
  }
  // Two threads interleaved in seq.
  {
    auto w = traces::TraceWriter::Open(dir + "/two_threads.trace", FixedHeader());
    if (!w.ok()) return 1;
    std::vector<Event> a, b;
    uint64_t s = 1;
    for (uint64_t wr = 1; wr <= 10; ++wr) PingPong(wr % 2 ? &a : &b, &s, wr, wr % 2 ? 1 : 2);
    std::thread ta([&] {
      for (auto& e : a) (*w)->Append(e);
    });
    std::thread tb([&] {
      for (auto& e : b) (*w)->Append(e);
    });
    ta.join();
    tb.join();
    if (!(*w)->Close().ok()) return 1;
  }
  // A killed writer: no end record.
  if (!Write(dir + "/killed.trace", pp, /*close=*/false)) return 1;
  std::string good = Slurp(dir + "/pingpong.trace");
  Spit(dir + "/truncated_chunk.trace", good.substr(0, good.size() * 2 / 3));
  std::string flipped = good;
  flipped[good.size() / 2] ^= 1;
  Spit(dir + "/flipped.trace", flipped);
  std::string magic = good;
  magic[1] = 'x';
  Spit(dir + "/bad_magic.trace", magic);
  std::string newer = good;
  newer[8] = 2;
  Spit(dir + "/newer_major.trace", newer);
  return 0;
}

// Reads PATH with the reader alone (no checkers), `rounds` times; prints
// each round's rate and the best.
int Read(const std::string& path, int rounds) {
  double best = 0;
  for (int round = 0; round < rounds; ++round) {
    auto t0 = std::chrono::steady_clock::now();
    auto r = traces::TraceReader::Open(path);
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", std::string(r.status().message()).c_str());
      return 1;
    }
    // In batches, as `rdmasan replay` reads.
    std::vector<Event> batch(256);
    uint64_t count = 0, check = 0;
    for (;;) {
      absl::Status error;
      const size_t n = (*r)->NextBatch(batch.data(), batch.size(), &error);
      if (!error.ok()) {
        std::fprintf(stderr, "%s\n", std::string(error.message()).c_str());
        return 1;
      }
      for (size_t i = 0; i < n; ++i) check += batch[i].seq + batch[i].wcs.size();
      count += n;
      if (n < batch.size()) break;
    }
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, count / secs / 1e6);
    std::printf("read %llu events in %.3f s: %.1f M events/s (checksum %llu)\n",
                static_cast<unsigned long long>(count), secs, count / secs / 1e6,
                static_cast<unsigned long long>(check));
  }
  if (rounds > 1) std::printf("best of %d: %.1f M events/s\n", rounds, best);
  return 0;
}

int Bench(uint64_t n, const std::string& path) {
  {
    auto w = traces::TraceWriter::Open(path, traces::CurrentProcessHeader());
    if (!w.ok()) return 1;
    std::vector<Event> batch;
    uint64_t seq = 1, wr = 1;
    auto t0 = std::chrono::steady_clock::now();
    uint64_t appended = 0;
    while (appended < n) {
      batch.clear();
      for (int i = 0; i < 256; ++i) PingPong(&batch, &seq, wr++, 7);
      for (const Event& e : batch) {
        if (appended++ >= n) break;
        (*w)->Append(e);
      }
    }
    if (!(*w)->Close().ok()) return 1;
    double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    auto st = (*w)->stats();
    std::printf("wrote %llu events, %llu bytes (%.2f bytes/event) in %.2f s (incl. building events)\n",
                static_cast<unsigned long long>(st.events), static_cast<unsigned long long>(st.bytes),
                static_cast<double>(st.bytes) / st.events, secs);
  }
  return Read(path, 1);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 3 && std::strcmp(argv[1], "corpus") == 0) return Corpus(argv[2]);
  if (argc == 4 && std::strcmp(argv[1], "bench") == 0)
    return Bench(std::strtoull(argv[2], nullptr, 10), argv[3]);
  if ((argc == 3 || argc == 4) && std::strcmp(argv[1], "read") == 0)
    return Read(argv[2], argc == 4 ? std::atoi(argv[3]) : 1);
  std::fprintf(stderr,
               "usage: trace_synth corpus DIR | trace_synth bench N PATH | trace_synth read PATH [ROUNDS]\n");
  return 2;
}
