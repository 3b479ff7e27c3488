// traces: round trips, concurrent writers, size per event, and every way a
// trace file can be damaged.
#include "traces/trace.h"

#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/event.h"
#include "core/stack.h"
#include "traces/format.h"

namespace rdmasan::traces {
namespace {

using core::Event;
using core::EventKind;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/traces_test_" + std::to_string(getpid()) + "_" + name;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}
void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f << bytes;
}

TraceHeader TestHeader() {
  TraceHeader h = CurrentProcessHeader();
  h.device_attrs = {{"name", "softnic0"}, {"max_qp_wr", "4096"}};
  h.properties = {{"options", "checking=true"}};
  return h;
}

void ExpectSgeEq(const core::Sge& a, const core::Sge& b) {
  EXPECT_EQ(a.addr, b.addr);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.lkey, b.lkey);
  EXPECT_EQ(a.hash, b.hash);
  EXPECT_EQ(a.hash_now, b.hash_now);
}

void ExpectEventEq(const Event& a, const Event& b) {
  SCOPED_TRACE(std::string("kind ") + core::EventKindName(a.kind) + " seq " + std::to_string(a.seq));
  EXPECT_EQ(a.seq, b.seq);
  EXPECT_EQ(a.tid, b.tid);
  EXPECT_EQ(a.time, b.time);
  EXPECT_EQ(a.kind, b.kind);
  EXPECT_EQ(a.ret, b.ret);
  EXPECT_EQ(a.err, b.err);
  EXPECT_EQ(a.stack, b.stack);  // same depot: re-interned PCs give the same id
  EXPECT_EQ(a.obj, b.obj);
  EXPECT_EQ(a.parent, b.parent);
  EXPECT_EQ(a.send_cq, b.send_cq);
  EXPECT_EQ(a.recv_cq, b.recv_cq);
  EXPECT_EQ(a.srq, b.srq);
  EXPECT_EQ(a.channel, b.channel);
  EXPECT_EQ(a.addr, b.addr);
  EXPECT_EQ(a.length, b.length);
  EXPECT_EQ(a.iova, b.iova);
  EXPECT_EQ(a.access, b.access);
  EXPECT_EQ(a.lkey, b.lkey);
  EXPECT_EQ(a.rkey, b.rkey);
  EXPECT_EQ(a.qp_type, b.qp_type);
  EXPECT_EQ(a.qp_num, b.qp_num);
  EXPECT_EQ(a.sq_sig_all, b.sq_sig_all);
  EXPECT_EQ(a.caps.max_send_wr, b.caps.max_send_wr);
  EXPECT_EQ(a.caps.max_recv_wr, b.caps.max_recv_wr);
  EXPECT_EQ(a.caps.max_send_sge, b.caps.max_send_sge);
  EXPECT_EQ(a.caps.max_recv_sge, b.caps.max_recv_sge);
  EXPECT_EQ(a.caps.max_inline_data, b.caps.max_inline_data);
  EXPECT_EQ(a.cqe, b.cqe);
  EXPECT_EQ(a.attr_mask, b.attr_mask);
  EXPECT_EQ(a.qp_state, b.qp_state);
  EXPECT_EQ(a.count, b.count);
  EXPECT_EQ(a.bad_index, b.bad_index);
  ASSERT_EQ(a.send_wrs.size(), b.send_wrs.size());
  for (size_t i = 0; i < a.send_wrs.size(); ++i) {
    const auto& x = a.send_wrs[i];
    const auto& y = b.send_wrs[i];
    EXPECT_EQ(x.wr_id, y.wr_id);
    EXPECT_EQ(x.opcode, y.opcode);
    EXPECT_EQ(x.send_flags, y.send_flags);
    EXPECT_EQ(x.imm_data, y.imm_data);
    EXPECT_EQ(x.remote_addr, y.remote_addr);
    EXPECT_EQ(x.rkey, y.rkey);
    EXPECT_EQ(x.remote_qpn, y.remote_qpn);
    EXPECT_EQ(x.compare_add, y.compare_add);
    EXPECT_EQ(x.swap, y.swap);
    EXPECT_EQ(x.ah, y.ah);
    EXPECT_EQ(x.posted_at, y.posted_at);
    EXPECT_EQ(x.num_sge, y.num_sge);
    EXPECT_EQ(x.bind.mw, y.bind.mw);
    EXPECT_EQ(x.bind.mr, y.bind.mr);
    EXPECT_EQ(x.bind.addr, y.bind.addr);
    EXPECT_EQ(x.bind.length, y.bind.length);
    EXPECT_EQ(x.bind.access, y.bind.access);
    ASSERT_EQ(x.sges.size(), y.sges.size());
    for (size_t k = 0; k < x.sges.size(); ++k) ExpectSgeEq(x.sges[k], y.sges[k]);
  }
  ASSERT_EQ(a.recv_wrs.size(), b.recv_wrs.size());
  for (size_t i = 0; i < a.recv_wrs.size(); ++i) {
    EXPECT_EQ(a.recv_wrs[i].wr_id, b.recv_wrs[i].wr_id);
    EXPECT_EQ(a.recv_wrs[i].num_sge, b.recv_wrs[i].num_sge);
    ASSERT_EQ(a.recv_wrs[i].sges.size(), b.recv_wrs[i].sges.size());
    for (size_t k = 0; k < a.recv_wrs[i].sges.size(); ++k)
      ExpectSgeEq(a.recv_wrs[i].sges[k], b.recv_wrs[i].sges[k]);
  }
  EXPECT_EQ(a.text, b.text);
  ASSERT_EQ(a.wcs.size(), b.wcs.size());
  for (size_t i = 0; i < a.wcs.size(); ++i) {
    EXPECT_EQ(a.wcs[i].wr_id, b.wcs[i].wr_id);
    EXPECT_EQ(a.wcs[i].status, b.wcs[i].status);
    EXPECT_EQ(a.wcs[i].opcode, b.wcs[i].opcode);
    EXPECT_EQ(a.wcs[i].qp_num, b.wcs[i].qp_num);
    EXPECT_EQ(a.wcs[i].byte_len, b.wcs[i].byte_len);
    EXPECT_EQ(a.wcs[i].vendor_err, b.wcs[i].vendor_err);
  }
}

core::StackId FakeStack(uintptr_t base, int n) {
  std::vector<uintptr_t> pcs;
  for (int i = 0; i < n; ++i) pcs.push_back(base + 0x40 * i + 7);
  return core::InternStack(pcs.data(), pcs.size());
}

// An event of kind k with every field set to something distinctive
// (including negative numbers, maximal values, long WR chains).
Event FullEvent(EventKind k, uint64_t seq, std::mt19937_64& rng) {
  Event e;
  e.seq = seq;
  e.kind = k;
  e.tid = 1000 + static_cast<uint32_t>(rng() % 7);
  e.time = 1'000'000'000'000ull + seq * 1500 + rng() % 700;  // increasing, jittered
  e.ret = static_cast<int32_t>(rng() % 3) - 1;
  e.err = static_cast<int32_t>(rng() % 200) - 100;
  e.stack = FakeStack(0x5555000000 + (rng() % 8) * 0x1000, 1 + static_cast<int>(rng() % 40));
  e.obj = rng() % 100;
  e.parent = rng();
  e.send_cq = rng() % 50;
  e.recv_cq = UINT64_MAX - rng() % 3;
  e.srq = rng() % 5;
  e.channel = rng() % 5;
  e.addr = rng();
  e.length = rng();
  e.iova = rng();
  e.access = static_cast<uint32_t>(rng());
  e.lkey = static_cast<uint32_t>(rng());
  e.rkey = static_cast<uint32_t>(rng());
  e.qp_type = static_cast<uint32_t>(rng() % 8);
  e.qp_num = static_cast<uint32_t>(rng());
  e.sq_sig_all = static_cast<uint32_t>(rng() % 2);
  e.caps = {static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
            static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())};
  e.cqe = static_cast<int32_t>(rng());
  e.attr_mask = static_cast<uint32_t>(rng());
  e.qp_state = static_cast<uint32_t>(rng() % 7);
  e.count = static_cast<uint32_t>(rng());
  e.bad_index = (rng() % 2) ? UINT32_MAX : static_cast<uint32_t>(rng() % 4);
  int nsend = static_cast<int>(rng() % 4);
  for (int i = 0; i < nsend; ++i) {
    core::SendWr w;
    w.wr_id = rng();
    w.opcode = static_cast<uint32_t>(rng() % 11);
    w.send_flags = static_cast<uint32_t>(rng() % 16);
    w.imm_data = static_cast<uint32_t>(rng());
    w.remote_addr = rng();
    w.rkey = static_cast<uint32_t>(rng());
    w.remote_qpn = static_cast<uint32_t>(rng());
    w.compare_add = rng();
    w.swap = rng();
    w.ah = rng() % 9;
    w.posted_at = FakeStack(0x7777000000 + (rng() % 4) * 0x100, 3);
    if (w.opcode == IBV_WR_BIND_MW) {
      // Its binding travels in the fields a BIND_MW does not use.
      w.remote_addr = w.compare_add = w.swap = w.ah = 0;
      w.imm_data = 0;
      w.bind = {rng() % 50, rng(), rng(), rng(), static_cast<uint32_t>(rng())};
    }
    int nsge = static_cast<int>(rng() % 4);
    w.num_sge = (rng() % 5 == 0) ? -3 : nsge;
    for (int s = 0; s < nsge; ++s)
      w.sges.push_back({rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                        rng() % 3 ? rng() : 0, rng() % 2 ? rng() : 0});
    e.send_wrs.push_back(w);
  }
  int nrecv = static_cast<int>(rng() % 3);
  for (int i = 0; i < nrecv; ++i) {
    core::RecvWr w;
    w.wr_id = rng();
    int nsge = static_cast<int>(rng() % 3);
    w.num_sge = nsge + static_cast<int>(rng() % 2);
    for (int s = 0; s < nsge; ++s)
      w.sges.push_back({rng(), static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng())});
    e.recv_wrs.push_back(w);
  }
  if (k == EventKind::kWcReason)
    e.text = absl::StrFormat("REM_ACCESS_ERR: rkey 0x%x was invalidated by LOCAL_INV (pid %d)\n\t\x01",
                             static_cast<uint32_t>(rng()), static_cast<int>(rng() % 100000));
  int nwc = static_cast<int>(rng() % 6);
  for (int i = 0; i < nwc; ++i)
    e.wcs.push_back({rng(), static_cast<uint32_t>(rng() % 22), static_cast<uint32_t>(rng() % 130),
                     static_cast<uint32_t>(rng()), static_cast<uint32_t>(rng()),
                     static_cast<uint32_t>(rng())});
  return e;
}

std::vector<Event> ReadAll(TraceReader& r) {
  std::vector<Event> out;
  Event e;
  for (;;) {
    absl::StatusOr<bool> more = r.Next(&e);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    out.push_back(e);
  }
  return out;
}

TEST(Traces, RoundTripsEveryKindWithAllFields) {
  std::string path = TempPath("roundtrip");
  std::mt19937_64 rng(42);
  std::vector<Event> written;
  uint64_t seq = 1;
  for (int round = 0; round < 40; ++round)
    for (int k = 0; k < static_cast<int>(EventKind::kCount); ++k)
      written.push_back(FullEvent(static_cast<EventKind>(k), seq++, rng));
  // A few minimal events (all defaults) too.
  for (int k = 0; k < static_cast<int>(EventKind::kCount); ++k) {
    Event e;
    e.kind = static_cast<EventKind>(k);
    e.seq = seq++;
    written.push_back(e);
  }
  TraceHeader h = TestHeader();
  {
    auto w = TraceWriter::Open(path, h);
    ASSERT_TRUE(w.ok()) << w.status();
    for (const Event& e : written) (*w)->Append(e);
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_EQ((*w)->stats().dropped, 0u);
  }
  EXPECT_NE(access(path.c_str(), F_OK), -1);
  EXPECT_EQ(access((path + ".incomplete").c_str(), F_OK), -1);
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  const TraceHeader& rh = (*r)->header();
  EXPECT_EQ(rh.format_major, kFormatMajor);
  EXPECT_EQ(rh.tool_version, h.tool_version);
  EXPECT_EQ(rh.pid, getpid());
  EXPECT_EQ(rh.executable, h.executable);
  EXPECT_EQ(rh.argv, h.argv);
  EXPECT_EQ(rh.argc, h.argc);
  EXPECT_EQ(rh.start_time_ns, h.start_time_ns);
  EXPECT_EQ(rh.device_attrs, h.device_attrs);
  EXPECT_EQ(rh.properties, h.properties);
  ASSERT_GE(rh.modules.size(), h.modules.size());
  for (size_t i = 0; i < h.modules.size(); ++i) {
    EXPECT_EQ(rh.modules[i].path, h.modules[i].path);
    EXPECT_EQ(rh.modules[i].bias, h.modules[i].bias);
    EXPECT_EQ(rh.modules[i].build_id, h.modules[i].build_id);
  }
  std::vector<Event> read = ReadAll(**r);
  ASSERT_EQ(read.size(), written.size());
  for (size_t i = 0; i < read.size(); ++i) ExpectEventEq(written[i], read[i]);
  EXPECT_FALSE((*r)->truncated());
  EXPECT_EQ((*r)->warning(), "");
}

// A decision as interpose/faults records it: wc.error on QP 0x5.
Event DecisionEvent(uint64_t seq, uint64_t hit) {
  Event e;
  e.kind = EventKind::kDecision;
  e.seq = seq;
  e.tid = 77;
  e.count = 10;  // core::Point::kWcError
  e.obj = 3;
  e.length = hit;
  e.addr = 12;  // IBV_WC_RETRY_EXC_ERR
  e.qp_num = 5;
  e.wcs.push_back({0x12, 12, 0, 5, 0, 0});
  return e;
}

// Decisions are length-prefixed records (format 1.1): among events of every
// kind they round-trip, and a reader that skips them as a 1.0 reader does
// reads every other event exactly, since they leave the shared delta state
// (seq, time, WR and completion templates) as they found it.
TEST(Traces, DecisionRecordsAreSkippableByAFormat10Reader) {
  std::string path = TempPath("decisions");
  std::mt19937_64 rng(7);
  std::vector<Event> written;
  uint64_t seq = 1;
  for (int round = 0; round < 30; ++round) {
    for (int k = 0; k < static_cast<int>(EventKind::kCount); ++k) {
      written.push_back(FullEvent(static_cast<EventKind>(k), seq++, rng));
      if (rng() % 3 == 0) written.push_back(FullEvent(EventKind::kDecision, seq++, rng));
      if (rng() % 4 == 0) written.push_back(DecisionEvent(seq++, round + 1));
    }
  }
  {
    auto w = TraceWriter::Open(path, TestHeader());
    ASSERT_TRUE(w.ok()) << w.status();
    for (const Event& e : written) (*w)->Append(e);
    ASSERT_TRUE((*w)->Close().ok());
    EXPECT_EQ((*w)->stats().dropped, 0u);
  }
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->header().format_minor, kFormatMinor);
  std::vector<Event> read = ReadAll(**r);
  ASSERT_EQ(read.size(), written.size());
  for (size_t i = 0; i < read.size(); ++i) ExpectEventEq(written[i], read[i]);

  // A 1.1 reader: the window events (codes >= 65) skipped, the decisions read.
  std::vector<Event> v11;
  for (const Event& e : written)
    if (e.kind <= EventKind::kDecision) v11.push_back(e);
  ASSERT_LT(v11.size(), written.size());
  auto r11 = TraceReader::Open(path, TraceReader::Options{.skip_window_events = true});
  ASSERT_TRUE(r11.ok()) << r11.status();
  read = ReadAll(**r11);
  ASSERT_EQ(read.size(), v11.size());
  for (size_t i = 0; i < read.size(); ++i) ExpectEventEq(v11[i], read[i]);

  std::vector<Event> older;
  for (const Event& e : written)
    if (e.kind < EventKind::kDecision) older.push_back(e);
  ASSERT_LT(older.size(), written.size());
  auto r10 = TraceReader::Open(path, TraceReader::Options{.skip_extension_events = true});
  ASSERT_TRUE(r10.ok()) << r10.status();
  read = ReadAll(**r10);
  ASSERT_EQ(read.size(), older.size());
  for (size_t i = 0; i < read.size(); ++i) ExpectEventEq(older[i], read[i]);
}

// A decision record whose length disagrees with its body is an error
// naming its offset, never a misread.
TEST(Traces, DecisionRecordLengthMustMatchItsBody) {
  std::string path = TempPath("declen");
  {
    auto w = TraceWriter::Open(path, TestHeader());
    ASSERT_TRUE(w.ok()) << w.status();
    (*w)->Append(DecisionEvent(1, 1));
    ASSERT_TRUE((*w)->Close().ok());
  }
  std::string bytes = ReadFile(path);
  // The one events chunk holds just the record: code 64, its length (one
  // byte), the body.  Shorten the length by one, then fix the checksum so
  // the damage reaches the decoder.
  bool found = false;
  for (size_t h = kPrologueBytes; h + kChunkHeaderBytes <= bytes.size();) {
    auto* hp = reinterpret_cast<uint8_t*>(bytes.data() + h);
    ChunkHeader c = ReadChunkHeader(hp);
    if (c.kind == kChunkEvents) {
      ASSERT_EQ(hp[kChunkHeaderBytes], kCodeDecision);
      ASSERT_EQ(hp[kChunkHeaderBytes + 1] + 2u, c.len);
      --hp[kChunkHeaderBytes + 1];
      uint32_t crc = ChunkCrc(hp, hp + kChunkHeaderBytes, c.len);
      std::memcpy(hp + 28, &crc, 4);
      found = true;
    }
    h += kChunkHeaderBytes + c.len;
  }
  ASSERT_TRUE(found);
  WriteFile(path, bytes);
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  Event e;
  absl::StatusOr<bool> more = (*r)->Next(&e);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("trace record at offset"), std::string::npos) << more.status();
}

// A trace as a 1.0 writer left it (minor 0, end chunk of three fields)
// still reads, its event count checked.
// A trace as an older writer made it: minor version `minor`, its end chunk
// without the fields later versions appended (1.0: events, stacks,
// dropped; 1.1: also ext_events).  `path` was written by this writer with
// no event of a code it drops the count of.
void MakeOlder(const std::string& path, int minor) {
  std::string bytes = ReadFile(path);
  bytes[10] = static_cast<char>(minor);
  size_t h = kPrologueBytes, last = 0;
  while (h + kChunkHeaderBytes <= bytes.size()) {
    last = h;
    h += kChunkHeaderBytes + ReadChunkHeader(reinterpret_cast<const uint8_t*>(bytes.data() + h)).len;
  }
  ChunkHeader c = ReadChunkHeader(reinterpret_cast<const uint8_t*>(bytes.data() + last));
  ASSERT_EQ(c.kind, kChunkEnd);
  // later_events (1.2), and for 1.0 ext_events (1.1): one zero byte each.
  const uint32_t drop = minor == 0 ? 2 : 1;
  for (uint32_t i = 0; i < drop; ++i) {
    ASSERT_EQ(bytes.back(), 0);
    bytes.pop_back();
  }
  FillChunkHeader(reinterpret_cast<uint8_t*>(bytes.data() + last), c.len - drop, 3, kChunkEnd, 0, 0, 0);
  WriteFile(path, bytes);
}

TEST(Traces, ReadsAFormat10Trace) {
  std::string path = TempPath("v10");
  {
    auto w = TraceWriter::Open(path, TestHeader());
    ASSERT_TRUE(w.ok()) << w.status();
    for (uint64_t i = 1; i <= 50; ++i) {
      Event e;
      e.kind = EventKind::kPostSend;
      e.seq = i;
      e.send_wrs.emplace_back().wr_id = i;
      (*w)->Append(e);
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  MakeOlder(path, 0);
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->header().format_minor, 0);
  EXPECT_EQ(ReadAll(**r).size(), 50u);
  EXPECT_FALSE((*r)->truncated());
}

// A 1.1 trace (decisions, no window events; its end chunk stops after
// ext_events) reads whole, with a LOCAL_INV's key in imm_data as 1.1
// recorded it.
TEST(Traces, ReadsAFormat11Trace) {
  std::string path = TempPath("v11");
  {
    auto w = TraceWriter::Open(path, TestHeader());
    ASSERT_TRUE(w.ok()) << w.status();
    for (uint64_t i = 1; i <= 50; ++i) {
      Event e;
      e.kind = i % 10 == 0 ? EventKind::kDecision : EventKind::kPostSend;
      e.seq = i;
      if (e.kind == EventKind::kPostSend) {
        core::SendWr& wr = e.send_wrs.emplace_back();
        wr.wr_id = i;
        wr.opcode = i % 2 ? IBV_WR_LOCAL_INV : IBV_WR_SEND;
        wr.imm_data = 0x4000100 + static_cast<uint32_t>(i);
      }
      (*w)->Append(e);
    }
    ASSERT_TRUE((*w)->Close().ok());
  }
  MakeOlder(path, 1);
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->header().format_minor, 1);
  std::vector<Event> read = ReadAll(**r);
  ASSERT_EQ(read.size(), 50u);
  EXPECT_FALSE((*r)->truncated());
  EXPECT_EQ(read[0].send_wrs[0].opcode, static_cast<uint32_t>(IBV_WR_LOCAL_INV));
  EXPECT_EQ(read[0].send_wrs[0].imm_data, 0x4000101u);
  EXPECT_EQ(read[9].kind, EventKind::kDecision);
}

// Symlinks planted at PATH.incomplete and at PATH (another user's, in a
// shared folder): the writer follows neither, the victim's file keeps its
// bytes, and the trace ends up a regular file at PATH.  A stale
// PATH.incomplete of our own (a killed run) is replaced.
TEST(Traces, WriterNeverFollowsAPlantedSymlink) {
  const std::string victim = TempPath("victim"), path = TempPath("planted.trace");
  WriteFile(victim, "precious");
  ASSERT_EQ(symlink(victim.c_str(), (path + ".incomplete").c_str()), 0);
  EXPECT_FALSE(TraceWriter::Open(path, TraceHeader{}).ok());
  EXPECT_EQ(ReadFile(victim), "precious");
  unlink((path + ".incomplete").c_str());

  WriteFile(path + ".incomplete", "stale bytes of a killed run");
  ASSERT_EQ(symlink(victim.c_str(), path.c_str()), 0);
  auto w = TraceWriter::Open(path, TraceHeader{});
  ASSERT_TRUE(w.ok()) << w.status();
  Event e;
  e.kind = EventKind::kAllocPd;
  e.seq = 1;
  (*w)->Append(e);
  ASSERT_TRUE((*w)->Close().ok());
  EXPECT_EQ(ReadFile(victim), "precious");
  struct stat st;
  ASSERT_EQ(lstat(path.c_str(), &st), 0);
  EXPECT_TRUE(S_ISREG(st.st_mode));
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  unlink(path.c_str());
  unlink(victim.c_str());
}

TEST(Traces, LargeChainGetsItsOwnChunk) {
  std::string path = TempPath("large");
  Event e;
  e.kind = EventKind::kPostSend;
  e.seq = 7;
  for (int i = 0; i < 3000; ++i) {
    core::SendWr w;
    w.wr_id = i * 3;
    w.num_sge = 2;
    w.sges = {{0x1000u + i, 64, 5, 0x1234567890abcdefu * i, 0}, {0x9000u + i, 8, 5, 0, 0}};
    e.send_wrs.push_back(w);
  }
  auto w = TraceWriter::Open(path, TestHeader());
  ASSERT_TRUE(w.ok());
  Event small;
  small.kind = EventKind::kPollCq;
  small.seq = 8;
  (*w)->Append(small);
  (*w)->Append(e);
  ASSERT_TRUE((*w)->Close().ok());
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<Event> read = ReadAll(**r);
  ASSERT_EQ(read.size(), 2u);
  ExpectEventEq(e, read[0]);
  ExpectEventEq(small, read[1]);
}

TEST(Traces, ConcurrentAppendsComeBackOnceInSeqOrder) {
  std::string path = TempPath("threads");
  auto w = TraceWriter::Open(path, TestHeader());
  ASSERT_TRUE(w.ok());
  constexpr int kThreads = 8, kPerThread = 40000;
  std::atomic<uint64_t> next_seq{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      core::StackId stack = FakeStack(0x4000000 + t * 0x10000, 4);
      for (int i = 0; i < kPerThread; ++i) {
        Event e;
        e.kind = (i % 2) ? EventKind::kPollCq : EventKind::kPostSend;
        e.seq = next_seq.fetch_add(1);
        e.tid = 100 + t;
        e.obj = t + 1;
        e.stack = stack;
        if (e.kind == EventKind::kPostSend) {
          core::SendWr wr;
          wr.wr_id = (uint64_t{static_cast<uint32_t>(t)} << 32) | i;
          wr.sges = {{0x1000, 64, 1, 0, 0}};
          e.send_wrs.push_back(wr);
        }
        (*w)->Append(e);
        if (t == 0 && i == kPerThread / 2) {
          EXPECT_TRUE((*w)->Flush().ok());
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_TRUE((*w)->Close().ok());
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  Event e;
  uint64_t expect = 0;
  for (;;) {
    auto more = (*r)->Next(&e);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ASSERT_EQ(e.seq, expect) << "events out of order or missing";
    ASSERT_GE(e.tid, 100u);
    ASSERT_EQ(e.obj, e.tid - 100 + 1);
    if (e.kind == EventKind::kPostSend) {
      ASSERT_EQ(e.send_wrs.at(0).wr_id >> 32, e.tid - 100);
    }
    ++expect;
  }
  EXPECT_EQ(expect, uint64_t{kThreads} * kPerThread);
}

// A post/poll-heavy stream as the interposer records it for a ping-pong
// loop on one QP: post_recv, post_send (payload hashed), an empty poll,
// the send completion, the retire of the send WR, the receive completion.
std::vector<Event> PostPollStream(size_t n) {
  std::vector<Event> out;
  out.reserve(n);
  std::mt19937_64 rng(7);
  core::StackId post_stack = FakeStack(0x5600000000, 6), recv_stack = FakeStack(0x5600001000, 6),
                poll_stack = FakeStack(0x5600002000, 6);
  uint64_t seq = 1000, wr = 1;
  const uint64_t sbuf = 0x7f0000100000, rbuf = 0x7f0000200000;
  while (out.size() < n) {
    int slot = static_cast<int>(wr % 16);
    Event r;
    r.kind = EventKind::kPostRecv;
    r.seq = seq++;
    r.tid = 4242;
    r.obj = 7;
    r.stack = recv_stack;
    core::RecvWr& posted = r.recv_wrs.emplace_back();
    posted.wr_id = wr;
    posted.num_sge = 1;
    posted.sges.push_back({rbuf + slot * 4096, 4096, 0x1234});
    out.push_back(r);
    Event s;
    s.kind = EventKind::kPostSend;
    s.seq = seq++;
    s.tid = 4242;
    s.obj = 7;
    s.stack = post_stack;
    core::SendWr w;
    w.wr_id = wr;
    w.opcode = 2;  // IBV_WR_SEND
    w.send_flags = 2;
    w.num_sge = 1;
    uint64_t h = rng();
    w.sges = {{sbuf + slot * 4096, 64, 0x5678, h, 0}};
    s.send_wrs.push_back(w);
    out.push_back(s);
    Event empty;
    empty.kind = EventKind::kPollCq;
    empty.seq = seq++;
    empty.tid = 4242;
    empty.obj = 3;
    empty.stack = poll_stack;
    empty.count = 16;
    out.push_back(empty);
    Event sp = empty;
    sp.seq = seq++;
    sp.ret = 1;
    sp.wcs.push_back({wr, 0, 0 /*SEND*/, 0x11, 64, 0});
    out.push_back(sp);
    Event ret;
    ret.kind = EventKind::kRetire;
    ret.seq = seq++;
    ret.tid = 4242;
    ret.obj = 7;
    core::SendWr rw = w;
    rw.posted_at = post_stack;
    rw.sges[0].hash_now = h;
    ret.send_wrs.push_back(rw);
    out.push_back(ret);
    Event rp = empty;
    rp.seq = seq++;
    rp.ret = 1;
    rp.wcs.push_back({wr, 0, 128 /*RECV*/, 0x11, 64, 0});
    out.push_back(rp);
    ++wr;
  }
  out.resize(n);
  return out;
}

TEST(Traces, PostPollStreamFitsSixteenBytesPerEvent) {
  std::string path = TempPath("size");
  std::vector<Event> events = PostPollStream(600000);
  auto w = TraceWriter::Open(path, TestHeader());
  ASSERT_TRUE(w.ok());
  uint64_t before = (*w)->stats().bytes;
  for (const Event& e : events) (*w)->Append(e);
  ASSERT_TRUE((*w)->Close().ok());
  uint64_t bytes = (*w)->stats().bytes - before;
  double per_event = static_cast<double>(bytes) / events.size();
  std::printf("[ traces ] post/poll stream: %zu events, %llu bytes (header excluded), %.2f bytes/event\n",
              events.size(), static_cast<unsigned long long>(bytes), per_event);
  EXPECT_LE(per_event, 16.0);
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  Event e;
  size_t i = 0;
  for (;;) {
    auto more = (*r)->Next(&e);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    ASSERT_LT(i, events.size());
    if (i % 9973 == 0) ExpectEventEq(events[i], e);
    ++i;
  }
  EXPECT_EQ(i, events.size());
}

// Writes a small closed trace of `n` post/poll events in several chunks.
std::string MakeTrace(const std::string& name, size_t n) {
  std::string path = TempPath(name);
  auto w = TraceWriter::Open(path, TestHeader());
  EXPECT_TRUE(w.ok());
  for (const Event& e : PostPollStream(n)) (*w)->Append(e);
  EXPECT_TRUE((*w)->Close().ok());
  return path;
}

TEST(Traces, RejectsWrongMagic) {
  std::string path = MakeTrace("magic", 100);
  std::string bytes = ReadFile(path);
  bytes[0] = 'X';
  WriteFile(path, bytes);
  auto r = TraceReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("offset 0: not an rdmasan trace"), std::string::npos) << r.status();
  WriteFile(path, "short");
  r = TraceReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("file is 5 bytes"), std::string::npos) << r.status();
}

TEST(Traces, RejectsNewerMajorVersion) {
  std::string path = MakeTrace("version", 100);
  std::string bytes = ReadFile(path);
  bytes[8] = static_cast<char>(kFormatMajor + 1);
  WriteFile(path, bytes);
  auto r = TraceReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(r.status().message().find(absl::StrCat("trace format 2.", kFormatMinor, " is not readable")),
            std::string::npos)
      << r.status();
  // A newer minor version is fine.
  bytes[8] = static_cast<char>(kFormatMajor);
  bytes[10] = 9;
  WriteFile(path, bytes);
  r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ((*r)->header().format_minor, 9);
  EXPECT_EQ(ReadAll(**r).size(), 100u);
}

TEST(Traces, FlippedByteIsABadChecksumNamingTheChunk) {
  std::string path = MakeTrace("flip", 60000);  // several chunks
  std::string bytes = ReadFile(path);
  ASSERT_GT(bytes.size(), 3u * 65536);
  size_t victim = 100000;  // inside some middle chunk
  bytes[victim] ^= 0x40;
  WriteFile(path, bytes);
  auto r = TraceReader::Open(path);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), absl::StatusCode::kDataLoss);
  EXPECT_NE(r.status().message().find("checksum mismatch"), std::string::npos) << r.status();
  // The named offset is the start of the chunk holding the flipped byte.
  std::string msg(r.status().message());
  size_t at = msg.find("chunk at offset ");
  ASSERT_NE(at, std::string::npos) << msg;
  uint64_t off = std::stoull(msg.substr(at + 16));
  EXPECT_LE(off, victim);
  EXPECT_GT(off + 65536, victim);
}

TEST(Traces, TruncatedFileYieldsItsPrefixAndAWarning) {
  std::string path = MakeTrace("trunc", 60000);
  std::string bytes = ReadFile(path);
  for (size_t cut : {bytes.size() - 1, size_t{150000}, size_t{100}, size_t{16}}) {
    SCOPED_TRACE(cut);
    WriteFile(path, bytes.substr(0, cut));
    auto r = TraceReader::Open(path);
    if (cut == 100) {
      // Inside the header chunk: nothing readable, but not an error either.
      ASSERT_TRUE(r.ok()) << r.status();
    }
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<Event> read = ReadAll(**r);
    EXPECT_TRUE((*r)->truncated());
    EXPECT_NE((*r)->warning().find("offset"), std::string::npos) << (*r)->warning();
    EXPECT_LT(read.size(), cut == bytes.size() - 1 ? 60001u : 60000u);
    for (size_t i = 1; i < read.size(); ++i) ASSERT_LT(read[i - 1].seq, read[i].seq);
    if (cut == 150000) {
      EXPECT_GT(read.size(), 10000u);
    }
  }
}

TEST(Traces, IncompleteFileIsReadableAsAPrefix) {
  std::string path = TempPath("incomplete");
  auto w = TraceWriter::Open(path, TestHeader());
  ASSERT_TRUE(w.ok());
  std::vector<Event> events = PostPollStream(5000);
  for (size_t i = 0; i < 3000; ++i) (*w)->Append(events[i]);
  ASSERT_TRUE((*w)->Flush().ok());
  for (size_t i = 3000; i < 5000; ++i) (*w)->Append(events[i]);  // still buffered
  // What a killed writer leaves: PATH.incomplete, no end record.
  std::string copy = TempPath("incomplete_copy");
  WriteFile(copy, ReadFile(path + ".incomplete"));
  auto r = TraceReader::Open(copy);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<Event> read = ReadAll(**r);
  EXPECT_EQ(read.size(), 3000u);
  EXPECT_TRUE((*r)->truncated());
  EXPECT_NE((*r)->warning().find("without an end record"), std::string::npos) << (*r)->warning();
  // The signal path writes the rest.
  (*w)->FlushFromSignalHandler();
  WriteFile(copy, ReadFile(path + ".incomplete"));
  r = TraceReader::Open(copy);
  ASSERT_TRUE(r.ok()) << r.status();
  read = ReadAll(**r);
  ASSERT_EQ(read.size(), 5000u);
  for (size_t i = 0; i < read.size(); i += 97) ExpectEventEq(events[i], read[i]);
  ASSERT_TRUE((*w)->Close().ok());
}

// A signal that ends the process (SIGTERM, SIGALRM, ...): the handler's
// close writes the buffered events and the end record and renames the file:
// a complete trace, not PATH.incomplete (issue 10 item 11).
TEST(Traces, CloseFromSignalHandlerCompletesTheTrace) {
  std::string path = TempPath("signal_close");
  auto w = TraceWriter::Open(path, TestHeader());
  ASSERT_TRUE(w.ok());
  std::vector<Event> events = PostPollStream(5000);
  for (size_t i = 0; i < 3000; ++i) (*w)->Append(events[i]);
  ASSERT_TRUE((*w)->Flush().ok());
  for (size_t i = 3000; i < 5000; ++i) (*w)->Append(events[i]);  // still buffered
  EXPECT_TRUE((*w)->CloseFromSignalHandler());
  EXPECT_FALSE((*w)->CloseFromSignalHandler()) << "a second close does nothing";
  EXPECT_FALSE(std::ifstream(path + ".incomplete").good());
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  std::vector<Event> read = ReadAll(**r);
  ASSERT_EQ(read.size(), 5000u);
  EXPECT_FALSE((*r)->truncated()) << (*r)->warning();
  for (size_t i = 0; i < read.size(); i += 97) ExpectEventEq(events[i], read[i]);
  (*w)->Append(events[0]);  // after the close: dropped, no crash
  EXPECT_TRUE((*w)->Close().ok());
}

TEST(Traces, StacksSymbolizeOfflineThroughTheModuleMap) {
  std::string path = TempPath("symbolize");
  core::StackId here = core::CaptureStack();
  ASSERT_NE(here, 0u);
  auto w = TraceWriter::Open(path, TestHeader());
  ASSERT_TRUE(w.ok());
  Event e;
  e.kind = EventKind::kCreateQp;
  e.seq = 1;
  e.stack = here;
  (*w)->Append(e);
  ASSERT_TRUE((*w)->Close().ok());
  auto r = TraceReader::Open(path);
  ASSERT_TRUE(r.ok()) << r.status();
  Event got;
  ASSERT_TRUE(*(*r)->Next(&got));
  EXPECT_EQ(got.stack, here);
  auto offsets = (*r)->ModuleOffsets(got.stack);
  ASSERT_FALSE(offsets.empty());
  EXPECT_EQ(offsets[0].first, (*r)->header().executable);
  std::vector<core::Frame> frames = (*r)->Symbolize(got.stack);
  ASSERT_FALSE(frames.empty());
  EXPECT_NE(frames[0].function.find("StacksSymbolizeOfflineThroughTheModuleMap"), std::string::npos)
      << core::FormatFrame(frames[0]);
  EXPECT_NE(frames[0].file.find("traces_test.cc"), std::string::npos) << core::FormatFrame(frames[0]);
}

TEST(Traces, ExpandsPid) {
  EXPECT_EQ(ExpandTracePath("/tmp/t.%p.trace", 123), "/tmp/t.123.trace");
  EXPECT_EQ(ExpandTracePath("a%%p", 1), "a%p");
}

}  // namespace
}  // namespace rdmasan::traces
