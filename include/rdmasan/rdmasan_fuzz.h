/* rdmasan_fuzz.h: in-process fuzzing of a program's own verbs code (a ULP)
 * with libFuzzer: the fuzzer's input bytes choose the completion order
 * (and, if asked, the faults), rdmasan's checkers judge every input, and
 * an input with an Error finding aborts so that libFuzzer keeps it.
 *
 *   #include <rdmasan/rdmasan_fuzz.h>
 *   RDMASAN_FUZZ_DEFINE_COUNTERS();           // once, in the fuzz target
 *   int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
 *     rdmasan_fuzz_begin(data, size);
 *     if (!ready) ready = setup() == 0;        // verbs objects, kept across inputs
 *     run_some_requests();                     // the ULP code under test
 *     rdmasan_fuzz_end();                      // aborts on an Error finding
 *     return 0;
 *   }
 *
 * What it does.  rdmasan_fuzz_begin() makes `data` the source of every
 * decision of the input (core/decision.h's byte source: bytes consumed in
 * order, all 0 once exhausted, so an empty input is the natural order)
 * and resets the per-input state: hit counters (faults= nth counts hits
 * within one input), the completion scheduler, the extra counters' view of
 * the QPs.  Softnic runs on a fabric private to the process
 * (softnic_fabric=inproc): client and server live in one process and one
 * thread, and a work request is executed when it is posted, so an input
 * runs the same way every time.  rdmasan_fuzz_end() returns the number of
 * findings reported during the input; if an Error finding was reported it
 * prints one line saying so and calls abort(): the report (with its
 * stacks) is already printed, and libFuzzer's SIGABRT handler saves the
 * input as crash-<sha1>.  Re-running the target on that file reproduces it;
 * with RDMASAN_OPTIONS=decision_log=PATH the rerun also writes the
 * decisions as a log for `rdmasan run --schedule=PATH`.
 *
 * Options (RDMASAN_OPTIONS syntax), lowest precedence first: the fuzzing
 * defaults "softnic=on:softnic_fabric=inproc:reorder=random:
 * buffer_check=full", the string given to rdmasan_fuzz_init(), then the
 * environment's RDMASAN_OPTIONS (e.g. faults=wc.error:p=0.05,
 * reorder=pct, reorder_delay=8).  Leave halt_on_error off: every Error
 * finding ends its input anyway, and halt_on_error would _exit before
 * libFuzzer saves the input.
 *
 * Extra coverage.  RDMASAN_FUZZ_DEFINE_COUNTERS() defines an array of
 * 8-bit counters in the section "__libfuzzer_extra_counters" of the fuzz
 * target (the section must be in the executable, so the macro is expanded
 * there, at file scope, once) and registers it.  rdmasan bumps a counter
 * for each (completion kind and status, QP state, sends outstanding on
 * the QP, the previous completion's kind on that CQ), for each
 * scheduler or fault decision (point, outcome), for each finding (check,
 * what preceded it) and for each pair of consecutive verbs calls, so
 * libFuzzer keeps inputs that reach new completion orders even when the
 * program's own code coverage does not change.
 *
 * Linking.  The functions live in the shim: link the fuzz target with
 * librdmasan.so (-L<prefix>/lib/rdmasan -lrdmasan -Wl,-rpath,<that dir>)
 * and not with libibverbs (the shim's verbs are the ones called), or, in
 * rdmasan's own build, with the static archive of the shim's objects
 * (fuzz/CMakeLists.txt: rdmasan_interpose).  Built with
 * clang -fsanitize=fuzzer(,address); add -g -gdwarf-aranges (clang emits
 * no .debug_aranges by default, and without them the report's frames
 * have no source lines).
 *
 * May not / the harness must: call the verbs from one thread only between
 * begin and end (decisions are consumed in call order); end every input
 * with every posted send completed and polled and nothing held by the
 * scheduler (poll until the program's own books balance, as a clean
 * teardown would): what is left over would be judged by the next input;
 * set up verbs objects only after rdmasan_fuzz_init() or the first
 * rdmasan_fuzz_begin() (not in a constructor); never rely on a decision
 * made outside begin/end (they are all 0 before the first input; between
 * inputs they continue from the last input's bytes).  rdmasan does not
 * install its `crash` signal handlers here: libFuzzer's and the
 * sanitizers' report crashes.  The functions are not async-signal-safe and
 * are not available when the shim is only preloaded under a program that
 * does not link it.  C and C++. */
#ifndef RDMASAN_RDMASAN_FUZZ_H_
#define RDMASAN_RDMASAN_FUZZ_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Optional; once, before the first verbs call (LLVMFuzzerInitialize is a
 * good place).  `options` ("name=value:name=value", may be NULL) goes on
 * top of the fuzzing defaults, under RDMASAN_OPTIONS.  Returns 0, or -1
 * after printing what is wrong with the options.  rdmasan_fuzz_begin()
 * calls it with NULL if it was not called (and aborts if that fails). */
int rdmasan_fuzz_init(const char *options);

/* The input `data` (`size` bytes, copied) decides everything until the
 * next rdmasan_fuzz_begin(). */
void rdmasan_fuzz_begin(const uint8_t *data, size_t size);

/* Findings reported since rdmasan_fuzz_begin() (Warnings; 0 if none).
 * Does not return if one was an Error: abort(). */
int rdmasan_fuzz_end(void);

/* Registers the extra-counter array (RDMASAN_FUZZ_DEFINE_COUNTERS does
 * it; call it yourself only for an array of your own in that section). */
void rdmasan_fuzz_set_counters(uint8_t *counters, size_t n);

#define RDMASAN_FUZZ_NUM_COUNTERS 4096

#define RDMASAN_FUZZ_DEFINE_COUNTERS()                                                    \
  __attribute__((section("__libfuzzer_extra_counters"),                                   \
                 used)) static uint8_t rdmasan_fuzz_counters_[RDMASAN_FUZZ_NUM_COUNTERS]; \
  __attribute__((constructor)) static void rdmasan_fuzz_register_counters_(void) {        \
    rdmasan_fuzz_set_counters(rdmasan_fuzz_counters_, sizeof(rdmasan_fuzz_counters_));    \
  }                                                                                       \
  typedef int rdmasan_fuzz_counters_defined_

#ifdef __cplusplus
}
#endif

#endif /* RDMASAN_RDMASAN_FUZZ_H_ */
