// rpc_fuzzer: examples/rpc's client and server in one process
// (examples/rpc/rpc_inproc.h) under in-process fuzzing
// (include/rdmasan/rdmasan_fuzz.h): each input is a completion order (and,
// with RDMASAN_OPTIONS=faults=..., faults) for RPC_FUZZ_RPCS RPCs (default
// 8: one per client slot) between the two; rdmasan's checkers judge it.
// Built twice: rpc_fuzzer (mode correct: no input may give a finding) and
// rpc_fuzzer_reply_before_send (the order-dependent planted bug, which an
// input that delivers a reply's completion before its request SEND's finds
// as buffer-modified-in-flight).  RPC_FUZZ_MODE=<mode> overrides the mode.
//
// The pair (device contexts, PDs, CQs, QPs, MRs, posted receives) is set
// up once, before the first input's decisions, and kept: an input leaves
// every WR retired.  A run the example itself fails (its own checks, not
// rdmasan's) aborts too, unless faults are being injected: then the pair
// is closed and set up again for the next input (a failure after an
// injected fault is the program behaving).
#include <infiniband/verbs.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <rdmasan/rdmasan_fuzz.h>
#include "examples/rpc/rpc_inproc.h"

RDMASAN_FUZZ_DEFINE_COUNTERS();

#ifndef RPC_FUZZ_MODE
#define RPC_FUZZ_MODE "correct"
#endif

namespace {

rpc_inproc* g_pair = nullptr;
rpc_mode g_mode = MODE_CORRECT;
uint32_t g_rpcs = 8;
bool g_faults = false;

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  const char* mode = std::getenv("RPC_FUZZ_MODE");
  int m = rpc_parse_mode(mode && *mode ? mode : RPC_FUZZ_MODE);
  if (m < 0) {
    std::fprintf(stderr, "rpc_fuzzer: unknown mode '%s'\n", mode);
    std::exit(2);
  }
  g_mode = static_cast<rpc_mode>(m);
  if (const char* n = std::getenv("RPC_FUZZ_RPCS"))
    g_rpcs = static_cast<uint32_t>(std::strtoul(n, nullptr, 0));
  if (g_rpcs == 0) g_rpcs = 1;
  const char* opts = std::getenv("RDMASAN_OPTIONS");
  const char* f = opts ? std::strstr(opts, "faults=") : nullptr;
  g_faults = f && f[7] != '\0' && f[7] != ':';
  if (rdmasan_fuzz_init(nullptr)) std::exit(2);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_pair) {  // before the input's decisions: set up in the natural order
    g_pair = rpc_inproc_open(g_mode, nullptr);
    if (!g_pair) {
      std::fprintf(stderr, "rpc_fuzzer: cannot set up the client/server pair\n");
      std::abort();
    }
  }
  rdmasan_fuzz_begin(data, size);
  if (rpc_inproc_run(g_pair, g_rpcs) != 0) {
    if (!g_faults) {
      std::fprintf(stderr, "rpc_fuzzer: the example failed with no fault injected\n");
      std::abort();
    }
    rpc_inproc_close(g_pair);  // the books are wrong now: start over
    g_pair = nullptr;
  }
  rdmasan_fuzz_end();
  return 0;
}
