// core/stack_internal: what the stack files share (core/stack_store.cc,
// stack_code_map.cc, stack_unwind.cc, stack_symbolize.cc); not for use
// outside core/stack_*.cc, which core/stack.h serves.
//
// May not: allocate from the heap (these run inside the capture path, which
// may run before any constructor and inside a hooked free), or lock but
// with the spin locks declared here.
#ifndef RDMASAN_CORE_STACK_INTERNAL_H_
#define RDMASAN_CORE_STACK_INTERNAL_H_

#include <cstddef>
#include <cstdint>

namespace rdmasan::core::stack_internal {

// Zeroed pages straight from mmap, or null.
void* MapZeroed(size_t size);

// Memory from the depot's arenas (16-byte aligned, zeroed, never freed), or
// null when no more can be mapped.
void* ArenaAlloc(size_t size);

// True if `ret` lies in a loaded object's text right after a call
// instruction, as a return address does (core/stack_code_map.cc).
bool IsReturnAddress(uintptr_t ret);

}  // namespace rdmasan::core::stack_internal

#endif  // RDMASAN_CORE_STACK_INTERNAL_H_
