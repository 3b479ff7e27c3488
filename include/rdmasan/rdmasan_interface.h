/* rdmasan_interface.h: what a program may declare to talk to rdmasan.
 *
 * rdmasan watches unmodified programs: nothing here is needed to use it.
 * A program that wants its own defaults (for example in a test binary that
 * always runs under `rdmasan run`) defines __rdmasan_default_options();
 * RDMASAN_OPTIONS and `rdmasan run --name=value` still win over it, as
 * ASAN_OPTIONS wins over __asan_default_options().
 *
 * May not: this header declares no function of the shim that a program
 * could call when the shim is absent (the hook is defined by the program
 * and only read by the shim), so a program built with it runs unchanged
 * without rdmasan.  C and C++. */
#ifndef RDMASAN_RDMASAN_INTERFACE_H_
#define RDMASAN_RDMASAN_INTERFACE_H_

#ifdef __cplusplus
extern "C" {
#endif

/* Returns "name=value:name=value" options read before RDMASAN_OPTIONS,
 * e.g. "checks=all:halt_on_error=1".  Defined by the program, optional;
 * read once, when the shim starts.  The shim is preloaded, not linked:
 * the program must export the definition (link it with -rdynamic, or
 * -Wl,--dynamic-list naming this symbol), or the shim cannot see it. */
const char *__rdmasan_default_options(void);

#ifdef __cplusplus
}
#endif

#endif /* RDMASAN_RDMASAN_INTERFACE_H_ */
