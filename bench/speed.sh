#!/usr/bin/env bash
# speed.sh: issue 33's goals, each measured in one run on one machine, and
# a table of goal, figure, target and verdict.  The latency goals are ratios
# to the shared-memory floor measured in the same run.
#
#   floor     build/shm_floor: two processes bounce one cache line
#   latency   8 B SEND one way, busy-polling: build/lean_pingpong (against
#             the floor it measures in turns with its samples) and
#             ib_send_lat -s 8 t_typical (against shm_floor's), softnic
#             alone (checking=false) and full checking: <= 6x / <= 8x the
#             floor (runs floor too)
#   event     the same ping-pong blocked in ibv_get_cq_event: round trip
#             <= 10 us; ib_send_lat -e beside it
#   rate      8 B SENDs streamed, build/lean_stream: >= 5 M/s alone, >= 3 M/s
#             under full checking; ib_send_bw -s 8 beside it
#   write     64 KiB RDMA WRITE against memcpy of the same buffers
#             (build/lean_stream -m write), cached and streaming: >= 80 %;
#             beside it build/xcopy_bw, process_vm_writev (softnic's
#             cross-process copy) against memcpy, no verbs: the ceiling
#   checking  build/postpoll_bench (CPU time per pair, each mode's best
#             round): full checking <= 0.5x softnic's own post+poll pair
#             (and <= +100 ns on README's machine),
#             scheduling on <= +30 ns, reorder=random <= +80 ns over it;
#             pass-through (goal 6: options that are off); goal 6's
#             options that are off: full checking's cost in postpoll_bench
#             against build/postpoll_bench_bare, the same over the shim
#             with those options' tests compiled out
#             (interpose/off_options.h), alternated twice: zero within
#             the run-to-run spread of either
#   replay    a ~4 M-event trace recorded from ib_send_bw -s 8: rdmasan
#             replay >= 20 M events/s, the reader alone (trace_read_bench)
#             >= 40 M events/s
#   campaign  rdmasan fuzz --jobs=1 over bench/fuzz_bench.sh's small program:
#             >= 40 runs/s per core; rdmasan run start-up <= 3 ms over the
#             bare program (ibv_devices, hyperfine or a shell loop)
# Every verbs pair runs under `rdmasan run --softnic=on` on a private softnic
# fabric (tests/e2e/run_pair.sh), which fails the pair on any rdmasan
# finding: the project's own programs must run clean under full checking.
#
# usage: bench/speed.sh [--strict] [GOAL...]      (no GOAL: all of them)
#   exit 0 when every figure was measured; 1 when one could not be; with
#   --strict also 1 when a target is missed.  Needs the speed_bench target:
#   cmake --build build --target speed_bench
# environment (sizes): BUILD_DIR (build), LAT_ROUNDS (20000), LAT_REPS (5),
#   EVENT_ROUNDS (4000), PERFTEST_LAT_ITERS (20000), PERFTEST_EVENT_ITERS
#   (4000), STREAM_MSGS (1000000), PERFTEST_BW_ITERS (500000), WRITE_MSGS
#   (40000 cached, 8192 over 256 MiB streaming), POSTPOLL_PAIRS (200000),
#   REPLAY_EVENTS (4000000), FUZZ_RUNS (100), STARTUP_RUNS (100)
set -uo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
out=$build/bench-out/speed
strict=0
goals=()
all_goals=(floor latency event rate write checking replay campaign)
for a in "$@"; do
  case $a in
    --strict) strict=1 ;;
    -h | --help) sed -n '2,/^set -uo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    floor | latency | event | rate | write | checking | replay | campaign) goals+=("$a") ;;
    *) echo "speed: unknown goal '$a' (goals: ${all_goals[*]})" >&2; exit 2 ;;
  esac
done
[[ ${#goals[@]} -gt 0 ]] || goals=("${all_goals[@]}")
want() { local g; for g in "${goals[@]}"; do [[ $g == "$1" ]] && return 0; done; return 1; }
want latency && ! want floor && goals=(floor "${goals[@]}")  # latency is a ratio to the floor

lat_rounds=${LAT_ROUNDS:-20000} lat_reps=${LAT_REPS:-5} event_rounds=${EVENT_ROUNDS:-4000}
pt_lat_iters=${PERFTEST_LAT_ITERS:-20000} pt_event_iters=${PERFTEST_EVENT_ITERS:-4000}
stream_msgs=${STREAM_MSGS:-1000000} pt_bw_iters=${PERFTEST_BW_ITERS:-500000}
postpoll_pairs=${POSTPOLL_PAIRS:-200000} replay_events=${REPLAY_EVENTS:-4000000}
fuzz_runs=${FUZZ_RUNS:-100} startup_runs=${STARTUP_RUNS:-100}

need=("$build/rdmasan")
want floor && need+=("$build/shm_floor")
{ want latency || want event; } && need+=("$build/lean_pingpong")
{ want rate || want write; } && need+=("$build/lean_stream")
want write && need+=("$build/xcopy_bw")
want checking && need+=("$build/postpoll_bench" "$build/postpoll_bench_bare")
want replay && need+=("$build/trace_read_bench")
want campaign && need+=("$build/campaign_robust_control")
for f in "${need[@]}"; do
  [[ -x $f ]] || { echo "speed: $f not found; build first (cmake --build build --target speed_bench)" >&2; exit 1; }
done
rm -rf "$out" && mkdir -p "$out"
results=$out/results.tsv
: >"$results"

# shellcheck source=bench/ports.sh
source "$repo/bench/ports.sh"

# --- the table's rows ----------------------------------------------------------
# row GOAL MEASURE FIGURE TARGET VERDICT
row() { printf '%s\t%s\t%s\t%s\t%s\n' "$@" >>"$results"; }
# failed GOAL MEASURE TARGET WHY: a figure that could not be measured.
failed() {
  row "$1" "$2" "n/a" "$3" "FAILED"
  echo "speed: $2: $4" >&2
}
# holds VALUE OP LIMIT: "met" or "missed" (OP: le or ge).
holds() {
  awk -v v="$1" -v op="$2" -v l="$3" 'BEGIN { ok = op == "le" ? v + 0 <= l + 0 : v + 0 >= l + 0
                                              print ok ? "met" : "missed" }'
}
calc() { awk "BEGIN { printf \"$1\", $2 }"; }
# kv KEY FILE...: VALUE of the last "KEY=VALUE" on a "result" line.
kv() {
  local key=$1
  shift
  grep -h ': result ' "$@" 2>/dev/null | tr ' ' '\n' | awk -F= -v k="$key" '$1 == k { v = $2 } END { if (v != "") print v }'
}
now() { date +%s.%N; }

# --- pairs under rdmasan run ---------------------------------------------------
# pair NAME MODE EXPECT [RUN_PAIR_OPTION...] -- SERVER... --- CLIENT...: the
# pair under rdmasan run on a private fabric; MODE alone (checking=false)
# or full (the defaults); @PORT@ in either command becomes a free port.
# Logs: $out/NAME.MODE.{server,client,pair}.log.
pair() {
  local name=$1 mode=$2 expect=$3 port
  shift 3
  local opts=(--opt softnic=on)
  [[ $mode == alone ]] && opts+=(--opt checking=false)
  [[ $name == perftest.* ]] && opts+=(--opt "suppressions=$repo/suppressions/perftest.supp")
  while [[ $# -gt 0 && $1 != -- ]]; do opts+=("$1"); shift; done
  port=$(free_port) || { echo "speed: no free TCP port" >&2; return 1; }
  local t0 rc
  t0=$(now)
  "$repo/tests/e2e/run_pair.sh" --rdmasan "$build/rdmasan" --outdir "$out" --timeout 300 --quiet \
    "${opts[@]}" --expect "$expect" "$name.$mode" "$port" "$@" >"$out/$name.$mode.pair.log" 2>&1
  rc=$?
  echo "== $name ($mode): $(calc "%.1f" "$(now) - $t0") s"
  [[ $rc == 0 ]] || tail -20 "$out/$name.$mode.pair.log" >&2
  return "$rc"
}
# perftest_value LOG SIZE HEADER_RE COLUMN: field COLUMN of the results row
# for SIZE after a header line matching HEADER_RE (see softnic_bench.sh).
perftest_value() {
  awk -v size="$2" -v hdr="$3" -v col="$4" '
    $0 ~ hdr { in_table = 1; next }
    in_table && $1 == size && NF >= col { v = $col } END { if (v != "") print v }' "$1" 2>/dev/null
}
mode_words() { [[ $1 == alone ]] && echo "softnic alone" || echo "full checking"; }

# --- goals ---------------------------------------------------------------------
floor_ns=""
goal_floor() {
  echo "== shm_floor"
  if "$build/shm_floor" 200000 5 1000 >"$out/shm_floor.log" 2>&1; then
    floor_ns=$(kv one_way_ns "$out/shm_floor.log")
  fi
  if [[ -n $floor_ns ]]; then
    row floor "one way, one cache line between 2 processes" "$floor_ns ns" "(yardstick)" "-"
  else
    failed floor "one way, one cache line between 2 processes" "(yardstick)" "shm_floor failed: $(tail -1 "$out/shm_floor.log")"
  fi
}

# latency_row MEASURE MODE ONE_WAY_NS: against shm_floor's floor.
latency_row() {
  local limit=6
  [[ $2 == full ]] && limit=8
  if [[ -z $floor_ns ]]; then
    failed 1.latency "$1" "<= ${limit}x floor" "no floor figure to compare with"
    return
  fi
  local ratio
  ratio=$(calc "%.2f" "$3 / $floor_ns")
  row 1.latency "$1" "$(calc "%.0f" "$3") ns = ${ratio}x floor" "<= ${limit}x floor" "$(holds "$ratio" le "$limit")"
}

goal_latency() {
  local mode v f q limit log
  for mode in alone full; do
    limit=6
    [[ $mode == full ]] && limit=8
    v="" f="" q="" log=$out/lean_pingpong.$mode.client.log
    pair lean_pingpong "$mode" "result rtt_ns" -- "$build/lean_pingpong" -d softnic0 -p @PORT@ \
      --- "$build/lean_pingpong" -d softnic0 -p @PORT@ -n "$lat_rounds" -r "$lat_reps" 127.0.0.1 &&
      { v=$(kv one_way_ns "$log"); f=$(kv floor_one_way_ns "$log"); q=$(kv ratio "$log"); }
    # The verdict: the median ratio of each sample to the floor measured
    # right after it by the same two processes (lean_pingpong.c).
    if [[ -n $v && -n $f && -n $q ]]; then
      row 1.latency "lean_pingpong 8 B SEND one way, $(mode_words "$mode")" \
        "$(calc "%.0f" "$v") ns = ${q}x its floor ($(calc "%.0f" "$f") ns)" "<= ${limit}x floor" "$(holds "$q" le "$limit")"
    else
      failed 1.latency "lean_pingpong 8 B SEND one way, $(mode_words "$mode")" "<= ${limit}x floor" \
        "the pair failed (see $out/lean_pingpong.$mode.*.log)"
    fi
    v=""
    pair perftest.send_lat "$mode" "#bytes" -- ib_send_lat -d softnic0 -p @PORT@ -F -s 8 -n "$pt_lat_iters" \
      --- ib_send_lat -d softnic0 -p @PORT@ -F -s 8 -n "$pt_lat_iters" 127.0.0.1 &&
      v=$(perftest_value "$out/perftest.send_lat.$mode.client.log" 8 t_typical 5)
    if [[ -n $v ]]; then latency_row "ib_send_lat -s 8 t_typical, $(mode_words "$mode") (floor: shm_floor, apart)" "$mode" "$(calc "%.1f" "$v * 1000")"
    else failed 1.latency "ib_send_lat -s 8 t_typical, $(mode_words "$mode")" "<= ${limit}x floor" "the pair failed (see $out/perftest.send_lat.$mode.*.log)"; fi
  done
}

goal_event() {
  local mode v
  for mode in alone full; do
    v=""
    pair lean_pingpong.event "$mode" "result rtt_ns" -- "$build/lean_pingpong" -d softnic0 -p @PORT@ \
      --- "$build/lean_pingpong" -d softnic0 -p @PORT@ -e -n "$event_rounds" -r 3 127.0.0.1 &&
      v=$(kv rtt_ns "$out/lean_pingpong.event.$mode.client.log")
    if [[ -n $v ]]; then
      row 1.event "lean_pingpong -e round trip, $(mode_words "$mode")" "$(calc "%.2f" "$v / 1000") us" "<= 10 us" \
        "$(holds "$v" le 10000)"
    else
      failed 1.event "lean_pingpong -e round trip, $(mode_words "$mode")" "<= 10 us" "the pair failed (see $out/lean_pingpong.event.$mode.*.log)"
    fi
    v=""
    pair perftest.send_lat_e "$mode" "#bytes" -- ib_send_lat -d softnic0 -p @PORT@ -F -e -s 8 -n "$pt_event_iters" \
      --- ib_send_lat -d softnic0 -p @PORT@ -F -e -s 8 -n "$pt_event_iters" 127.0.0.1 &&
      v=$(perftest_value "$out/perftest.send_lat_e.$mode.client.log" 8 t_typical 5)
    if [[ -n $v ]]; then
      row 1.event "ib_send_lat -e -s 8 round trip (2 x t_typical), $(mode_words "$mode")" "$(calc "%.2f" "2 * $v") us" \
        "(beside)" "-"
    else
      failed 1.event "ib_send_lat -e -s 8, $(mode_words "$mode")" "(beside)" "the pair failed (see $out/perftest.send_lat_e.$mode.*.log)"
    fi
  done
}

goal_rate() {
  local mode v limit
  for mode in alone full; do
    limit=5
    [[ $mode == full ]] && limit=3
    v=""
    pair lean_stream.send "$mode" "result mmsgs_per_s" -- "$build/lean_stream" -d softnic0 -p @PORT@ \
      --- "$build/lean_stream" -d softnic0 -p @PORT@ -m send -n "$stream_msgs" 127.0.0.1 &&
      v=$(kv mmsgs_per_s "$out/lean_stream.send.$mode.server.log")
    if [[ -n $v ]]; then
      row 1.rate "lean_stream 8 B SEND message rate, $(mode_words "$mode")" "$v M/s" ">= $limit M/s" "$(holds "$v" ge "$limit")"
    else
      failed 1.rate "lean_stream 8 B SEND message rate, $(mode_words "$mode")" ">= $limit M/s" "the pair failed (see $out/lean_stream.send.$mode.*.log)"
    fi
    v=""
    pair perftest.send_bw "$mode" "#bytes" -- ib_send_bw -d softnic0 -p @PORT@ -F -s 8 -n "$pt_bw_iters" \
      --- ib_send_bw -d softnic0 -p @PORT@ -F -s 8 -n "$pt_bw_iters" 127.0.0.1 &&
      v=$(perftest_value "$out/perftest.send_bw.$mode.client.log" 8 "MsgRate" 5)
    if [[ -n $v ]]; then row 1.rate "ib_send_bw -s 8 message rate, $(mode_words "$mode")" "$v M/s" "(beside)" "-"
    else failed 1.rate "ib_send_bw -s 8, $(mode_words "$mode")" "(beside)" "the pair failed (see $out/perftest.send_bw.$mode.*.log)"; fi
  done
}

goal_write() {
  local mode cache v w m n words
  for cache in cached stream; do
    n=${WRITE_MSGS:-}
    [[ -n $n ]] || { [[ $cache == cached ]] && n=40000 || n=8192; }
    words="64 KiB buffers reused (cached)"
    [[ $cache == stream ]] && words="256 MiB regions walked (streaming)"
    # The kernel's cross-process copy (softnic's WRITE path) against
    # memcpy of the same buffers, no verbs: the ceiling beside the row.
    v="" w="" m=""
    if "$build/xcopy_bw" "$cache" 65536 "$n" >"$out/xcopy_bw.$cache.log" 2>&1; then
      v=$(kv ratio "$out/xcopy_bw.$cache.log")
      w=$(kv pvw_gbps "$out/xcopy_bw.$cache.log")
      m=$(kv memcpy_gbps "$out/xcopy_bw.$cache.log")
    fi
    if [[ -n $v ]]; then
      row 1.write "process_vm_writev / memcpy, $words, no verbs (the ceiling)" \
        "$(calc "%.0f" "100 * $v") % ($w / $m GB/s)" "(beside)" "-"
    else
      failed 1.write "process_vm_writev / memcpy, $words" "(beside)" "xcopy_bw failed (see $out/xcopy_bw.$cache.log)"
    fi
    for mode in alone full; do
      v="" w="" m=""
      pair "lean_stream.write_$cache" "$mode" "result write_gbps" -- "$build/lean_stream" -d softnic0 -p @PORT@ \
        --- "$build/lean_stream" -d softnic0 -p @PORT@ -m write -c "$cache" -n "$n" 127.0.0.1 && {
        v=$(kv ratio "$out/lean_stream.write_$cache.$mode.client.log")
        w=$(kv write_gbps "$out/lean_stream.write_$cache.$mode.client.log")
        m=$(kv memcpy_gbps "$out/lean_stream.write_$cache.$mode.client.log")
      }
      if [[ -n $v ]]; then
        row 1.write "64 KiB WRITE / memcpy, $words, $(mode_words "$mode")" \
          "$(calc "%.0f" "100 * $v") % ($w / $m GB/s)" ">= 80 %" "$(holds "$v" ge 0.8)"
      else
        failed 1.write "64 KiB WRITE / memcpy, $words, $(mode_words "$mode")" ">= 80 %" \
          "the pair failed (see $out/lean_stream.write_$cache.$mode.*.log)"
      fi
    done
  done
}

goal_checking() {
  echo "== postpoll_bench $postpoll_pairs"
  local log=$out/postpoll_bench.log
  "$build/postpoll_bench" "$postpoll_pairs" >"$log" 2>&1 || { tail -5 "$log" >&2; }
  # Each mode's best round by CPU time per pair (Google Benchmark's CPU
  # column, "postpoll/<mode>/round:N ... <time> <unit> <cpu> <unit> ..."):
  # on a busy VM the wall time also counts the turns other processes take.
  pp() {
    awk -v m="$1" 'index($1, "postpoll/" m "/round:") == 1 && NF >= 5 {
                     v = $4 * ($5 == "us" ? 1000 : $5 == "ms" ? 1e6 : 1)
                     if (best == "" || v < best) best = v }
                   END { if (best != "") printf "%.1f\n", best }' "${2:-$log}"
  }
  local raw pass full sched reorder
  raw=$(pp no_shim) pass=$(pp pass_through) full=$(pp full_checking) sched=$(pp scheduling)
  reorder=$(pp reorder_random)
  if [[ -z $raw || -z $full ]]; then
    failed 2.checking "full checking / softnic's post+poll pair" "<= 0.5x" "postpoll_bench gave no summary (see $log)"
    failed 3.scheduling "scheduling on, nothing injected, over full checking" "<= +30 ns" "no summary"
    failed 3.scheduling "reorder=random over full checking" "<= +80 ns" "no summary"
    failed 6.off-is-free "pass-through (checking=false) over no shim" "< +10 ns" "no summary"
    return
  fi
  local ratio
  ratio=$(calc "%.2f" "($full - $raw) / $raw")
  row 2.checking "softnic's own post+poll pair (no shim), CPU time, best of 5" "$raw ns" "(yardstick)" "-"
  row 2.checking "full checking's cost / softnic's pair" "$(calc "%+.1f" "$full - $raw") ns = ${ratio}x" "<= 0.5x" \
    "$(holds "$ratio" le 0.5)"
  row 2.checking "full checking's cost, absolute" "$(calc "%+.1f" "$full - $raw") ns" "<= +100 ns (README's machine)" \
    "$(holds "$(calc "%.3f" "$full - $raw")" le 100)"
  if [[ -n $sched ]]; then
    row 3.scheduling "scheduling on, nothing injected, over full checking" "$(calc "%+.1f" "$sched - $full") ns" \
      "<= +30 ns" "$(holds "$(calc "%.3f" "$sched - $full")" le 30)"
  else failed 3.scheduling "scheduling on, nothing injected, over full checking" "<= +30 ns" "no figure in $log"; fi
  if [[ -n $reorder ]]; then
    row 3.scheduling "reorder=random over full checking" "$(calc "%+.1f" "$reorder - $full") ns" "<= +80 ns" \
      "$(holds "$(calc "%.3f" "$reorder - $full")" le 80)"
  else failed 3.scheduling "reorder=random over full checking" "<= +80 ns" "no figure in $log"; fi
  if [[ -n $pass ]]; then
    row 6.off-is-free "pass-through (shim loaded, checking=false) over no shim" "$(calc "%+.1f" "$pass - $raw") ns" \
      "< +10 ns" "$(holds "$(calc "%.3f" "$pass - $raw")" le 9.999)"
  else failed 6.off-is-free "pass-through over no shim" "< +10 ns" "no figure in $log"; fi
  off_options_row "$log" "$(calc "%.3f" "$full - $raw")"
}

# Goal 6's options that are off (trace, faults, chaos, schedule, reorder,
# hang_timeout, the in-process fuzzer's hook): full checking's cost in
# postpoll_bench ($2, of its run in $1) against postpoll_bench_bare's, whose
# shim has those options' tests compiled out, in turns: bare, full, bare.
# Each build's figure is its best run; the spread is the larger difference
# between two runs of one build, the noise the difference is judged by.
off_options_row() {
  local what="full checking with trace, faults, chaos, schedule, hang_timeout off, over a build without their tests"
  local -a normal=("$2") bare=()
  local i log b f
  for i in 1 2 3; do
    if [[ $i == 2 ]]; then b=postpoll_bench; else b=postpoll_bench_bare; fi
    log=$out/$b.off$i.log
    "$build/$b" "$postpoll_pairs" >"$log" 2>&1 || { tail -5 "$log" >&2; }
    local fc ns
    fc=$(pp full_checking "$log") ns=$(pp no_shim "$log")
    if [[ -z $fc || -z $ns ]]; then
      failed 6.off-is-free "$what" "zero within noise" "$b gave no summary (see $log)"
      return
    fi
    f=$(calc "%.3f" "$fc - $ns")
    if [[ $b == postpoll_bench ]]; then normal+=("$f"); else bare+=("$f"); fi
  done
  local best_n best_b spread delta
  best_n=$(calc "%.3f" "(${normal[0]} < ${normal[1]} ? ${normal[0]} : ${normal[1]})")
  best_b=$(calc "%.3f" "(${bare[0]} < ${bare[1]} ? ${bare[0]} : ${bare[1]})")
  local dn db
  dn=$(calc "%.3f" "${normal[0]} - ${normal[1]}") db=$(calc "%.3f" "${bare[0]} - ${bare[1]}")
  dn=${dn#-} db=${db#-}
  spread=$(calc "%.3f" "($dn > $db ? $dn : $db)")
  delta=$(calc "%.3f" "$best_n - $best_b")
  row 6.off-is-free "$what" \
    "$(calc "%+.1f" "$delta") ns (+$(calc "%.1f" "$best_n") against +$(calc "%.1f" "$best_b") ns; spread $(calc "%.1f" "$spread") ns)" \
    "zero within noise (<= the spread, or 1 ns)" \
    "$(holds "$delta" le "$(calc "%.3f" "($spread > 1 ? $spread : 1)")")"
}

goal_replay() {
  # ib_send_bw -s 8 under full checking and --trace; its client's trace.
  # Iterations for ~REPLAY_EVENTS events: a 100,000-message run first tells
  # the events per message of this tree.
  local iters=100000 events=0 per trace pass tdir=$out/trace
  mkdir -p "$tdir"
  for pass in probe full; do
    rm -f "$tdir"/*.trace "$tdir"/*.incomplete
    pair perftest.send_bw_trace."$pass" full "#bytes" --opt "trace=$tdir/send_bw.%p.trace" \
      -- ib_send_bw -d softnic0 -p @PORT@ -F -s 8 -n "$iters" \
      --- ib_send_bw -d softnic0 -p @PORT@ -F -s 8 -n "$iters" 127.0.0.1 || {
      failed 4.replay "recording the trace (ib_send_bw -s 8 --trace)" "~$replay_events events" "the pair failed"
      return
    }
    trace=$(ls -S "$tdir"/send_bw.*.trace 2>/dev/null | head -1)
    events=$("$build/rdmasan" trace stats "$trace" 2>/dev/null | awk '/^events:/ { print $2 }')
    [[ -n $events && $events -gt 0 ]] || { failed 4.replay "recording the trace" "~$replay_events events" "no events in $trace"; return; }
    [[ $pass == full ]] && break
    per=$(calc "%.4f" "$events / $iters")
    iters=$(calc "%.0f" "$replay_events / $per")
  done
  local best=0 t0 t1 rate rc
  for _ in 1 2 3; do
    t0=$(now)
    "$build/rdmasan" replay "$trace" >"$out/replay.log" 2>&1
    rc=$?
    t1=$(now)
    [[ $rc == 0 ]] || { failed 4.replay "rdmasan replay ($events events)" ">= 20 M events/s" "exit $rc (see $out/replay.log)"; best=""; break; }
    rate=$(calc "%.2f" "$events / ($t1 - $t0) / 1e6")
    best=$(awk -v a="$best" -v b="$rate" 'BEGIN { print (b > a ? b : a) }')
  done
  [[ -n $best ]] && row 4.replay "rdmasan replay, $events-event trace of ib_send_bw -s 8 (best of 3)" "$best M events/s" \
    ">= 20 M/s" "$(holds "$best" ge 20)"
  echo "== trace_read_bench"
  local r
  r=""
  "$build/trace_read_bench" "$trace" 3 >"$out/trace_read.log" 2>&1 && r=$(kv mevents_per_s "$out/trace_read.log")
  if [[ -n $r ]]; then row 4.replay "the reader alone, same trace (best of 3)" "$r M events/s" ">= 40 M/s" "$(holds "$r" ge 40)"
  else failed 4.replay "the reader alone" ">= 40 M/s" "trace_read_bench failed (see $out/trace_read.log)"; fi
}

goal_campaign() {
  echo "== rdmasan fuzz --jobs=1 --runs=$fuzz_runs"
  local t0 t1 rc
  t0=$(now)
  "$build/rdmasan" fuzz --runs="$fuzz_runs" --jobs=1 --seed=1 --timeout=4 --shrink_time=0 \
    --faults='*:p=0.003' --reorder=random --out="$out/fuzz" -- "$build/campaign_robust_control" >"$out/fuzz.log" 2>&1
  rc=$?
  t1=$(now)
  if [[ $rc == 0 ]]; then
    local r
    r=$(calc "%.1f" "$fuzz_runs / ($t1 - $t0)")
    row 5.campaign "rdmasan fuzz --jobs=1 runs/s, campaign_robust_control" "$r runs/s" ">= 40 runs/s per core" "$(holds "$r" ge 40)"
  else
    failed 5.campaign "rdmasan fuzz --jobs=1 runs/s" ">= 40 runs/s per core" "exit $rc (see $out/fuzz.log)"
  fi
  echo "== start-up: rdmasan run -- ibv_devices against ibv_devices, $startup_runs runs each"
  local bare="" wrapped="" fabric="speed-$$"
  if command -v hyperfine >/dev/null; then
    hyperfine -N -i --warmup 5 --runs "$startup_runs" --export-json "$out/startup.json" \
      "ibv_devices" "$build/rdmasan run --softnic_fabric=$fabric -- ibv_devices" >"$out/startup.log" 2>&1 &&
      read -r bare wrapped < <(python3 -c '
import json, sys
r = json.load(open(sys.argv[1]))["results"]
if all(c == 0 for c in r[1]["exit_codes"]):  # bare ibv_devices exits 1: it sees no device
    print(r[0]["median"] * 1e3, r[1]["median"] * 1e3)' "$out/startup.json")
  else
    # a shell loop: total wall time per invocation, fork and exec included for both;
    # bare ibv_devices exits 1 here (it sees no device), rdmasan run must exit 0
    t0=$(now); for _ in $(seq "$startup_runs"); do ibv_devices >/dev/null 2>&1; done; t1=$(now)
    bare=$(calc "%.3f" "($t1 - $t0) * 1000 / $startup_runs")
    t0=$(now); for _ in $(seq "$startup_runs"); do "$build/rdmasan" run --softnic_fabric="$fabric" -- ibv_devices >/dev/null 2>&1; done; t1=$(now)
    wrapped=$(calc "%.3f" "($t1 - $t0) * 1000 / $startup_runs")
  fi
  "$build/rdmasan" run --softnic_fabric="$fabric" -- ibv_devices 2>&1 | grep -q softnic0 || wrapped=""
  if [[ -n $bare && -n $wrapped ]]; then
    local d
    d=$(calc "%.2f" "$wrapped - $bare")
    row 5.campaign "rdmasan run -- ibv_devices over ibv_devices (median)" \
      "$(calc "%+.2f" "$d") ms ($(calc "%.2f" "$wrapped") / $(calc "%.2f" "$bare") ms)" "<= +3 ms" "$(holds "$d" le 3)"
  else
    failed 5.campaign "rdmasan run start-up over the bare program" "<= +3 ms" "no figure (see $out/startup.log)"
  fi
}

# --- the run ---------------------------------------------------------------------
cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] && commit+="+changes"
load0=$(cut -d' ' -f1-3 /proc/loadavg)
start=$(now)
for g in "${all_goals[@]}"; do want "$g" && "goal_$g"; done
load1=$(cut -d' ' -f1-3 /proc/loadavg)

echo
echo "rdmasan speed (issue 33): $(date -u '+%Y-%m-%d %H:%M UTC'), commit $commit"
echo "machine: ${cpu:-unknown CPU}, $(nproc) cores, $(awk '/^MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo)," \
  "load average $load0 at the start, $load1 at the end; $(calc "%.0f" "$(now) - $start") s"
awk -v a="$load0" -v b="$load1" -v n="$(nproc)" 'BEGIN { split(a, x, " "); split(b, y, " ")
  if (x[1] > n / 2 || y[1] > n / 2)
    print "note: the machine was busy (load average over half its cores): figures move with the load; rerun on a quiet machine" }'
awk -F'\t' '
  { g[NR] = $1; m[NR] = $2; f[NR] = $3; t[NR] = $4; v[NR] = $5
    if (length($2) > w2) w2 = length($2); if (length($3) > w3) w3 = length($3); if (length($4) > w4) w4 = length($4) }
  END {
    if (w2 < 7) w2 = 7; if (w3 < 6) w3 = 6; if (w4 < 6) w4 = 6
    fmt = "| %-13s | %-" w2 "s | %-" w3 "s | %-" w4 "s | %-7s |\n"
    printf fmt, "goal", "measure", "figure", "target", "verdict"
    printf "|%s|%s|%s|%s|%s|\n", dash(15), dash(w2 + 2), dash(w3 + 2), dash(w4 + 2), dash(9)
    for (i = 1; i <= NR; i++) printf fmt, g[i], m[i], f[i], t[i], v[i]
  }
  function dash(n,   s) { s = ""; while (n-- > 0) s = s "-"; return s }' "$results"
echo "logs: $out"
missing=$(awk -F'\t' '$5 == "FAILED"' "$results" | wc -l)
missed=$(awk -F'\t' '$5 == "missed"' "$results" | wc -l)
echo "$missing figures not measured, $missed targets missed"
[[ $missing -gt 0 ]] && exit 1
[[ $strict == 1 && $missed -gt 0 ]] && exit 1
exit 0
