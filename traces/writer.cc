// traces/writer: TraceWriter (trace.h), the per-thread streams of the
// Append path and the file they are written to.
//
// Rules for the Append path (it runs inside application threads, possibly
// inside free()/munmap() interposition): no allocation in steady state, no
// lock except the file mutex when a buffer is full or a stack is new, no
// dynamic-loader calls.  The signal paths use only atomics,
// pthread_mutex_trylock, write(2), fdatasync(2) / fsync(2), and (to close a
// trace when a signal ends the process) close(2) and rename(2).
#include "traces/trace.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/file.h"
#include "core/own_fd.h"
#include "core/spin_lock.h"
#include "traces/codec.h"
#include "traces/format.h"
#include "traces/header.h"
#include "traces/varint.h"

namespace rdmasan::traces {
namespace {

using core::Event;

constexpr size_t kStreamPayload = 64 * 1024 - kChunkHeaderBytes;  // one stream buffer
constexpr size_t kMaxLargePayload = 16u << 20;                    // one giant event

// ------------------------------------------------ thread -> stream cache --
struct Registry {
  std::mutex mu;
  std::vector<std::pair<uint64_t, TraceWriter*>> live;
  std::atomic<uint64_t> next_gen{1};
};
Registry& GetRegistry() {
  static Registry* r = new Registry;  // never destroyed: threads may exit after static destructors
  return *r;
}

// Who holds a stream: nobody; its thread, inside Append; a Flush, Close,
// ReleaseStream or the signal handler, writing it out.  kClosed is final.
enum StreamState : int { kIdle = 0, kBusy = 1, kTaken = 2, kClosed = 3 };

}  // namespace

struct TraceWriter::Stream {
  alignas(64) std::atomic<int> state{kIdle};
  uint32_t id = 0;
  bool overflow = false;
  uint8_t* buf = nullptr;  // kChunkHeaderBytes + kStreamPayload
  size_t used = 0;         // payload bytes
  uint32_t records = 0;
  uint32_t ext_records = 0;    // of them, decision events (code 64)
  uint32_t later_records = 0;  // of them, events of codes >= 65 (format 1.2)
  uint64_t min_seq = 0;
  uint64_t last_seq = 0;
  bool sorted = true;
  Templates tpl;

  Stream() : buf(new uint8_t[kChunkHeaderBytes + kStreamPayload]) { StartChunk(); }
  ~Stream() { delete[] buf; }
  void StartChunk() {
    used = 0;
    records = 0;
    ext_records = 0;
    later_records = 0;
    min_seq = UINT64_MAX;
    last_seq = 0;
    sorted = true;
    tpl.Reset();
  }
};

// Per-thread cache: which stream this thread appends to, per writer.
struct ThreadStreams {
  struct Entry {
    uint64_t gen;
    TraceWriter::Stream* s;
  };
  Entry e[4] = {};
  int n = 0;
  ~ThreadStreams() {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> l(r.mu);
    for (int i = 0; i < n; ++i) {
      for (auto& [gen, w] : r.live)
        if (gen == e[i].gen) w->ReleaseStream(e[i].s);
    }
    n = 0;
  }
};
thread_local ThreadStreams t_streams;

namespace {

// Moves s from kIdle to `to`, waiting while another thread holds it; false
// if s is closed, or still held after `spins` tries (spins < 0: no limit).
bool Acquire(TraceWriter::Stream* s, StreamState to, int spins) {
  for (int i = 0;; ++i) {
    int expected = kIdle;
    if (s->state.compare_exchange_weak(expected, to, std::memory_order_acquire)) return true;
    if (expected == kClosed || (spins >= 0 && i >= spins)) return false;
    core::SpinWait(i);
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceWriter>> TraceWriter::Open(const std::string& path,
                                                               const TraceHeader& header) {
  std::unique_ptr<TraceWriter> w(new TraceWriter);
  w->path_ = path;
  w->tmp_path_ = path + ".incomplete";
  // Never through a symlink someone planted at the path, never into a file
  // that is not ours (core/file.h); the final rename replaces a link at
  // PATH itself, not what it points to.
  // A live trace is never replaced (tree.cc): only a leftover nobody holds.
  if (TraceBeingWritten(w->tmp_path_))
    return absl::ErrnoToStatus(
        EBUSY, absl::StrCat("cannot create trace ", w->tmp_path_, ": a live process is writing it"));
  w->fd_ = core::AdoptFd(core::CreateForWrite(w->tmp_path_, core::CreateMode::kFresh));
  if (w->fd_.fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot create trace ", w->tmp_path_));
  (void)flock(w->fd_.fd, LOCK_EX | LOCK_NB);  // says "live" to the next writer
  std::string prologue(kMagic, sizeof(kMagic));
  uint16_t major = kFormatMajor, minor = kFormatMinor;
  prologue.append(reinterpret_cast<const char*>(&major), 2);
  prologue.append(reinterpret_cast<const char*>(&minor), 2);
  prologue.append(4, '\0');
  std::string payload = EncodeHeader(header);
  std::string chunk(kChunkHeaderBytes, '\0');
  chunk += payload;
  FillChunkHeader(reinterpret_cast<uint8_t*>(chunk.data()), static_cast<uint32_t>(payload.size()), 0,
                  kChunkHeader, 0, 0, 0);
  {
    std::lock_guard<std::mutex> l(w->file_mu_);
    if (!w->WriteAllLocked(prologue.data(), prologue.size()) ||
        !w->WriteAllLocked(chunk.data(), chunk.size())) {
      int err = errno;
      core::CloseOwnFd(&w->fd_);
      ::unlink(w->tmp_path_.c_str());
      return absl::ErrnoToStatus(err, absl::StrCat("cannot write trace ", w->tmp_path_));
    }
    w->modules_ = header.modules;
    w->refresh_modules_ = header.pid == getpid();
    w->pending_meta_.assign(kChunkHeaderBytes, 0);
    w->pending_meta_.reserve(64 * 1024 + 4096);
  }
  // Lock order: registry before file_mu_ (thread exit releases streams).
  Registry& r = GetRegistry();
  {
    std::lock_guard<std::mutex> rl(r.mu);
    w->gen_ = r.next_gen.fetch_add(1);
    r.live.emplace_back(w->gen_, w.get());
  }
  return w;
}

TraceWriter::~TraceWriter() {
  (void)Close();
  {
    // Close() after CloseFromSignalHandler() returns early: the exiting
    // threads' caches must not find this writer any more either way.
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> rl(r.mu);
    std::erase_if(r.live, [&](const auto& p) { return p.first == gen_; });
  }
  for (size_t i = 0; i < num_slots_.load(); ++i) delete slots_[i].load();
  for (auto& seg : stack_bits_) delete[] seg.load();
}

bool TraceWriter::WriteAllLocked(const char* p, size_t n) {
  if (write_failed_.load(std::memory_order_relaxed) || fd_.fd < 0) return false;
  // Still our file?  A raw close(2) by the program escapes the close hooks
  // (core/own_fd.h); its next open may have taken the number.
  if (const int before = fd_.fd; !core::CheckOwnFd(&fd_, tmp_path_)) {
    write_failed_.store(true, std::memory_order_relaxed);
    return false;
  } else if (fd_.fd != before) {
    (void)flock(fd_.fd, LOCK_EX | LOCK_NB);
  }
  while (n > 0) {
    ssize_t r = ::write(fd_.fd, p, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) {
      write_failed_.store(true, std::memory_order_relaxed);
      return false;
    }
    p += r;
    n -= static_cast<size_t>(r);
    bytes_.fetch_add(static_cast<uint64_t>(r), std::memory_order_relaxed);
  }
  return true;
}

void TraceWriter::WritePendingMetaLocked() {
  if (pending_meta_records_ == 0) return;
  auto* h = reinterpret_cast<uint8_t*>(pending_meta_.data());
  uint32_t len = static_cast<uint32_t>(pending_meta_.size() - kChunkHeaderBytes);
  FillChunkHeader(h, len, pending_meta_records_, kChunkMeta, 0, 0, 0);
  if (WriteAllLocked(pending_meta_.data(), pending_meta_.size()))
    chunks_.fetch_add(1, std::memory_order_relaxed);
  pending_meta_.resize(kChunkHeaderBytes);  // never frees
  pending_meta_records_ = 0;
}

void TraceWriter::WriteStreamChunkLocked(Stream* s) {
  WritePendingMetaLocked();
  if (s->records == 0) return;
  FillChunkHeader(s->buf, static_cast<uint32_t>(s->used), s->records, kChunkEvents,
                  s->sorted ? kFlagSorted : 0, s->id, s->min_seq);
  if (WriteAllLocked(reinterpret_cast<const char*>(s->buf), kChunkHeaderBytes + s->used)) {
    chunks_.fetch_add(1, std::memory_order_relaxed);
    written_events_.fetch_add(s->records, std::memory_order_relaxed);
    written_ext_events_.fetch_add(s->ext_records, std::memory_order_relaxed);
    written_later_events_.fetch_add(s->later_records, std::memory_order_relaxed);
  } else {
    dropped_.fetch_add(s->records, std::memory_order_relaxed);
  }
  s->StartChunk();
}

void TraceWriter::WriteModulesLocked(bool all) {
  if (!refresh_modules_) return;
  std::vector<Module> now = CurrentModules();
  for (const Module& m : now) {
    bool known = false;
    for (const Module& k : modules_) known |= (k.path == m.path && k.bias == m.bias && k.start == m.start);
    if (known && !all) continue;
    std::string rec;
    AppendModuleRecord(&rec, m);
    pending_meta_.insert(pending_meta_.end(), rec.begin(), rec.end());
    ++pending_meta_records_;
    if (!known) modules_.push_back(m);
  }
}

bool TraceWriter::StackDefined(core::StackId id) const {
  size_t seg = id >> kStackSegBits;
  if (seg >= 1024) return true;  // beyond the depot: cannot happen
  std::atomic<uint64_t>* bits = stack_bits_[seg].load(std::memory_order_acquire);
  if (!bits) return false;
  size_t i = id & ((size_t{1} << kStackSegBits) - 1);
  return bits[i >> 6].load(std::memory_order_acquire) >> (i & 63) & 1;
}

void TraceWriter::DefineStack(core::StackId id) {
  std::vector<uintptr_t> pcs = core::StackPcs(id);  // allocates: once per stack
  std::lock_guard<std::mutex> l(file_mu_);
  if (StackDefined(id)) return;
  size_t seg = id >> kStackSegBits;
  std::atomic<uint64_t>* bits = stack_bits_[seg].load(std::memory_order_relaxed);
  if (!bits) {
    bits = new std::atomic<uint64_t>[(size_t{1} << kStackSegBits) / 64]();
    stack_bits_[seg].store(bits, std::memory_order_release);
  }
  uint8_t rec[kMaxStackRecordBytes];
  uint8_t* p = EncodeStackRecord(rec, id, pcs);
  pending_meta_.insert(pending_meta_.end(), reinterpret_cast<char*>(rec), reinterpret_cast<char*>(p));
  ++pending_meta_records_;
  stacks_.fetch_add(1, std::memory_order_relaxed);
  if (pending_meta_.size() > 64 * 1024) WritePendingMetaLocked();
  size_t i = id & ((size_t{1} << kStackSegBits) - 1);
  // Published after the definition is queued: whoever sees the bit writes
  // its chunks after the queue is written (both under file_mu_).
  bits[i >> 6].fetch_or(uint64_t{1} << (i & 63), std::memory_order_release);
}

TraceWriter::Stream* TraceWriter::NewStreamLocked() {
  Stream* s = nullptr;
  if (!free_streams_.empty()) {
    s = free_streams_.back();
    free_streams_.pop_back();
  } else if (num_slots_.load(std::memory_order_relaxed) < kMaxStreams) {
    s = new Stream;
    slots_[num_slots_.load(std::memory_order_relaxed)].store(s, std::memory_order_release);
    num_slots_.fetch_add(1, std::memory_order_release);
  } else {
    if (!overflow_) {
      overflow_ = new Stream;
      overflow_->overflow = true;
      overflow_->id = next_stream_id_++;
      slots_[kMaxStreams].store(overflow_, std::memory_order_release);
    }
    return overflow_;
  }
  s->id = next_stream_id_++;
  return s;
}

TraceWriter::Stream* TraceWriter::StreamForThisThread() {
  ThreadStreams& ts = t_streams;
  for (int i = 0; i < ts.n; ++i)
    if (ts.e[i].gen == gen_) return ts.e[i].s;
  Stream* s;
  {
    std::lock_guard<std::mutex> l(file_mu_);
    if (closed_.load()) return nullptr;
    s = NewStreamLocked();
  }
  if (ts.n == 4) {  // forget the oldest writer (normally a closed one)
    std::memmove(&ts.e[0], &ts.e[1], 3 * sizeof(ts.e[0]));
    ts.n = 3;
  }
  ts.e[ts.n++] = {gen_, s};
  return s;
}

void TraceWriter::ReleaseStream(Stream* s) {
  if (s->overflow) return;
  if (!Acquire(s, kTaken, 1 << 20)) return;
  std::lock_guard<std::mutex> l(file_mu_);
  WriteStreamChunkLocked(s);
  free_streams_.push_back(s);
  s->state.store(kIdle, std::memory_order_release);
}

void TraceWriter::Append(const Event& e) {
  if (closed_.load(std::memory_order_relaxed) || static_cast<int>(e.kind) >= kNumEventKinds) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (e.stack && !StackDefined(e.stack)) DefineStack(e.stack);
  for (const auto& w : e.send_wrs)
    if (w.posted_at && !StackDefined(w.posted_at)) DefineStack(w.posted_at);
  Stream* s = StreamForThisThread();
  if (!s) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (s->overflow) {
    std::lock_guard<std::mutex> l(overflow_mu_);
    AppendTo(s, e);
  } else {
    AppendTo(s, e);
  }
}

void TraceWriter::AppendTo(Stream* s, const Event& e) {
  if (!Acquire(s, kBusy, -1)) {  // waits while a Flush is writing this stream
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  size_t bound = EncodedBound(e);
  if (bound > kStreamPayload) {
    s->state.store(kIdle, std::memory_order_release);
    AppendLarge(s, e);
    return;
  }
  if (s->used + bound > kStreamPayload) {
    std::lock_guard<std::mutex> l(file_mu_);
    WriteStreamChunkLocked(s);
  }
  uint8_t* start = s->buf + kChunkHeaderBytes + s->used;
  uint8_t* end = EncodeEvent(start, e, s->tpl);
  s->used += static_cast<size_t>(end - start);
  ++s->records;
  switch (EndCountOf(KindCode(e.kind))) {
    case 1:
      ++s->ext_records;
      break;
    case 2:
      ++s->later_records;
      break;
  }
  if (e.seq < s->min_seq) s->min_seq = e.seq;
  if (s->records > 1 && e.seq < s->last_seq) s->sorted = false;
  s->last_seq = e.seq;
  events_.fetch_add(1, std::memory_order_relaxed);
  s->state.store(kIdle, std::memory_order_release);
}

// An event too large for a stream buffer (a chain of thousands of WRs):
// its own chunk, from a one-off allocation.
void TraceWriter::AppendLarge(Stream* s, const Event& e) {
  size_t bound = EncodedBound(e);
  if (bound > kMaxLargePayload) {
    dropped_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  std::vector<uint8_t> buf(kChunkHeaderBytes + bound);
  auto tpl = std::make_unique<Templates>();
  tpl->Reset();
  uint8_t* end = EncodeEvent(buf.data() + kChunkHeaderBytes, e, *tpl);
  uint32_t len = static_cast<uint32_t>(end - buf.data() - kChunkHeaderBytes);
  FillChunkHeader(buf.data(), len, 1, kChunkEvents, kFlagSorted, s->id, e.seq);
  events_.fetch_add(1, std::memory_order_relaxed);
  std::lock_guard<std::mutex> l(file_mu_);
  WritePendingMetaLocked();
  if (WriteAllLocked(reinterpret_cast<const char*>(buf.data()), kChunkHeaderBytes + len)) {
    chunks_.fetch_add(1, std::memory_order_relaxed);
    written_events_.fetch_add(1, std::memory_order_relaxed);
    const int count = EndCountOf(KindCode(e.kind));
    if (count == 1) written_ext_events_.fetch_add(1, std::memory_order_relaxed);
    if (count == 2) written_later_events_.fetch_add(1, std::memory_order_relaxed);
  } else {
    dropped_.fetch_add(1, std::memory_order_relaxed);
  }
}

absl::Status TraceWriter::Flush() {
  if (closed_.load()) return close_status_;
  {
    std::lock_guard<std::mutex> l(file_mu_);
    WriteModulesLocked(false);
    WritePendingMetaLocked();
  }
  size_t n = num_slots_.load(std::memory_order_acquire);
  for (size_t i = 0; i <= kMaxStreams; ++i) {
    if (i >= n && i != kMaxStreams) continue;
    Stream* s = slots_[i].load(std::memory_order_acquire);
    if (!s) continue;
    std::unique_lock<std::mutex> ol(overflow_mu_, std::defer_lock);
    if (s->overflow) ol.lock();
    if (!Acquire(s, kTaken, 1 << 20)) continue;
    {
      std::lock_guard<std::mutex> l(file_mu_);
      WriteStreamChunkLocked(s);
    }
    s->state.store(kIdle, std::memory_order_release);
  }
  if (write_failed_.load()) return absl::DataLossError(absl::StrCat("write to ", tmp_path_, " failed"));
  return absl::OkStatus();
}

void TraceWriter::CloseStreams() {
  for (size_t i = 0; i <= kMaxStreams; ++i) {
    Stream* s = slots_[i].load(std::memory_order_acquire);
    if (!s) continue;
    std::unique_lock<std::mutex> ol(overflow_mu_, std::defer_lock);
    if (s->overflow) ol.lock();
    // Wait up to ~1 s for an Append in progress.
    bool taken = false;
    for (int k = 0; k < 1000 && !(taken = Acquire(s, kTaken, 4096)); ++k) {
      if (s->state.load() == kClosed) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    if (!taken) continue;  // abandoned: its events are lost (counted by the reader's end check)
    {
      std::lock_guard<std::mutex> l(file_mu_);
      WriteStreamChunkLocked(s);
    }
    s->state.store(kClosed, std::memory_order_release);
  }
}

absl::Status TraceWriter::Close() {
  {
    std::lock_guard<std::mutex> l(file_mu_);
    if (closed_.exchange(true)) return close_status_;
  }
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> rl(r.mu);
    std::erase_if(r.live, [&](const auto& p) { return p.first == gen_; });
  }
  if (fd_.fd < 0) return close_status_;  // abandoned after fork
  CloseStreams();
  std::lock_guard<std::mutex> l(file_mu_);
  WriteModulesLocked(false);
  WritePendingMetaLocked();
  std::string end(kChunkHeaderBytes, '\0');
  // events of codes < 64, stacks, dropped, then (1.1) events of code 64,
  // (1.2) events of codes >= 65.
  const uint64_t ext = written_ext_events_.load(), later = written_later_events_.load();
  AppendVarint(&end, written_events_.load() - ext - later);
  AppendVarint(&end, stacks_.load());
  AppendVarint(&end, dropped_.load());
  AppendVarint(&end, ext);
  AppendVarint(&end, later);
  FillChunkHeader(reinterpret_cast<uint8_t*>(end.data()),
                  static_cast<uint32_t>(end.size() - kChunkHeaderBytes), 4, kChunkEnd, 0, 0, 0);
  bool ok = WriteAllLocked(end.data(), end.size());
  if (ok) chunks_.fetch_add(1);
  if (ok && ::fsync(fd_.fd) != 0) ok = false;
  int err = errno;
  // Renamed while still held (flock): no moment where another writer could
  // take PATH.incomplete for a leftover.
  if (!ok) {
    close_status_ = absl::ErrnoToStatus(err ? err : EIO, absl::StrCat("cannot complete trace ", tmp_path_));
  } else if (::rename(tmp_path_.c_str(), path_.c_str()) != 0) {
    close_status_ = absl::ErrnoToStatus(errno, absl::StrCat("cannot rename ", tmp_path_, " to ", path_));
  }
  core::CloseOwnFd(&fd_);
  return close_status_;
}

void TraceWriter::AbandonAfterFork() {
  closed_.store(true);
  {
    Registry& r = GetRegistry();
    std::lock_guard<std::mutex> rl(r.mu);
    std::erase_if(r.live, [&](const auto& p) { return p.first == gen_; });
  }
  core::CloseOwnFd(&fd_);  // the child's copy: the parent's flock stays
}

void TraceWriter::WriteStreamsFromSignalLocked() {
  WritePendingMetaLocked();
  for (size_t i = 0; i <= kMaxStreams; ++i) {
    Stream* s = slots_[i].load(std::memory_order_acquire);
    if (!s) continue;
    int spins = 0;
    int expected = kIdle;
    while (!s->state.compare_exchange_weak(expected, kTaken, std::memory_order_acquire)) {
      if (expected == kClosed || ++spins > 100000) break;
      expected = kIdle;
    }
    if (expected != kIdle) continue;
    WriteStreamChunkLocked(s);
    s->state.store(kIdle, std::memory_order_release);
  }
}

void TraceWriter::FlushFromSignalHandler() {
  if (fd_.fd < 0 || !file_mu_.try_lock()) return;
  WriteStreamsFromSignalLocked();
  if (fd_.fd >= 0) ::fdatasync(fd_.fd);
  file_mu_.unlock();
}

bool TraceWriter::CloseFromSignalHandler() {
  if (fd_.fd < 0 || !file_mu_.try_lock()) return false;
  if (fd_.fd < 0 || closed_.exchange(true)) {
    file_mu_.unlock();
    return false;
  }
  WriteStreamsFromSignalLocked();
  // The end record, as Close() writes it, on the stack.
  uint8_t end[kChunkHeaderBytes + 5 * 10];
  uint8_t* p = end + kChunkHeaderBytes;
  const uint64_t ext = written_ext_events_.load(), later = written_later_events_.load();
  p = PutVarint(p, written_events_.load() - ext - later);
  p = PutVarint(p, stacks_.load());
  p = PutVarint(p, dropped_.load());
  p = PutVarint(p, ext);
  p = PutVarint(p, later);
  const auto len = static_cast<uint32_t>(p - end - kChunkHeaderBytes);
  FillChunkHeader(end, len, 4, kChunkEnd, 0, 0, 0);
  bool ok = WriteAllLocked(reinterpret_cast<const char*>(end), kChunkHeaderBytes + len);
  if (ok) chunks_.fetch_add(1);
  ok = ok && ::fsync(fd_.fd) == 0;
  // c_str() of an existing string allocates nothing.
  ok = ok && ::rename(tmp_path_.c_str(), path_.c_str()) == 0;
  core::CloseOwnFd(&fd_);
  file_mu_.unlock();
  return ok;
}

WriterStats TraceWriter::stats() const {
  WriterStats s;
  s.events = events_.load();
  s.dropped = dropped_.load();
  s.chunks = chunks_.load();
  s.stacks = stacks_.load();
  s.bytes = bytes_.load();
  return s;
}

}  // namespace rdmasan::traces
