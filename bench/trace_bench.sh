#!/usr/bin/env bash
# trace_bench.sh: the cost and size of traces, in one run on one machine:
#   - recording overhead: ib_send_bw -s 8 message rate under `rdmasan run`
#     (full checking) without and with --trace (both processes record),
#     target <= 10 % lower;
#   - bytes per event of the traces just written, target <= 16;
#   - replay speed: `rdmasan replay` of the client's trace, events/s, target
#     >= 10 M/s (the replay runs the checkers too; the reader alone is
#     measured by build/trace_synth bench).
# The two runs alternate three times; each mode keeps its best message rate.
#
# usage: bench/trace_bench.sh        environment: BUILD_DIR (build), ITERS (300000)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
iters=${ITERS:-300000}
out=$build/bench-out/trace
mkdir -p "$out"
rm -f "$out"/*.trace "$out"/*.incomplete

# shellcheck source=bench/ports.sh
source "$repo/bench/ports.sh"

# Runs one ib_send_bw -s 8 pair; prints the client's MsgRate[Mpps].
run_send_bw() {
  local name=$1; shift
  local port
  port=$(free_port)
  "$repo/tests/e2e/run_pair.sh" --rdmasan "$build/rdmasan" --outdir "$out" --timeout 300 --quiet \
    --opt softnic=on --opt "suppressions=$repo/suppressions/perftest.supp" "$@" \
    "$name" "$port" -- ib_send_bw -d softnic0 -p "$port" -F -s 8 -n "$iters" \
    --- ib_send_bw -d softnic0 -p "$port" -F -s 8 -n "$iters" 127.0.0.1 >/dev/null 2>&1 || return 1
  awk '$1 == 8 && NF >= 5 { print $5 }' "$out/$name.client.log" | tail -1
}

best() { printf '%s\n' "$@" | sort -g | tail -1; }

plain=() traced=()
for round in 1 2 3; do
  plain+=("$(run_send_bw "plain$round")") || { echo "trace_bench: plain run failed" >&2; exit 1; }
  rm -f "$out"/*.trace
  traced+=("$(run_send_bw "traced$round" --opt "trace=$out/send_bw.%p.trace")") ||
    { echo "trace_bench: traced run failed" >&2; exit 1; }
done
p=$(best "${plain[@]}") t=$(best "${traced[@]}")

client_trace=$(ls -S "$out"/send_bw.*.trace | head -1)
events=0 bytes=0
for f in "$out"/send_bw.*.trace; do
  e=$("$build/rdmasan" trace stats "$f" | awk '/^events:/ {print $2}')
  b=$(stat -c %s "$f")
  events=$((events + e)) bytes=$((bytes + b))
done
client_events=$("$build/rdmasan" trace stats "$client_trace" | awk '/^events:/ {print $2}')
t0=$(date +%s.%N)
"$build/rdmasan" replay "$client_trace" >/dev/null 2>&1
t1=$(date +%s.%N)

awk -v p="$p" -v t="$t" -v ev="$events" -v by="$bytes" -v cev="$client_events" -v t0="$t0" -v t1="$t1" 'BEGIN {
  cost = (p - t) / p * 100; bpe = by / ev; rate = cev / (t1 - t0) / 1e6
  printf "trace benchmark: ib_send_bw -s 8 under full checking, best of 3 runs each\n"
  printf "%-40s %12s %10s %s\n", "measure", "value", "target", "result"
  printf "%-40s %9.3f Mpps\n", "message rate without --trace", p
  printf "%-40s %9.3f Mpps\n", "message rate with --trace", t
  printf "%-40s %10.1f %% %10s %s\n", "recording cost", cost, "<= 10 %", (cost <= 10 ? "PASS" : "MISS")
  printf "%-40s %12.1f %10s %s\n", "bytes per event (" ev " events)", bpe, "<= 16", (bpe <= 16 ? "PASS" : "MISS")
  printf "%-40s %8.2f M/s %10s %s\n", "replay with checking (" cev " events)", rate, ">= 10 M/s", (rate >= 10 ? "PASS" : "MISS")
}'
if [[ -x $build/trace_synth ]]; then
  echo "reader alone, 10 M synthetic events:"
  "$build/trace_synth" bench 10000000 "$out/synth.trace" | tail -3
  rm -f "$out/synth.trace"
fi
