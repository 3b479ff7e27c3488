#!/usr/bin/env bash
# run_hang.sh: run one tests/e2e/hang program under `rdmasan run` on
# softnic and check its `hang` or `crash` report against the markers in
# its source (these reports come from the watchdog and the signal
# handlers, not from events, so a replay of the trace has none of them:
# unlike run_check.sh, no replay is compared).
#
# usage: run_hang.sh PROG SOURCE --rdmasan PATH --fabric NAME [--id ID]
#                    [--no-reapply | --must-reapply] [rdmasan options...]
#
#   --id ID         the marker is `// CHECK: ID` (a source may mark other
#                   checks for other runners: run_check.sh); default: the
#                   one `// CHECK:` marker of the source
#   --no-reapply    do not re-apply the run's decision log (below)
#   --must-reapply  the run must have logged decisions, and re-applying
#                   them must find the report again
#
# Markers in SOURCE:
#   // CHECK: ID     (at the end of a code line) the report
#                    `==PID==ERROR: rdmasan: ID:`, exactly one, and none
#                    of another check; it has a frame ` in FN .../SOURCE:LINE` in its first
#                    (first) stack, LINE being this marker's line, and its SUMMARY
#                    line is `SUMMARY: rdmasan: ID SOURCE:LINE in FN`
#   // SUMMARY: RE    instead of the SUMMARY line above, one matching RE
#                    (a crash raised inside libc is summarized there)
#   // EXPECT: RE     an extended regex some line of the output matches
#   // EXPECT-NOT: RE an extended regex no line of the output matches
#   // STATUS: N      the exit status (128+n: died of signal n)
#   // SILENT         a control instead: no rdmasan report at all
#   // SIGNAL: SIG S  send SIG to the program S seconds after it printed a
#                    line `waiting` (flushed; at most 60 s are waited for
#                    it): a loaded machine may take seconds to set up
#   // NO-DONE        the program does not get to print DONE (else it must)
#   // WITHIN: S      the program ends within S seconds of its start (a
#                    hang the books prove is reported well before
#                    hang_timeout; with halt_on_error=1 that ends it)
#   // RUN-OPTS: ...  (read by CMakeLists.txt) options for `rdmasan run`
# (each marker a whole line, in column 0)
set -uo pipefail

die() { echo "run_hang: $*" >&2; exit 2; }

[[ $# -ge 2 ]] || die "usage: run_hang.sh PROG SOURCE --rdmasan PATH --fabric NAME [options]"
prog=$1 src=$2
shift 2
rdmasan="" fabric="checks-hang-$$" want_id="" reapply=auto
opts=()
while [[ $# -gt 0 ]]; do
  case $1 in
    --rdmasan) rdmasan=$2; shift 2 ;;
    --fabric) fabric=$2; shift 2 ;;
    --id) want_id=$2; shift 2 ;;
    --no-reapply) reapply=off; shift ;;
    --must-reapply) reapply=required; shift ;;
    --*) opts+=("$1"); shift ;;
    *) die "unexpected argument '$1'" ;;
  esac
done
[[ -x $prog ]] || die "no program $prog"
[[ -x $rdmasan ]] || die "no rdmasan command at $rdmasan"

base=$(basename "$src")
silent=0
grep -qx '// SILENT' "$src" && silent=1
if [[ -n $want_id ]]; then
  marker=$(grep -n -E -- "// CHECK: $want_id\$" "$src")
else
  marker=$(grep -n -E -- '// CHECK: [a-z-]+$' "$src")
fi
if [[ $silent -eq 0 ]]; then
  [[ $(wc -l <<<"$marker") -eq 1 && -n $marker ]] || die "$src wants exactly one '// CHECK: <id>' marker (or '* SILENT')"
  line=${marker%%:*}
  id=${marker##*CHECK: }
else
  [[ -z $marker ]] || die "$src: a '* SILENT' control has no '// CHECK:' marker"
fi
status_want=$(sed -n 's|^// STATUS: \([0-9]*\)$|\1|p' "$src" | head -1)
[[ -n $status_want ]] || die "$src has no '// STATUS: N'"
signal=$(sed -n 's|^// SIGNAL: \([A-Z]*\) \([0-9.]*\)$|\1 \2|p' "$src" | head -1)
need_done=1
grep -qx '// NO-DONE' "$src" && need_done=0
within=$(sed -n 's|^// WITHIN: \([0-9.]*\)$|\1|p' "$src" | head -1)

log=$(mktemp "${TMPDIR:-/tmp}/run_hang.XXXXXX") || die "mktemp failed"
trap 'rm -f "$log" "$log.decisions" "$log.again"' EXIT
decisions=$log.decisions
cmd=("$rdmasan" run "--softnic_fabric=$fabric" "${opts[@]}" "--decision_log=$decisions" -- "$prog")
# `rdmasan run` execs the program: $! is the program itself.
started=$(date +%s.%N)
"${cmd[@]}" >"$log" 2>&1 </dev/null &
pid=$!
if [[ -n $signal ]]; then
  for ((i = 0; i < 600; ++i)); do
    grep -qx waiting "$log" 2>/dev/null && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  sleep "${signal#* }"
  kill -s "${signal% *}" "$pid" 2>/dev/null
fi
# A limit in any case: the program must not outlive 40 s.  (The guard's
# output goes nowhere: ctest waits for every holder of the test's pipe.)
# (No pgrep to stop it: pgrep hangs with the ASan runtime preloaded, as the
# sanitizer builds run these tests.  A TERM interrupts the guard's wait.)
(
  exec >/dev/null 2>&1
  trap 'kill "$nap" 2>/dev/null; exit 0' TERM
  sleep 40 &
  nap=$!
  wait "$nap"
  kill -KILL "$pid"
) &
guard=$!
wait "$pid"
status=$?
elapsed=$(awk -v a="$started" -v b="$(date +%s.%N)" 'BEGIN { printf "%.2f", b - a }')
kill "$guard" 2>/dev/null
wait "$guard" 2>/dev/null

failures=()
[[ $status -eq $status_want ]] || failures+=("exit status $status, expected $status_want")
if [[ -n $within ]] && ! awk -v e="$elapsed" -v w="$within" 'BEGIN { exit !(e < w) }'; then
  failures+=("the program ended after ${elapsed} s, expected within $within s")
fi
if [[ $need_done -eq 1 ]] && ! grep -qx DONE "$log"; then failures+=("the program did not print DONE"); fi
if [[ $silent -eq 1 ]]; then
  if grep -qE '^==[0-9]+==(ERROR|WARNING): rdmasan' "$log"; then
    failures+=("a control got a report: $(grep -E '^==[0-9]+==(ERROR|WARNING): rdmasan' "$log" | head -3 | tr '\n' ' ')")
  fi
else
  n=$(grep -cE "^==[0-9]+==ERROR: rdmasan: $id: " "$log")
  [[ $n -eq 1 ]] || failures+=("$n reports of $id, expected exactly 1")
  others=$(grep -E "^==[0-9]+==(ERROR|WARNING): rdmasan: [a-z-]+: " "$log" | grep -vE "rdmasan: $id: " | head -3)
  [[ -z $others ]] || failures+=("reports of other checks: $others")
  ebase=${base//./\\.}
  # The first stack of the report: the frame lines right after its header.
  first=$(awk -v id="$id" '
    $0 ~ ("^==[0-9]+==ERROR: rdmasan: " id ": ") { on = 1; next }
    on && /^    #[0-9]+ / { print; next }
    on { exit }' "$log")
  grep -qE " in [^ ]+ ([^ ]*/)?$ebase:$line([: ]|$)" <<<"$first" ||
    failures+=("no frame $base:$line in the report's first stack")
  fn=$(grep -E " in [^ ]+ ([^ ]*/)?$ebase:$line([: ]|$)" <<<"$first" | head -1 | sed -E 's/.* in ([^ ]+) .*/\1/')
  summary_re=$(sed -n 's|^// SUMMARY: ||p' "$src" | head -1)
  if [[ -n $summary_re ]]; then
    grep -qE -- "$summary_re" "$log" || failures+=("no SUMMARY line matches: $summary_re")
  else
    grep -qE "^SUMMARY: rdmasan: $id $ebase:$line in ${fn:-[^ ]+}\$" "$log" ||
      failures+=("no 'SUMMARY: rdmasan: $id $base:$line in ${fn:-<fn>}'")
  fi
fi
while IFS= read -r re; do
  [[ -z $re ]] && continue
  grep -qE -- "$re" "$log" || failures+=("no line matches: $re")
done < <(sed -n 's|^// EXPECT: ||p' "$src")
while IFS= read -r re; do
  [[ -z $re ]] && continue
  ! grep -qE -- "$re" "$log" || failures+=("a line matches what must not be there: $re")
done < <(sed -n 's|^// EXPECT-NOT: ||p' "$src")

if [[ ${#failures[@]} -gt 0 ]]; then
  echo "---- ${cmd[*]} (exit $status)"
  cat "$log"
  echo "----"
  for f in "${failures[@]}"; do echo "run_hang: FAIL: $f"; done
  exit 1
fi
# A hang that only a fault exposes (a crash only a chaos decision exposes)
# is found again from the run's decision log alone (the fault and chaos
# options dropped, schedule= given: the log's own faults= and chaos= apply).
if [[ $silent -eq 0 && $reapply == required ]] && ! grep -qv '^#' "$decisions" 2>/dev/null; then
  echo "---- decision log:"
  cat "$decisions" 2>/dev/null
  echo "run_hang: FAIL: --must-reapply, but the run logged no decision"
  exit 1
fi
if [[ $silent -eq 0 && $reapply != off ]] && grep -qv '^#' "$decisions" 2>/dev/null; then
  again=()
  for o in "${opts[@]}"; do [[ $o == --faults=* || $o == --chaos=* ]] || again+=("$o"); done
  timeout -k 5 40 "$rdmasan" run "--softnic_fabric=$fabric-again" "${again[@]}" \
    "--schedule=$decisions" -- "$prog" >"$log.again" 2>&1 </dev/null
  again_status=$?
  if [[ $again_status -ne $status ]] || [[ $(grep -cE "^==[0-9]+==ERROR: rdmasan: $id: " "$log.again") -ne 1 ]]; then
    echo "---- re-applied from the decision log (exit $again_status):"
    cat "$decisions" "$log.again"
    echo "run_hang: FAIL: the decision log did not reproduce $id"
    exit 1
  fi
  echo "run_hang: the decision log reproduces $id: $(grep -v '^#' "$decisions" | head -1)"
fi
echo "run_hang: PASS ($(basename "$prog"): ${id:-silent}, exit $status, ${elapsed} s)"
grep -E "^==[0-9]+==ERROR: rdmasan: |^SUMMARY: rdmasan:" "$log"
exit 0
