// interpose/off_options.h: a build of the shim without the off options'
// tests, for one benchmark only.
//
// Every option that is off by default (trace=, faults=, chaos=, schedule=
// and reorder= through the decider and the scheduler, hang_timeout='s
// watchdog, the in-process fuzzer's event hook) costs the data path a test
// of a word that says "off".  bench/speed.sh's goal 6 prices those tests:
// bench/postpoll_bench_bare links a copy of this library compiled with
// RDMASAN_OFF_OPTIONS_COMPILED_OUT=1, where each test is a constant "off",
// and full checking there is timed against full checking here.
//
// May not: be defined in anything but that benchmark's copy (with it the
// options above do nothing), or differ between the translation units of
// one link (each inline function must have one definition).
#ifndef RDMASAN_INTERPOSE_OFF_OPTIONS_H_
#define RDMASAN_INTERPOSE_OFF_OPTIONS_H_

#ifndef RDMASAN_OFF_OPTIONS_COMPILED_OUT
#define RDMASAN_OFF_OPTIONS_COMPILED_OUT 0
#endif

#endif  // RDMASAN_INTERPOSE_OFF_OPTIONS_H_
