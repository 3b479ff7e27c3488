// interpose/memory: registered ranges, payload hashing and the free/realloc/
// munmap/fork interposers (memory.cc).
#ifndef RDMASAN_INTERPOSE_MEMORY_H_
#define RDMASAN_INTERPOSE_MEMORY_H_

#include <cstddef>
#include <cstdint>

namespace rdmasan::interpose {

// Successful registrations and deregistrations of [addr, addr+length).
void NoteRegistered(const void* addr, size_t length);
void NoteDeregistered(const void* addr, size_t length);

// Hash of a send payload per the buffer_check option (full, sampled, off);
// 0 when not hashed (off, or the range is not inside registered memory).
uint64_t HashPayload(uint64_t addr, uint32_t length);
// Whether the payloads of this post are hashed at all (buffer_check: full
// always, off never, sampled for a sample of each thread's posts).
bool SamplePost();

// For the libc interposers (libc_hooks.cc).
using FreeFn = void (*)(void*);
using ReallocFn = void* (*)(void*, size_t);
using MunmapFn = int (*)(void*, size_t);
using ForkFn = int (*)();
bool MayOverlap(uintptr_t a, size_t n);  // lock-free, may say yes wrongly
bool OverlapsRegistered(uintptr_t a, size_t n);
FreeFn RealFree();
// Reports a release of registered memory, then stops treating that memory
// as readable (no more payload hashing inside it).
void EmitFree(uintptr_t a, size_t n, uint32_t stack);
void ForgetFreedRanges(uintptr_t a, size_t n);

}  // namespace rdmasan::interpose

#endif  // RDMASAN_INTERPOSE_MEMORY_H_
