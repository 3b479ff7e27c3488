#!/bin/sh
# find_and_reproduce.sh: a libFuzzer target with a planted bug must find it
# within a time bound, save the input, and the saved input alone must
# reproduce the finding (libFuzzer re-run on the artifact fails with the
# same report).  Then -minimize_crash on it must keep a reproducing input.
#
# FRAME_REGEX, if given, must match the reproduction's log too (a frame of
# the report with its source line).
#
# usage: find_and_reproduce.sh FUZZER REPORT_REGEX WORKDIR SECONDS [FRAME_REGEX]
set -u
[ $# -eq 4 ] || [ $# -eq 5 ] ||
  { echo "usage: find_and_reproduce.sh FUZZER REPORT_REGEX WORKDIR SECONDS [FRAME_REGEX]" >&2; exit 2; }
fuzzer=$1 regex=$2 work=$3 secs=$4 frame=${5:-}
fail() { echo "find_and_reproduce: FAIL: $*"; exit 1; }
rm -rf "$work" && mkdir -p "$work/corpus" || exit 2
start=$(date +%s)
"$fuzzer" -max_total_time="$secs" -timeout=10 -print_final_stats=1 -artifact_prefix="$work/" \
  "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?
took=$(( $(date +%s) - start ))
[ $rc -ne 0 ] || { tail -20 "$work/fuzz.log"; fail "no finding in $secs s"; }
crash=$(ls "$work"/crash-* 2>/dev/null | head -n 1)
[ -n "$crash" ] || { tail -40 "$work/fuzz.log"; fail "exit $rc but no crash-* input saved"; }
grep -Eq "$regex" "$work/fuzz.log" || { tail -60 "$work/fuzz.log"; fail "the finding is not /$regex/"; }
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/fuzz.log")
echo "found /$regex/ after ${execs:-?} executions (${took} s): $crash"
"$fuzzer" "$crash" >"$work/repro.log" 2>&1 && fail "re-running $crash passed"
grep -Eq "$regex" "$work/repro.log" || { cat "$work/repro.log"; fail "re-running $crash gave another failure"; }
if [ -n "$frame" ] && ! grep -Eq "$frame" "$work/repro.log"; then
  cat "$work/repro.log"
  fail "no frame /$frame/ in the report"
fi
echo "reproduced by: $fuzzer $crash"
"$fuzzer" -minimize_crash=1 -runs=300 -exact_artifact_path="$work/minimized" "$crash" >"$work/min.log" 2>&1 ||
  { tail -20 "$work/min.log"; fail "-minimize_crash failed"; }
[ -f "$work/minimized" ] || fail "-minimize_crash wrote no input"
"$fuzzer" "$work/minimized" >"$work/repro-min.log" 2>&1 && fail "the minimized input passed"
grep -Eq "$regex" "$work/repro-min.log" || fail "the minimized input gave another failure"
echo "minimized to $(wc -c <"$work/minimized") bytes (from $(wc -c <"$crash")), still reproducing"
echo "find_and_reproduce: PASS"
