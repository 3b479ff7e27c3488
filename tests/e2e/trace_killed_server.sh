#!/usr/bin/env bash
# trace_killed_server.sh: an ib_send_bw server recording a trace is killed
# with SIGKILL in the middle of a long run; what it leaves must replay: the
# valid prefix of whole chunks, with a warning, exit 0 (no findings).
#
# usage: trace_killed_server.sh RDMASAN PORT OUTDIR
set -uo pipefail
rdmasan=$1 port=$2 out=$3
mkdir -p "$out"
fabric="e2e-trace-killed-$$"
trace="$out/killed_server.trace"
rm -f "$trace" "$trace.incomplete"
fail() { echo "trace_killed_server: FAIL: $*"; exit 1; }

listening() {
  local hex
  hex=$(printf '%04X' "$1")
  awk -v p=":$hex" 'FNR > 1 && $4 == "0A" && substr($2, length($2) - 4) == p { found = 1 }
                    END { exit !found }' /proc/net/tcp /proc/net/tcp6 2>/dev/null
}

"$rdmasan" run --softnic_fabric="$fabric" --trace="$trace" \
  -- ib_send_bw -d softnic0 -p "$port" -F -n 100000000 >"$out/killed_server.log" 2>&1 </dev/null &
server=$!
for _ in $(seq 1 100); do listening "$port" && break; sleep 0.1; done
listening "$port" || { kill -9 "$server"; fail "server never listened"; }
"$rdmasan" run --softnic_fabric="$fabric" \
  -- ib_send_bw -d softnic0 -p "$port" -F -n 100000000 127.0.0.1 >"$out/killed_client.log" 2>&1 </dev/null &
client=$!
sleep 1.5
kill -9 "$server"
wait "$server" 2>/dev/null
# The survivor must notice the dead peer and stop by itself (no hang).
for _ in $(seq 1 150); do kill -0 "$client" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$client" 2>/dev/null; then
  kill -9 "$client"
  fail "the client hung after its server died"
fi
wait "$client" 2>/dev/null

[[ -f $trace.incomplete ]] || fail "no $trace.incomplete left behind"
[[ ! -f $trace ]] || fail "a killed writer must not leave a complete-looking $trace"
"$rdmasan" trace stats "$trace.incomplete" >"$out/killed_stats.txt" 2>&1 || fail "trace stats failed: $(cat "$out/killed_stats.txt")"
events=$(awk '/^events:/ {print $2}' "$out/killed_stats.txt")
[[ ${events:-0} -gt 1000 ]] || fail "only ${events:-0} events in the prefix"
"$rdmasan" replay "$trace.incomplete" >"$out/killed_replay.txt" 2>&1
status=$?
[[ $status -eq 0 ]] || fail "replay exited $status: $(tail -5 "$out/killed_replay.txt")"
grep -q "warning" "$out/killed_replay.txt" || fail "replay of a truncated trace gave no warning"
if grep -Eq '==[0-9]+==(ERROR|WARNING): rdmasan:' "$out/killed_replay.txt"; then
  fail "the prefix replayed with findings: $(grep -E 'rdmasan: [a-z-]+:' "$out/killed_replay.txt" | head -3)"
fi
# The prefix also exports to Chrome trace-event JSON: QP tracks (thread
# names), posts, completions and occupancy counters.
"$rdmasan" trace export --format=perfetto "$trace.incomplete" >"$out/killed_trace.json" 2>/dev/null ||
  fail "trace export failed"
for want in '"ph":"M","name":"thread_name"' '"cat":"post"' '"cat":"completion"' '"ph":"C","name":"RQ occupancy' '"ph":"C","name":"CQ 0x'; do
  grep -q "$want" "$out/killed_trace.json" || fail "export lacks $want"
done
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import json,sys; d=json.load(open(sys.argv[1])); assert len(d["traceEvents"]) > 1000' \
    "$out/killed_trace.json" || fail "export is not valid JSON"
fi
rm -f "$out/killed_trace.json"
echo "trace_killed_server: PASS ($events events replayed from the prefix; exported)"
grep -h "warning" "$out/killed_replay.txt"
