// traces/reader: TraceReader (trace.h) up to its events: mapping the file,
// checking every chunk's framing and checksum, reading the header and the
// meta chunks (stacks, modules), and symbolizing through the module map.
// merge.cc reads the events.
//
// The whole file is scanned at Open so that a damaged trace fails (or is
// cut to its valid prefix) before any event is replayed; only a reader
// opened with Options::check_events_on_read leaves the checksums of the
// events chunks between the first and the last to merge.cc, which checks
// each before decoding it.
#include "traces/trace.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "traces/codec.h"
#include "traces/format.h"
#include "traces/header.h"
#include "traces/varint.h"

namespace rdmasan::traces {
namespace {

constexpr uint32_t kMaxChunkPayload = 64u << 20;  // anything larger is corrupt

// The magic and the format version, into h.
absl::Status CheckPrologue(const uint8_t* data, TraceHeader* h) {
  if (std::memcmp(data, kMagic, sizeof(kMagic)) != 0)
    return absl::InvalidArgumentError("offset 0: not an rdmasan trace (bad magic)");
  std::memcpy(&h->format_major, data + 8, 2);
  std::memcpy(&h->format_minor, data + 10, 2);
  if (h->format_major > kFormatMajor || h->format_major == 0)
    return absl::FailedPreconditionError(
        absl::StrFormat("offset 8: trace format %d.%d is not readable by this rdmasan (reads format %d.x, up "
                        "to %d.%d); use a newer "
                        "rdmasan",
                        h->format_major, h->format_minor, kFormatMajor, kFormatMajor, kFormatMinor));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path) {
  return Open(path, Options{});
}

absl::StatusOr<std::unique_ptr<TraceReader>> TraceReader::Open(const std::string& path,
                                                               const Options& options) {
  std::unique_ptr<TraceReader> r(new TraceReader);
  r->options_ = options;
  // O_NONBLOCK: a FIFO named as a trace is refused below, never waited on.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("cannot open trace ", path));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    return absl::ErrnoToStatus(err, absl::StrCat("cannot stat trace ", path));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrFormat("%s: not a regular file (%s)", path,
                                                      S_ISDIR(st.st_mode)    ? "a directory"
                                                      : S_ISFIFO(st.st_mode) ? "a FIFO"
                                                                             : "a device or socket"));
  }
  r->size_ = static_cast<uint64_t>(st.st_size);
  if (r->size_ < kPrologueBytes) {
    ::close(fd);
    return absl::InvalidArgumentError(
        absl::StrFormat("%s: offset 0: not an rdmasan trace (file is %d bytes)", path, r->size_));
  }
  void* m = mmap(nullptr, r->size_, PROT_READ, MAP_PRIVATE, fd, 0);
  ::close(fd);
  if (m == MAP_FAILED) return absl::ErrnoToStatus(errno, absl::StrCat("cannot map trace ", path));
  r->data_ = static_cast<const uint8_t*>(m);
  if (absl::Status s = r->Scan(); !s.ok())
    return absl::Status(s.code(), absl::StrCat(path, ": ", s.message()));
  return r;
}

absl::Status TraceReader::Scan() {
  if (absl::Status s = CheckPrologue(data_, &header_); !s.ok()) return s;
  uint64_t pos = kPrologueBytes;
  bool first = true;
  while (true) {
    if (pos == size_) {
      truncated_ = true;
      warning_ =
          absl::StrFormat("trace ends at offset %d without an end record (the writer did not finish)", pos);
      break;
    }
    if (size_ - pos < kChunkHeaderBytes) {
      truncated_ = true;
      warning_ =
          absl::StrFormat("trace stops at offset %d inside a chunk header (%d of %d bytes): writer killed?",
                          pos, size_ - pos, kChunkHeaderBytes);
      break;
    }
    const uint8_t* h = data_ + pos;
    const ChunkHeader c = ReadChunkHeader(h);
    const uint32_t len = c.len, count = c.count;
    const uint8_t kind = c.kind;
    if (len > kMaxChunkPayload) {
      // Could be a torn header at the very end too; a length this large is
      // corrupt either way.
      return absl::DataLossError(
          absl::StrFormat("chunk at offset %d: length %d exceeds the limit %d", pos, len, kMaxChunkPayload));
    }
    if (pos + kChunkHeaderBytes + len > size_) {
      truncated_ = true;
      warning_ = absl::StrFormat(
          "trace stops at offset %d inside a chunk (needs %d bytes, %d remain): writer killed?", pos,
          kChunkHeaderBytes + len, size_ - pos);
      break;
    }
    const uint8_t* payload = h + kChunkHeaderBytes;
    const bool last = pos + kChunkHeaderBytes + len == size_;
    // An events chunk in the middle may be left to OpenCursor (Options);
    // one whose framing is already wrong here is not.
    const bool check_later =
        options_.check_events_on_read && kind == kChunkEvents && !first && !last && count > 0 && count <= len;
    if (absl::Status s = check_later ? absl::OkStatus() : CheckChunk(pos); !s.ok()) {
      if (last && kind != kChunkEnd && !first) {
        truncated_ = true;
        warning_ = absl::StrFormat(
            "last chunk at offset %d fails its checksum (torn write); trace stops there", pos);
        break;
      }
      return s;
    }
    if (first && kind != kChunkHeader)
      return absl::DataLossError(
          absl::StrFormat("chunk at offset %d: the first chunk must be the header", pos));
    first = false;
    switch (kind) {
      case kChunkHeader:
        if (absl::Status s = DecodeHeader(payload, len, pos + kChunkHeaderBytes, &header_); !s.ok()) return s;
        break;
      case kChunkEvents:
        if (count > len)
          return absl::DataLossError(
              absl::StrFormat("chunk at offset %d: record count %d > length %d", pos, count, len));
        if (count > 0) chunks_.push_back({pos, len, count, c.stream, c.flags, c.min_seq, !check_later});
        break;
      case kChunkMeta:
        if (absl::Status s = ParseMetaChunk(payload, len, pos + kChunkHeaderBytes, count); !s.ok()) return s;
        break;
      case kChunkEnd: {
        Dec d{payload, payload + len};
        end_events_ = d.Varint();
        (void)d.Varint();  // stacks
        (void)d.Varint();  // dropped
        // Format 1.1 appends the count of decision events (code 64); a 1.0
        // writer's end chunk stops before it.
        end_ext_events_ = d.ok && d.left() > 0 ? d.Varint() : 0;
        // Format 1.2 appends the count of events of codes >= 65.
        end_later_events_ = d.ok && d.left() > 0 ? d.Varint() : 0;
        if (!d.ok)
          return absl::DataLossError(absl::StrFormat("chunk at offset %d: malformed end record", pos));
        have_end_ = true;
        break;
      }
      default:
        break;  // a chunk kind of a newer minor version: skipped
    }
    pos += kChunkHeaderBytes + len;
    if (have_end_) {
      if (pos != size_)
        return absl::DataLossError(
            absl::StrFormat("offset %d: %d bytes after the end record", pos, size_ - pos));
      break;
    }
  }
  std::stable_sort(chunks_.begin(), chunks_.end(),
                   [](const ChunkRef& a, const ChunkRef& b) { return a.min_seq < b.min_seq; });
  return absl::OkStatus();
}

absl::Status TraceReader::CheckChunk(uint64_t offset) const {
  const uint8_t* h = data_ + offset;
  const ChunkHeader c = ReadChunkHeader(h);
  uint32_t crc = ChunkCrc(h, h + kChunkHeaderBytes, c.len);
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
  crc = c.crc;  // let mutations reach the decoders behind the checksum
#endif
  if (crc == c.crc) return absl::OkStatus();
  return absl::DataLossError(absl::StrFormat(
      "chunk at offset %d: checksum mismatch (stored %08x, computed %08x)", offset, c.crc, crc));
}

absl::Status TraceReader::ParseMetaChunk(const uint8_t* p, size_t n, uint64_t off, uint32_t count) {
  Dec d{p, p + n};
  uint32_t records = 0;
  while (d.p < d.end) {
    uint64_t rec_off = off + static_cast<uint64_t>(d.p - p);
    auto bad = [&](std::string_view what) { return RecordError(rec_off, what); };
    uint64_t code = d.Varint();
    ++records;
    if (code == kCodeStack) {
      uint64_t id;
      uintptr_t pcs[core::kMaxStackFrames];
      size_t kept;
      if (!DecodeStackRecord(d, &id, pcs, &kept)) return bad("malformed stack record");
      if (id == 0 || id > UINT32_MAX) return bad(absl::StrCat("stack id ", id, " is out of range"));
      stacks_[id] = core::InternStack(pcs, kept);
    } else if (code == kCodeModule) {
      Module m;
      if (!DecodeModuleRecord(d, &m)) return bad("malformed module record");
      header_.modules.push_back(std::move(m));
    } else if (code >= kFirstSkippableCode) {
      uint64_t len = d.Varint();
      if (!d.ok || !d.Skip(len)) return bad("record overruns its chunk");
    } else {
      return bad(absl::StrCat("record kind ", code, " is not valid in a meta chunk"));
    }
  }
  if (records != count)
    return absl::DataLossError(absl::StrFormat("chunk at offset %d: %d records, the header says %d",
                                               off - kChunkHeaderBytes, records, count));
  return absl::OkStatus();
}

std::vector<std::pair<std::string, uintptr_t>> TraceReader::ModuleOffsets(core::StackId id) const {
  std::vector<std::pair<std::string, uintptr_t>> out;
  for (uintptr_t pc : core::StackPcs(id)) {
    const Module* best = nullptr;
    for (const Module& m : header_.modules)
      if (pc - 1 >= m.start && pc - 1 < m.end) best = &m;
    if (best) {
      out.emplace_back(best->path, pc - best->bias);
    } else {
      out.emplace_back("", pc);
    }
  }
  return out;
}

std::vector<core::Frame> TraceReader::Symbolize(core::StackId id) const {
  return core::SymbolizeOffline(ModuleOffsets(id));
}

}  // namespace rdmasan::traces
