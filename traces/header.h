// traces/header: the trace's description of the recorded process: the
// header chunk (tagged fields, FORMAT.md "Header chunk") and the module
// records of meta chunks (the module map, for offline symbolization).
//
// Module records go in meta chunks as well as the header because a process
// loads libraries after the trace is opened; the reader appends them to
// TraceHeader::modules.
//
// May not: depend on anything but core/ and the other traces/ seams; be
// called from the writer's Append path or a signal handler (it allocates,
// and CurrentModules() calls the dynamic loader).
#ifndef RDMASAN_TRACES_HEADER_H_
#define RDMASAN_TRACES_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "traces/trace.h"
#include "traces/varint.h"

namespace rdmasan::traces {

// The header chunk's payload.
std::string EncodeHeader(const TraceHeader& h);
// Fills *h from a header chunk's payload [p, p + n) at file offset off.
// Unknown tags (a newer minor version's) are skipped.
absl::Status DecodeHeader(const uint8_t* p, size_t n, uint64_t off, TraceHeader* h);

// A whole module record (code and body) for a meta chunk.
void AppendModuleRecord(std::string* out, const Module& m);
// A module record's body, read after its code; false if malformed.
bool DecodeModuleRecord(Dec& d, Module* m);

}  // namespace rdmasan::traces

#endif  // RDMASAN_TRACES_HEADER_H_
