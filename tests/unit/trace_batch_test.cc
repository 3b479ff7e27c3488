// traces: the replay's read path.  TraceReader::NextBatch, decoding into
// reused Events, must give exactly what Next gives into fresh ones (every
// member, the same errors after the same events), whatever the batch
// size, with threads' chunks interleaved and out of order, and on damaged
// files; Dec::Varint's word-at-a-time path must read every byte string
// as the byte loop of FORMAT.md does; and the chunk checksum's three-lane
// path must give the sums of the single chain.
#include <gtest/gtest.h>
#include <infiniband/verbs.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_format.h"
#include "core/event.h"
#include "core/stack.h"
#include "traces/crc32c.h"
#include "traces/format.h"
#include "traces/trace.h"
#include "traces/varint.h"

namespace rdmasan::traces {
namespace {

using core::Event;
using core::EventKind;

std::string TempPath(const std::string& name) {
  return ::testing::TempDir() + "/trace_batch_test_" + std::to_string(getpid()) + "_" + name;
}

// Every member, as one string: two events are the same if their strings are.
std::string Fields(const Event& e) {
  std::string s = absl::StrFormat(
      "%d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d %d |",
      e.seq, e.time, e.tid, static_cast<int>(e.kind), e.ret, e.err, e.stack, e.obj, e.parent, e.send_cq,
      e.recv_cq, e.srq, e.channel, e.addr, e.length, e.iova, e.access, e.lkey, e.rkey, e.qp_type, e.qp_num,
      e.sq_sig_all, e.caps.max_send_wr, e.caps.max_recv_wr, e.caps.max_send_sge, e.caps.max_recv_sge,
      e.caps.max_inline_data, e.cqe, e.attr_mask, e.qp_state, e.count, e.bad_index);
  auto sges = [&](const absl::InlinedVector<core::Sge, 2>& gs) {
    for (const auto& g : gs)
      absl::StrAppendFormat(&s, " g%d/%d/%d/%d/%d", g.addr, g.length, g.lkey, g.hash, g.hash_now);
  };
  for (const auto& w : e.send_wrs) {
    absl::StrAppendFormat(&s, " S%d/%d/%d/%d/%d/%d/%d/%d/%d/%d/%d/%d B%d/%d/%d/%d/%d", w.wr_id, w.opcode,
                          w.send_flags, w.imm_data, w.remote_addr, w.rkey, w.remote_qpn, w.compare_add,
                          w.swap, w.ah, w.posted_at, w.num_sge, w.bind.mw, w.bind.mr, w.bind.addr,
                          w.bind.length, w.bind.access);
    sges(w.sges);
  }
  for (const auto& w : e.recv_wrs) {
    absl::StrAppendFormat(&s, " R%d/%d", w.wr_id, w.num_sge);
    sges(w.sges);
  }
  for (const auto& c : e.wcs)
    absl::StrAppendFormat(&s, " C%d/%d/%d/%d/%d/%d", c.wr_id, c.status, c.opcode, c.qp_num, c.byte_len,
                          c.vendor_err);
  absl::StrAppend(&s, " T", e.text);
  return s;
}

core::StackId FakeStack(uintptr_t base, int n) {
  uintptr_t pcs[8];
  for (int i = 0; i < n; ++i) pcs[i] = base + 0x10 * i + 1;
  return core::InternStack(pcs, n);
}

// Mostly a steady post/poll stream, as real traces are (the decoder's fast
// paths), with every kind, odd values, lists that grow and shrink, and
// the rare fields set now and then (its slow paths).
Event SomeEvent(std::mt19937_64& rng, uint64_t seq, uint32_t tid) {
  Event e;
  e.seq = seq;
  e.tid = tid;
  e.time = seq * 1000 + rng() % 50;
  const int pick = static_cast<int>(rng() % 10);
  e.kind = pick < 4   ? EventKind::kPostSend
           : pick < 6 ? EventKind::kPollCq
           : pick < 7 ? EventKind::kPostRecv
                      : static_cast<EventKind>(rng() % static_cast<int>(EventKind::kCount));
  e.obj = 1 + rng() % 3;
  e.stack = FakeStack(0x5555000000 + (rng() % 3) * 0x1000, 3);
  if (rng() % 8 == 0) {
    e.ret = -1;
    e.err = 12;
    e.bad_index = static_cast<uint32_t>(rng() % 3);
  }
  if (rng() % 6 == 0) {  // the rare fields
    e.parent = rng() % 9;
    e.addr = rng();
    e.length = rng() % 4096;
    e.lkey = static_cast<uint32_t>(rng());
    e.caps = {64, 64, 2, 2, 32};
    e.cqe = static_cast<int32_t>(rng()) % 300 - 5;
    e.qp_state = 3;
  }
  const int nsend = e.kind == EventKind::kPostSend ? 1 + static_cast<int>(rng() % 3 == 0 ? rng() % 4 : 0)
                    : rng() % 12 == 0              ? 1
                                                   : 0;
  for (int i = 0; i < nsend; ++i) {
    core::SendWr& w = e.send_wrs.emplace_back();
    w.wr_id = seq * 4 + i;
    w.opcode = rng() % 9 == 0 ? static_cast<uint32_t>(rng() % 11) : uint32_t{IBV_WR_SEND};
    w.send_flags = rng() % 4 == 0 ? IBV_SEND_SIGNALED : 0;
    w.posted_at = FakeStack(0x7777000000 + (rng() % 2) * 0x100, 2);
    if (w.opcode == IBV_WR_BIND_MW) {
      w.bind = {1 + rng() % 5, rng() % 7, rng(), rng(), static_cast<uint32_t>(rng())};
    } else if (rng() % 5 == 0) {
      w.remote_addr = rng();
      w.rkey = static_cast<uint32_t>(rng());
      w.imm_data = static_cast<uint32_t>(rng());
    }
    const int nsge = rng() % 7 == 0 ? static_cast<int>(rng() % 4) : 1;
    w.num_sge = nsge;
    for (int s = 0; s < nsge; ++s)
      w.sges.push_back(
          {0x7f0000000000 + (rng() % 4) * 64, 64, 0x1234, rng() % 2 ? rng() : 0, rng() % 5 == 0 ? rng() : 0});
  }
  const int nrecv = e.kind == EventKind::kPostRecv ? 1 + static_cast<int>(rng() % 3) : 0;
  for (int i = 0; i < nrecv; ++i) {
    core::RecvWr& w = e.recv_wrs.emplace_back();
    w.wr_id = rng() % 100;
    w.num_sge = static_cast<int>(rng() % 3);
    for (int s = 0; s < w.num_sge; ++s) w.sges.push_back({rng(), 4096, 0x99, 0, 0});
  }
  const int nwc = e.kind == EventKind::kPollCq ? static_cast<int>(rng() % 6) : 0;
  for (int i = 0; i < nwc; ++i) e.wcs.push_back({seq + i, rng() % 10 == 0 ? 5u : 0u, 0, 0x11, 64, 0});
  if (e.kind == EventKind::kWcReason) e.text = absl::StrFormat("reason %d", rng() % 1000);
  return e;
}

std::string ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Three threads' events interleaved in seq order, each thread appending
// its own (so their chunks overlap in seq), flushes now and then, and the
// first thread's first chunks out of order (one event in ~100 held back
// and appended later: unsorted chunks, which the reader decodes whole).
std::string WriteMixedTrace(const std::string& name, uint64_t seed, int n) {
  const std::string path = TempPath(name);
  auto w = TraceWriter::Open(path, CurrentProcessHeader());
  EXPECT_TRUE(w.ok()) << w.status();
  std::mt19937_64 rng(seed);
  std::vector<Event> per_thread[3];
  for (int i = 0; i < n; ++i) {
    const uint32_t t = static_cast<uint32_t>(rng() % 3);
    per_thread[t].push_back(SomeEvent(rng, 100 + i, t + 1));
  }
  std::vector<std::thread> threads;
  for (auto& events : per_thread) {
    const bool first = &events == &per_thread[0];
    threads.emplace_back([&w, &events, first] {
      std::vector<Event> late;
      for (size_t i = 0; i < events.size(); ++i) {
        if (first && i < 1500 && i % 97 == 5) {
          late.push_back(events[i]);
          continue;
        }
        (*w)->Append(events[i]);
        if (i % 500 == 499) {
          for (const Event& l : late) (*w)->Append(l);
          late.clear();
          EXPECT_TRUE((*w)->Flush().ok());
        }
      }
      for (const Event& l : late) (*w)->Append(l);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_TRUE((*w)->Close().ok());
  return path;
}

// The events and the error the way replay read them before NextBatch:
// Next into a fresh Event each.
std::vector<std::string> ReadWithNext(const std::string& path, std::string* error,
                                      const TraceReader::Options& opts = {}) {
  std::vector<std::string> out;
  auto r = TraceReader::Open(path, opts);
  if (!r.ok()) {
    *error = std::string(r.status().message());
    return out;
  }
  for (;;) {
    Event e;
    absl::StatusOr<bool> more = (*r)->Next(&e);
    if (!more.ok()) {
      *error = std::string(more.status().message());
      break;
    }
    if (!*more) break;
    out.push_back(Fields(e));
  }
  return out;
}

std::vector<std::string> ReadWithBatches(const std::string& path, size_t batch, std::string* error,
                                         const TraceReader::Options& opts = {}) {
  std::vector<std::string> out;
  auto r = TraceReader::Open(path, opts);
  if (!r.ok()) {
    *error = std::string(r.status().message());
    return out;
  }
  std::vector<Event> events(batch);
  for (;;) {
    absl::Status s;
    const size_t n = (*r)->NextBatch(events.data(), events.size(), &s);
    for (size_t i = 0; i < n; ++i) out.push_back(Fields(events[i]));
    if (!s.ok()) {
      *error = std::string(s.message());
      break;
    }
    if (n < batch) break;
  }
  EXPECT_EQ((*r)->events_read(), out.size());
  return out;
}

void ExpectSameReads(const std::string& path, const TraceReader::Options& opts = {}) {
  std::string want_error;
  const std::vector<std::string> want = ReadWithNext(path, &want_error, opts);
  for (size_t batch : {1, 2, 7, 256, 4096}) {
    std::string error;
    const std::vector<std::string> got = ReadWithBatches(path, batch, &error, opts);
    ASSERT_EQ(got.size(), want.size()) << "batch " << batch;
    for (size_t i = 0; i < got.size(); ++i) ASSERT_EQ(got[i], want[i]) << "batch " << batch << " event " << i;
    EXPECT_EQ(error, want_error) << "batch " << batch;
  }
}

TEST(TraceBatch, NextBatchReadsWhatNextReads) {
  const std::string path = WriteMixedTrace("mixed", 1, 20000);
  std::string error;
  ASSERT_EQ(ReadWithNext(path, &error).size(), 20000u);
  EXPECT_EQ(error, "");
  ExpectSameReads(path);
  // As a 1.0 and a 1.1 reader read it (the length-prefixed kinds skipped).
  ExpectSameReads(path, TraceReader::Options{.skip_extension_events = true});
  ExpectSameReads(path, TraceReader::Options{.skip_window_events = true});
  // As the replay opens it (checksums checked as each chunk is reached).
  ExpectSameReads(path, TraceReader::Options{.check_events_on_read = true});
  std::string replay_error;
  EXPECT_EQ(ReadWithBatches(path, 512, &replay_error, TraceReader::Options{.check_events_on_read = true}),
            ReadWithNext(path, &error));
  EXPECT_EQ(replay_error, "");
  unlink(path.c_str());
}

// The replay's reader checks an events chunk's checksum when it reaches
// it: a damaged chunk in the middle is the error Open gives the other
// readers, word for word, after exactly the events before it; a torn last
// chunk ends the valid prefix for both alike.
TEST(TraceBatch, ChecksumsCheckedOnReadFailAsOpenFails) {
  const std::string path = WriteMixedTrace("crc_on_read_src", 6, 20000);
  const std::string good = ReadFile(path);
  std::string error;
  const std::vector<std::string> all = ReadWithNext(path, &error);
  ASSERT_EQ(all.size(), 20000u);
  std::vector<size_t> chunks;  // header offsets, in file order
  for (size_t pos = kPrologueBytes; pos + kChunkHeaderBytes <= good.size();) {
    chunks.push_back(pos);
    pos += kChunkHeaderBytes + ReadChunkHeader(reinterpret_cast<const uint8_t*>(good.data()) + pos).len;
  }
  ASSERT_GT(chunks.size(), 8u);
  const TraceReader::Options on_read{.check_events_on_read = true};
  const std::string damaged = TempPath("crc_on_read");
  int middle = 0;
  for (size_t k = 1; k + 1 < chunks.size(); k += 3) {
    const ChunkHeader c = ReadChunkHeader(reinterpret_cast<const uint8_t*>(good.data()) + chunks[k]);
    if (c.kind != kChunkEvents || c.count == 0) continue;
    SCOPED_TRACE(chunks[k]);
    ++middle;
    std::string bytes = good;
    bytes[chunks[k] + kChunkHeaderBytes + c.len / 2] ^= 0x10;
    std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
    std::string open_error;
    EXPECT_TRUE(ReadWithNext(damaged, &open_error).empty());
    EXPECT_EQ(open_error, absl::StrFormat("%s: chunk at offset %d: checksum mismatch", damaged, chunks[k]) +
                              open_error.substr(open_error.find(" (stored")));
    EXPECT_TRUE(TraceReader::Open(damaged, on_read).ok());  // the chunk is not read yet
    for (size_t batch : {1, 512}) {
      std::string read_error;
      const std::vector<std::string> got = ReadWithBatches(damaged, batch, &read_error, on_read);
      EXPECT_EQ(damaged + ": " + read_error, open_error) << "batch " << batch;
      ASSERT_LT(got.size(), all.size());
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_EQ(got[i], all[i]) << "batch " << batch << " event " << i;
    }
    std::string next_error;
    EXPECT_EQ(ReadWithNext(damaged, &next_error, on_read).size(),
              ReadWithBatches(damaged, 7, &error, on_read).size());
    EXPECT_EQ(damaged + ": " + next_error, open_error);
  }
  EXPECT_GT(middle, 2);
  // Torn: the end record gone and the last events chunk damaged.
  const size_t last = chunks[chunks.size() - 2];
  ASSERT_EQ(ReadChunkHeader(reinterpret_cast<const uint8_t*>(good.data()) + last).kind, kChunkEvents);
  std::string bytes = good.substr(0, chunks.back());
  bytes[bytes.size() - 3] ^= 0x01;
  std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
  std::string want_warning, got_warning;
  std::vector<std::string> want, got;
  for (bool check_on_read : {false, true}) {
    auto r = TraceReader::Open(damaged, TraceReader::Options{.check_events_on_read = check_on_read});
    ASSERT_TRUE(r.ok()) << r.status();
    std::vector<Event> events(512);
    std::vector<std::string>& out = check_on_read ? got : want;
    for (;;) {
      absl::Status s;
      const size_t n = (*r)->NextBatch(events.data(), events.size(), &s);
      ASSERT_TRUE(s.ok()) << s;
      for (size_t i = 0; i < n; ++i) out.push_back(Fields(events[i]));
      if (n < events.size()) break;
    }
    EXPECT_TRUE((*r)->truncated());
    (check_on_read ? got_warning : want_warning) = (*r)->warning();
  }
  EXPECT_NE(want_warning.find("fails its checksum"), std::string::npos) << want_warning;
  EXPECT_EQ(got_warning, want_warning);
  EXPECT_EQ(got, want);
  EXPECT_LT(got.size(), all.size());
  unlink(damaged.c_str());
  unlink(path.c_str());
}

// A byte of an events chunk changed and the chunk's checksum made right
// again: the reader meets a malformed (or merely different) record.  Both
// paths yield the same events before it and the same error.
TEST(TraceBatch, NextBatchStopsWhereNextStopsOnDamagedRecords) {
  const std::string path = WriteMixedTrace("damaged_src", 2, 3000);
  const std::string good = ReadFile(path);
  std::mt19937_64 rng(3);
  int errors = 0;
  for (int round = 0; round < 60; ++round) {
    std::string bytes = good;
    // The events chunks, by the framing of FORMAT.md.
    std::vector<std::pair<size_t, uint32_t>> chunks;  // header offset, payload length
    for (size_t pos = kPrologueBytes; pos + kChunkHeaderBytes <= bytes.size();) {
      ChunkHeader c = ReadChunkHeader(reinterpret_cast<const uint8_t*>(bytes.data()) + pos);
      if (c.kind == kChunkEvents && c.len > 0) chunks.emplace_back(pos, c.len);
      pos += kChunkHeaderBytes + c.len;
    }
    ASSERT_FALSE(chunks.empty());
    const auto [at, len] = chunks[rng() % chunks.size()];
    uint8_t* h = reinterpret_cast<uint8_t*>(bytes.data()) + at;
    for (int k = 0; k < 1 + static_cast<int>(rng() % 3); ++k) {
      const size_t i = rng() % len;
      h[kChunkHeaderBytes + i] = rng() % 2
                                     ? static_cast<uint8_t>(h[kChunkHeaderBytes + i] ^ (1u << (rng() % 8)))
                                     : static_cast<uint8_t>(rng() % 3 == 0 ? 0x80 : rng());
    }
    const ChunkHeader c = ReadChunkHeader(h);
    FillChunkHeader(h, c.len, c.count, c.kind, c.flags, c.stream, c.min_seq);
    const std::string damaged = TempPath("damaged");
    std::ofstream(damaged, std::ios::binary | std::ios::trunc) << bytes;
    std::string error;
    ReadWithNext(damaged, &error);
    errors += !error.empty();
    ExpectSameReads(damaged);
    unlink(damaged.c_str());
  }
  EXPECT_GT(errors, 10) << "the damage should make most of these traces malformed";
  unlink(path.c_str());
}

// FORMAT.md's varint, byte by byte: the reference.
uint64_t ByteLoopVarint(const uint8_t*& p, const uint8_t* end, bool* ok) {
  uint64_t v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (p >= end) return *ok = false, 0;
    const uint8_t b = *p++;
    v |= static_cast<uint64_t>(b & 0x7f) << shift;
    if (!(b & 0x80)) return v;
  }
  return *ok = false, 0;
}

TEST(TraceBatch, VarintReadsEveryLengthAsTheByteLoop) {
  std::mt19937_64 rng(4);
  for (int round = 0; round < 200000; ++round) {
    // A run of varints of every length (1 to 10 bytes, overlong ones and
    // an unterminated tail among them), then the end of the buffer.
    std::vector<uint8_t> buf;
    const int count = 1 + static_cast<int>(rng() % 4);
    for (int k = 0; k < count; ++k) {
      const int len = 1 + static_cast<int>(rng() % 11);
      for (int i = 0; i < len; ++i)
        buf.push_back(static_cast<uint8_t>((rng() & 0x7f) | (i + 1 < len || rng() % 20 == 0 ? 0x80 : 0)));
    }
    // Into a buffer of exactly this size, so reading past it is an error
    // the ASan build sees.
    std::unique_ptr<uint8_t[]> exact(new uint8_t[buf.size()]);
    std::memcpy(exact.get(), buf.data(), buf.size());
    Dec d{exact.get(), exact.get() + buf.size()};
    const uint8_t* p = exact.get();
    bool ok = true;
    while (ok && p < exact.get() + buf.size()) {
      const uint64_t want = ByteLoopVarint(p, exact.get() + buf.size(), &ok);
      // Varint2 (two bytes inline) must read every length alike.
      const uint64_t got = round % 2 ? d.Varint2() : d.Varint();
      ASSERT_EQ(d.ok, ok) << "round " << round;
      if (!ok) break;
      ASSERT_EQ(got, want) << "round " << round;
      ASSERT_EQ(d.p, p) << "round " << round;
    }
  }
}

// Crc32c runs long inputs as three lanes joined at each block's end, and
// short ones as one chain: a sum over one call must equal the sum chained
// over pieces too short for the lanes (under 768 bytes), at every length
// and alignment around the block sizes; and CRC-32C's check value.
TEST(TraceBatch, ChecksumLanesGiveTheSingleChainsSums) {
  const uint8_t* check = reinterpret_cast<const uint8_t*>("123456789");
  EXPECT_EQ(Crc32c(0, check, 9), 0xE3069283u);
  std::mt19937_64 rng(5);
  std::vector<uint8_t> buf(3 * 3 * 4096 + 3 * 256 + 64);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  std::vector<size_t> lengths = {0,
                                 1,
                                 7,
                                 8,
                                 767,
                                 768,
                                 769,
                                 3 * 4096 - 1,
                                 3 * 4096,
                                 3 * 4096 + 1,
                                 3 * 4096 + 3 * 256 + 13,
                                 buf.size() - 7};
  for (int i = 0; i < 300; ++i) lengths.push_back(rng() % (buf.size() - 7));
  for (size_t n : lengths) {
    const size_t off = rng() % 8;
    const uint32_t seed = static_cast<uint32_t>(rng());
    uint32_t chained = seed;
    for (size_t at = 0; at < n;) {
      const size_t piece = std::min<size_t>(n - at, 1 + rng() % 700);
      chained = Crc32c(chained, buf.data() + off + at, piece);
      at += piece;
    }
    ASSERT_EQ(Crc32c(seed, buf.data() + off, n), chained) << "length " << n << " offset " << off;
  }
}

}  // namespace
}  // namespace rdmasan::traces
