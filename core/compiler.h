// core/compiler: attributes that work around the compilers rdmasan is built
// with.  Each says which compiler, which flags and what goes wrong.
//
// May not: change what the code means in a build the workaround is not for.
#ifndef RDMASAN_CORE_COMPILER_H_
#define RDMASAN_CORE_COMPILER_H_

// GCC 12 with -fsanitize=null at -O3 miscompiles the null check
// it puts on a thread-local's address (the branch reads flags that the
// `lea` computing the address never set) and reports a null load on every
// access.  A thread-local's address is never null: the few functions whose
// only pointer is one skip that check, and are kept out of line there, or
// inlining would bring the check back from the caller.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define RDMASAN_TLS_ACCESSOR __attribute__((no_sanitize("null"), noinline))
#else
#define RDMASAN_TLS_ACCESSOR
#endif

#endif  // RDMASAN_CORE_COMPILER_H_
