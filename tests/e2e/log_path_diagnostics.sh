#!/usr/bin/env bash
# log_path_diagnostics.sh RDMASAN OUTDIR PROGRAM: a diagnostic of the library that
# is not a finding (here: the trace file cannot be created, its path being
# a folder) goes to log_path.<pid>, like the reports, and nothing of
# rdmasan's reaches stderr (issue 10 item 17).  PROGRAM: any verbs
# program that posts work and exits 0 (a check control program).
set -uo pipefail
rdmasan=$1 out=$2 prog=$3
rm -rf "$out" && mkdir -p "$out/trace-is-a-folder" || exit 2
"$rdmasan" run --softnic_fabric=log-path-diag-$$ --log_path="$out/log" \
  --trace="$out/trace-is-a-folder" -- "$prog" >"$out/stdout" 2>"$out/stderr"
status=$?
fail() { echo "FAIL: $*"; for f in "$out"/stderr "$out"/log.*; do [[ -e $f ]] && { echo "--- $f"; cat "$f"; }; done; exit 1; }
[[ $status -eq 0 ]] || fail "${prog##*/} exited $status"
grep -q rdmasan "$out/stderr" && fail "rdmasan wrote to stderr despite log_path"
logs=("$out"/log.*)
[[ -e ${logs[0]} ]] || fail "no log_path file"
grep -qE "^==[0-9]+==rdmasan: (cannot record the trace|trace): .*trace-is-a-folder" "${logs[@]}" ||
  fail "the trace diagnostic is not in the log"
echo "PASS: the diagnostic went to ${logs[0]##*/}"
