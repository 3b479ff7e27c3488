// traces/crc32c: the checksum of trace chunks (CRC-32C, Castagnoli).
//
// CRC-32C rather than zlib's CRC-32 because x86-64 computes it in hardware
// (SSE4.2), 8 bytes per instruction, which keeps checksumming off the
// writer's profile; other CPUs get the table-driven version.
//
// May not: depend on anything (not even core/); allocate; be anything but
// async-signal-safe (the writer's fatal-signal path checksums chunks).
#ifndef RDMASAN_TRACES_CRC32C_H_
#define RDMASAN_TRACES_CRC32C_H_

#include <cstddef>
#include <cstdint>

namespace rdmasan::traces {

// Chainable: Crc32c(Crc32c(0, a), b) == Crc32c(0, a ++ b).
uint32_t Crc32c(uint32_t crc, const uint8_t* p, size_t n);

}  // namespace rdmasan::traces

#endif  // RDMASAN_TRACES_CRC32C_H_
