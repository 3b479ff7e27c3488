// traces: the on-disk record of one process's Event stream, and its replay.
//
// A trace is a file header (format version, tool version, process info,
// device attributes, the module map for offline symbolization) followed by
// checksummed chunks of compactly encoded records.  The format is specified
// in traces/FORMAT.md; traces/ is its only implementation, and the writer
// and the reader share every encoding below the file API so they cannot
// drift (the model is rr's TraceStream):
//   format.h   the framing: prologue, chunk headers, record codes
//   crc32c.h   the chunk checksum
//   varint.h   varints, zigzag, the bounds-checked decoder
//   codec.h    event and stack records against per-chunk templates
//   header.h   the header chunk and module records
//   writer.cc  TraceWriter;  reader.cc  TraceReader's scan of the file;
//   merge.cc   TraceReader::Next, which merges chunks into seq order
// This is the module's one public header; the others are internal to it.
//
// Writing (TraceWriter), the hot path, Append():
//  - Each appending thread owns a stream: a fixed 64 KiB buffer taken from
//    the writer at the thread's first Append.  Append encodes the event into
//    it with no lock: one uncontended compare-and-swap on a cache line the
//    thread owns (so Flush/Close from another thread can take the buffer
//    safely) and no allocation in steady state.  At most 64 streams exist
//    (4 MiB of buffers); threads beyond that share one overflow stream under
//    a mutex.  A thread's stream is recycled when it exits.
//  - A full buffer is turned into a chunk and written by the appending thread
//    itself (one write(2) per 64 KiB, i.e. per ~5000 events), under the file
//    mutex.  We chose this over a background flusher: no hand-off queue, no
//    buffer pool that can run dry and deadlock or drop, no extra thread in
//    the application (fork-safe), and the fatal-signal path can reach every
//    buffer directly.  The cost is an occasional page-cache write on an app
//    thread (~10 us per 64 KiB), ~2 ns per event amortized.
//  - The first reference to a stack id (Event::stack, SendWr::posted_at)
//    takes the file mutex once to queue the stack's definition; definitions
//    always reach the file before any chunk that references them.
//  - Events of different threads are written in per-thread chunks; the reader
//    merges them back into Event::seq order.
//
// May not: depend on anything but core/; allocate per event; take a lock per
// event; call the dynamic loader on the append path (the module map is
// refreshed only in Open, Flush and Close).
#ifndef RDMASAN_TRACES_TRACE_H_
#define RDMASAN_TRACES_TRACE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/event.h"
#include "core/own_fd.h"
#include "core/stack.h"

namespace rdmasan::traces {

// Format version, independent of the tool version (FORMAT.md, "Versions").
inline constexpr uint16_t kFormatMajor = 1;
inline constexpr uint16_t kFormatMinor = 5;

// One loaded ELF object of the recorded process: pc - bias is the address
// in the file (core::Frame::module_offset); [start, end) covers its PT_LOAD
// segments in the process.
struct Module {
  std::string path;
  uint64_t bias = 0;
  uint64_t start = 0;
  uint64_t end = 0;
  std::string build_id;  // lowercase hex of NT_GNU_BUILD_ID, "" if none
};

struct TraceHeader {
  // As read; the writer always writes kFormatMajor/kFormatMinor.
  uint16_t format_major = kFormatMajor;
  uint16_t format_minor = kFormatMinor;
  std::string tool_version;
  int64_t pid = 0;
  std::string executable;
  uint64_t argc = 0;              // the real argument count
  std::vector<std::string> argv;  // summary: first 32, each <= 256 bytes
  int64_t start_time_ns = 0;      // CLOCK_REALTIME, ns since the epoch
  std::vector<std::pair<std::string, std::string>> device_attrs;
  std::vector<std::pair<std::string, std::string>> properties;  // free-form (options, host, ...)
  std::vector<Module> modules;                                  // at Open; the reader adds later-loaded ones
};

// The running process: pid, /proc/self/exe, argv summary from
// /proc/self/cmdline, start time now, tool version, CurrentModules().
// The caller adds device_attrs and properties.
TraceHeader CurrentProcessHeader();
// Every loaded ELF object (dl_iterate_phdr).  Not for signal handlers.
std::vector<Module> CurrentModules();
// "%p" -> pid, "%%" -> "%".
std::string ExpandTracePath(std::string_view pattern, int64_t pid);

// The traces of a process tree, one per process image (tree.cc): the file
// the image `pid` of run `run` writes for the trace= `pattern`: the
// expanded pattern unless it holds a trace of this run or a live writer
// holds it, else the first free name of PATH.<pid>, PATH.<pid>.1, ...
// (PATH.1, PATH.2, ... where the pattern has %p).
std::string TracePathForImage(std::string_view pattern, int64_t pid, const std::string& run);
// Chooses that name and opens the writer there (header gets the "run"
// property), under an flock of the folder so concurrent images never race
// for a name.
class TraceWriter;
absl::StatusOr<std::unique_ptr<TraceWriter>> OpenImageTrace(std::string_view pattern, int64_t pid,
                                                            const std::string& run, TraceHeader header);
// Whether a live writer holds this PATH.incomplete (its flock).
bool TraceBeingWritten(const std::string& incomplete_path);
// The other traces of the tree `path` (PATH or PATH.incomplete) is the
// first image's trace of: PATH.<n>[.<m>][.incomplete] beside it, sorted.
std::vector<std::string> TraceSetMembers(const std::string& path);

struct WriterStats {
  uint64_t events = 0;   // appended and encoded
  uint64_t dropped = 0;  // appended after Close, too large (> 16 MiB), or lost to a write error
  uint64_t chunks = 0;   // written to the file
  uint64_t stacks = 0;   // stack definitions written
  uint64_t bytes = 0;    // file bytes written so far
};

class TraceWriter {
 public:
  // Creates PATH.incomplete (replacing a stale one of ours; EBUSY if a live
  // writer holds it) and writes the header; the writer holds an flock on
  // it until Close.  The file becomes PATH only when Close() succeeds.  Its
  // descriptor is an own fd (core/own_fd.h): checked before each write,
  // reopened if the program closed it behind our back.
  static absl::StatusOr<std::unique_ptr<TraceWriter>> Open(const std::string& path,
                                                           const TraceHeader& header);
  ~TraceWriter();  // Close()s, ignoring its status

  TraceWriter(const TraceWriter&) = delete;
  TraceWriter& operator=(const TraceWriter&) = delete;

  // Thread-safe; see the file comment.  Events appended after Close are
  // counted as dropped.
  void Append(const core::Event& e);

  // Writes every stream's buffered events (and any modules loaded since,
  // when header.pid is this process) now; a
  // stream in the middle of an Append is waited for.
  absl::Status Flush();

  // Flush, end record, fsync, rename PATH.incomplete -> PATH.  Idempotent;
  // later Appends are dropped.  Threads must not be inside Append for long
  // after Close begins: a stream still busy after 1 s is abandoned.
  absl::Status Close();

  // For a fatal-signal handler: writes what can be written without
  // allocating or blocking, then fdatasync()s; the file stays
  // PATH.incomplete (a crashed run is recognisable) and readers take it as a
  // valid prefix.  Async-signal-safe: only atomics, write(2) and
  // fdatasync(2).  Limits: the file mutex is only tried (if the interrupted
  // thread holds it, nothing is written); a stream that is mid-Append (the
  // interrupted thread's own, or another thread's after a short spin) is
  // skipped; modules loaded after the last Flush are not recorded.  Safe to
  // call more than once; Append may continue afterwards.
  void FlushFromSignalHandler();

  // For the handler of a signal that ends the process without a crash
  // (SIGTERM, SIGINT, SIGHUP, SIGALRM, SIGUSR1, ...): what
  // FlushFromSignalHandler writes, then the end record, fsync, close and the
  // rename PATH.incomplete -> PATH, so the trace is complete.  Same limits
  // and async-signal safety (no allocation: the end record is built on the
  // stack); false, leaving the file as the flush left it, if the file mutex
  // is held or the writer is already closed.  Later Appends are dropped.
  bool CloseFromSignalHandler();

  // In the child after fork(): forget the parent's file (no write, no
  // rename: the parent still owns it); later Appends are dropped.  Open a
  // new writer for the child's own trace.
  void AbandonAfterFork();

  WriterStats stats() const;
  const std::string& path() const { return path_; }

  struct Stream;  // per-thread buffer, writer.cc

 private:
  TraceWriter() = default;
  Stream* StreamForThisThread();
  Stream* NewStreamLocked();
  void ReleaseStream(Stream* s);
  void AppendTo(Stream* s, const core::Event& e);
  void DefineStack(core::StackId id);
  bool StackDefined(core::StackId id) const;
  // Under file_mu_: writes the pending stack chunk (if any), then s's chunk.
  void WriteStreamChunkLocked(Stream* s);
  void WritePendingMetaLocked();
  void WriteModulesLocked(bool all);
  bool WriteAllLocked(const char* p, size_t n);
  void AppendLarge(Stream* s, const core::Event& e);
  void CloseStreams();
  // Under file_mu_, from a signal handler: writes every stream not in the
  // middle of an Append.
  void WriteStreamsFromSignalLocked();

  friend struct ThreadStreams;

  std::string path_, tmp_path_;
  core::OwnFd fd_;    // out of the program's way (core/own_fd.h)
  uint64_t gen_ = 0;  // unique per writer, names it in thread-local caches
  std::atomic<bool> closed_{false};
  std::atomic<bool> write_failed_{false};

  // Guards the file offset, pending_meta_, modules_, slots_ (additions),
  // free_streams_, next_stream_id_ and the stack bitmap's allocation.
  std::mutex file_mu_;
  std::vector<char> pending_meta_;  // encoded stack/module records not yet written
  uint32_t pending_meta_records_ = 0;
  std::vector<Module> modules_;   // already recorded
  bool refresh_modules_ = false;  // the header describes this process
  std::vector<Stream*> free_streams_;
  uint32_t next_stream_id_ = 1;
  Stream* overflow_ = nullptr;
  std::mutex overflow_mu_;  // serializes Appends to the overflow stream

  // Which stack ids have a definition queued: 1024 segments of 16384 bits.
  static constexpr size_t kStackSegBits = 14;
  std::atomic<std::atomic<uint64_t>*> stack_bits_[1024] = {};

  // Every stream ever made (they are recycled, never freed before the
  // writer): a fixed array so the signal path can walk it without a lock.
  static constexpr size_t kMaxStreams = 64;
  std::atomic<Stream*> slots_[kMaxStreams + 1] = {};  // + the overflow stream
  std::atomic<size_t> num_slots_{0};
  std::atomic<uint64_t> written_events_{0};
  std::atomic<uint64_t> written_ext_events_{0};    // of them, events of code 64 (end chunk)
  std::atomic<uint64_t> written_later_events_{0};  // of them, events of codes >= 65 (end chunk, 1.2)
  absl::Status close_status_;

  std::atomic<uint64_t> events_{0}, dropped_{0}, chunks_{0}, stacks_{0}, bytes_{0};
};

class TraceReader {
 public:
  // Reads the header and checks every chunk's framing and checksum.  Errors
  // (each names the byte offset): not a trace / wrong magic, a newer major
  // format version, a chunk failing its checksum before the last one, a
  // malformed header or stack record.  A trace that simply stops (killed
  // writer: no end record, partial or torn last chunk) opens fine, yields
  // its valid prefix, and sets truncated()/warning().
  static absl::StatusOr<std::unique_ptr<TraceReader>> Open(const std::string& path);
  struct Options {
    // Read as a format 1.0 reader does: skip every length-prefixed record
    // (code >= 64, e.g. kDecision events) and count only the others
    // against the end chunk.  For tests of the compatibility promise.
    bool skip_extension_events = false;
    // Read as a format 1.1 reader does: skip the records of codes >= 65
    // (memory-window events, format 1.2) and count only the others.
    bool skip_window_events = false;
    // Check an events chunk's checksum when the reading reaches it, not
    // at Open (`rdmasan replay`: its decoding thread checks each chunk
    // just before decoding it, while the chunk is in the cache, instead
    // of the opening thread reading the whole file once more first).  A
    // damaged chunk is then the error of Next/NextBatch, with the words
    // Open would have used, after the events before it.  The first and
    // the last chunk of the file and every chunk of another kind are
    // still checked at Open (a torn last chunk ends the valid prefix).
    bool check_events_on_read = false;
  };
  static absl::StatusOr<std::unique_ptr<TraceReader>> Open(const std::string& path, const Options& options);
  ~TraceReader();

  const TraceHeader& header() const { return header_; }

  // The next event in Event::seq order; false at the end.  Event::stack and
  // SendWr::posted_at are ids in this process's depot (core::InternStack of
  // the recorded PCs).  A malformed record is an error naming its offset.
  absl::StatusOr<bool> Next(core::Event* out);
  // Up to `max` next events into out[0..n), the same as n calls of Next
  // (the replay's path: a run of one chunk's events decodes with no merge
  // step per event).  Returns n; fewer than `max` only at the end or at a
  // malformed record, whose error goes to *error (the n events before it
  // are good).  Decoding into the same Events again reuses their WR and
  // completion slots.
  size_t NextBatch(core::Event* out, size_t max, absl::Status* error);

  bool truncated() const { return truncated_; }
  const std::string& warning() const { return warning_; }

  // (module path, module offset) of each PC of a stack read from this trace,
  // through the recorded module map, for core::SymbolizeOffline.  PCs outside
  // every module give ("", pc).
  std::vector<std::pair<std::string, uintptr_t>> ModuleOffsets(core::StackId id) const;
  // core::SymbolizeOffline(ModuleOffsets(id)).
  std::vector<core::Frame> Symbolize(core::StackId id) const;

  uint64_t events_read() const { return events_read_; }
  uint64_t file_size() const { return size_; }
  size_t chunk_count() const { return chunks_.size(); }

  struct Cursor;  // merge.cc

 private:
  TraceReader();  // in merge.cc, where Cursor is complete
  absl::Status Scan();
  absl::Status ParseMetaChunk(const uint8_t* p, size_t n, uint64_t off, uint32_t count);
  absl::Status OpenCursor(size_t chunk);
  // The checksum of the chunk whose header is at `offset`: Open's error.
  absl::Status CheckChunk(uint64_t offset) const;
  absl::StatusOr<core::StackId> MapStack(uint64_t trace_id, uint64_t off) const;

  struct ChunkRef {
    uint64_t offset;  // of the chunk header
    uint32_t len, count, stream;
    uint8_t flags;
    uint64_t min_seq;
    bool checked;  // its checksum (false: OpenCursor checks it)
  };

  TraceHeader header_;
  const uint8_t* data_ = nullptr;  // the mmap'd file
  uint64_t size_ = 0;
  std::vector<ChunkRef> chunks_;  // event chunks, by min_seq
  size_t next_chunk_ = 0;
  std::vector<std::unique_ptr<Cursor>> cursors_;         // heap by head seq
  absl::flat_hash_map<uint64_t, core::StackId> stacks_;  // trace id -> local id
  bool truncated_ = false;
  std::string warning_;
  bool have_end_ = false;
  uint64_t end_events_ = 0;        // events of codes < 64 (end chunk field 1)
  uint64_t end_ext_events_ = 0;    // events of code 64 (field 4, format 1.1)
  uint64_t end_later_events_ = 0;  // events of codes >= 65 (field 5, format 1.2)
  Options options_;
  uint64_t events_read_ = 0;
  bool finished_ = false;
};

}  // namespace rdmasan::traces

#endif  // RDMASAN_TRACES_TRACE_H_
