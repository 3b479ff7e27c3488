#!/usr/bin/env bash
# trace_bench.sh: the cost and size of traces, and the speed of reading
# them, in one run on one machine:
#   - recording overhead: ib_send_bw -s 8 message rate under `rdmasan run`
#     (full checking) without and with --trace (both processes record),
#     target <= 10 % lower;
#   - bytes per event of the traces just written, target <= 16;
#   - replay speed: `rdmasan replay` (the reader and every checker) of the
#     larger trace of a longer traced run (~REPLAY_EVENTS events: the
#     server's, its receives and polls), target >= 20 M events/s (issue 33);
#   - the reader alone on that trace (build/trace_synth read: decoding
#     every event, no checker), target >= 40 M events/s.
# The recording runs alternate three times; each mode keeps its best
# message rate.  The replay and the reader alone alternate three times
# too; each keeps its best.
#
# usage: bench/trace_bench.sh
# environment: BUILD_DIR (build), ITERS (300000: the recording runs),
#   REPLAY_EVENTS (4000000: the replayed trace's events, about)
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

events=0 bytes=0
for f in "$out"/send_bw.*.trace; do
  e=$("$build/rdmasan" trace stats "$f" | awk '/^events:/ {print $2}')
  b=$(stat -c %s "$f")
  events=$((events + e)) bytes=$((bytes + b))
done

# The replayed trace: the larger of the pair's, of a run sized from the
# last traced run's events per message.
replay_trace=$(ls -S "$out"/send_bw.*.trace | head -1)
replay_trace_events=$("$build/rdmasan" trace stats "$replay_trace" | awk '/^events:/ {print $2}')
replay_events=${REPLAY_EVENTS:-4000000}
iters=$(awk -v e="$replay_trace_events" -v i="$iters" -v want="$replay_events" 'BEGIN { printf "%.0f", want / (e / i) }')
rm -f "$out"/*.trace
run_send_bw "replay" --opt "trace=$out/send_bw.%p.trace" >/dev/null ||
  { echo "trace_bench: the replayed trace's run failed" >&2; exit 1; }
replay_trace=$(ls -S "$out"/send_bw.*.trace | head -1)
replay_trace_events=$("$build/rdmasan" trace stats "$replay_trace" | awk '/^events:/ {print $2}')

now() { date +%s.%N; }
replay_best=0 read_best=0
for round in 1 2 3; do
  t0=$(now)
  "$build/rdmasan" replay "$replay_trace" >/dev/null 2>&1 || { echo "trace_bench: replay failed" >&2; exit 1; }
  t1=$(now)
  replay_best=$(awk -v a="$replay_best" -v e="$replay_trace_events" -v t0="$t0" -v t1="$t1" \
    'BEGIN { r = e / (t1 - t0) / 1e6; print (r > a ? r : a) }')
  if [[ -x $build/trace_synth ]]; then
    r=$("$build/trace_synth" read "$replay_trace" 1 | awk '/M events\/s/ { for (i = 1; i < NF; ++i) if ($(i + 1) == "M") print $i }')
    read_best=$(awk -v a="$read_best" -v r="${r:-0}" 'BEGIN { print (r > a ? r : a) }')
  fi
done

awk -v p="$p" -v t="$t" -v ev="$events" -v by="$bytes" -v cev="$replay_trace_events" -v rate="$replay_best" \
  -v rd="$read_best" 'BEGIN {
  cost = (p - t) / p * 100; bpe = by / ev
  printf "trace benchmark: ib_send_bw -s 8 under full checking, best of 3 runs each\n"
  printf "%-44s %12s %10s %s\n", "measure", "value", "target", "result"
  printf "%-44s %9.3f Mpps\n", "message rate without --trace", p
  printf "%-44s %9.3f Mpps\n", "message rate with --trace", t
  printf "%-44s %10.1f %% %10s %s\n", "recording cost", cost, "<= 10 %", (cost <= 10 ? "PASS" : "MISS")
  printf "%-44s %12.1f %10s %s\n", "bytes per event (" ev " events)", bpe, "<= 16", (bpe <= 16 ? "PASS" : "MISS")
  printf "%-44s %8.2f M/s %10s %s\n", "replay with checking (" cev " events)", rate, ">= 20 M/s", (rate >= 20 ? "PASS" : "MISS")
  if (rd > 0)
    printf "%-44s %8.2f M/s %10s %s\n", "the reader alone (same trace)", rd, ">= 40 M/s", (rd >= 40 ? "PASS" : "MISS")
}'
rm -f "$out"/*.trace
