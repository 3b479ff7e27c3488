#!/usr/bin/env bash
# rpc_fuzz_bench.sh: executions (schedules) per second of in-process fuzzing
# (include/rdmasan/rdmasan_fuzz.h) over examples/rpc, on one core, as
# libFuzzer counts them (-print_final_stats=1: stat::average_exec_per_sec).
# Each execution is one completion order of RPC_FUZZ_RPCS RPCs (default 8)
# between the client and the server in one process, judged by the checkers.
#   - fast: fuzz/rpc_fuzzer.cc linked with the optimized librdmasan.so (as an
#     installed rdmasan is used); target >= 10,000 exec/s
#   - asan: the same target built with the shim's objects under ASan+UBSan
#     and coverage (the fuzz build), for comparison
# Then runs to first find of the planted reply-before-send bug (fast build),
# over a few libFuzzer seeds.
#
# usage: bench/rpc_fuzz_bench.sh [--strict] [SECONDS]   (default 20 s per run)
#   --strict   exit 1 when fast is under 10,000 exec/s
# environment: BUILD_DIR (default build; the targets are in
#              BUILD_DIR/fuzz-clang, built by `cmake --build build`), SEEDS
#              (default "1 2 3 4 5")
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
fz=$build/fuzz-clang
strict=0
[[ ${1:-} == --strict ]] && { strict=1; shift; }
secs=${1:-20}
out=$build/bench-out/rpc_fuzz
mkdir -p "$out"
for f in rpc_fuzzer_fast_correct rpc_fuzzer rpc_fuzzer_fast_reply_before_send; do
  [[ -x $fz/$f ]] || { echo "bench: $fz/$f not found; build first (cmake --build build)" >&2; exit 1; }
done

# One core: taskset when there is one to pin to.
pin=()
command -v taskset >/dev/null && pin=(taskset -c 0)

measure() {  # NAME BINARY -> prints exec/s
  local name=$1 bin=$2
  rm -rf "$out/$name" && mkdir -p "$out/$name"
  "${pin[@]}" "$bin" -max_total_time="$secs" -print_final_stats=1 "$out/$name" >"$out/$name.log" 2>&1
  sed -n 's/^stat::average_exec_per_sec: *//p' "$out/$name.log"
}

fast=$(measure fast "$fz/rpc_fuzzer_fast_correct")
asan=$(measure asan "$fz/rpc_fuzzer")
echo "rpc_fuzz_bench: fast (librdmasan.so -O3): ${fast:-?} exec/s  (command: $fz/rpc_fuzzer_fast_correct -max_total_time=$secs -print_final_stats=1 DIR)"
echo "rpc_fuzz_bench: asan (shim objects, ASan+UBSan+coverage): ${asan:-?} exec/s"

for seed in ${SEEDS:-1 2 3 4 5}; do
  d=$out/find-$seed
  rm -rf "$d" && mkdir -p "$d/corpus"
  "${pin[@]}" "$fz/rpc_fuzzer_fast_reply_before_send" -seed="$seed" -max_total_time=60 -print_final_stats=1 \
    -artifact_prefix="$d/" "$d/corpus" >"$d/log" 2>&1
  n=$(sed -n 's/^stat::number_of_executed_units: *//p' "$d/log")
  grep -q "ERROR: rdmasan: buffer-modified-in-flight" "$d/log" && r="found after ${n:-?} executions" || r="NOT found in 60 s"
  echo "rpc_fuzz_bench: reply-before-send, libFuzzer -seed=$seed: $r"
done

[[ -n $fast ]] || exit 1
if (( strict )) && (( fast < 10000 )); then
  echo "rpc_fuzz_bench: FAIL: $fast exec/s < 10000"
  exit 1
fi
