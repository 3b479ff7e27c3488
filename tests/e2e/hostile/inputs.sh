#!/usr/bin/env bash
# inputs.sh RDMASAN OUTDIR PROGRAM: input files rdmasan reads must be
# regular files of bounded size (issue 29 item 9): a FIFO named as
# suppressions, schedule or trace is refused at once (never waited on), a
# directory or a device is an error naming the option, and a trace that
# holds only its prologue is not a clean run (item 12).
# PROGRAM: a check program with an Error finding (exit 66).
set -uo pipefail
rdmasan=$1 out=$2/hostile_inputs prog=$3
rm -rf "$out" && mkdir -p "$out" || exit 2
fail() { echo "inputs: FAIL: $*"; exit 1; }
mkfifo "$out/fifo" || exit 2
# expect STATUS REGEX -- COMMAND...: at most 20 s (a FIFO read would block).
expect() {
  local want=$1 re=$2 got
  shift 3
  timeout 20 "$@" >"$out/out.txt" 2>&1
  got=$?
  [[ $got -ne 124 ]] || fail "$*: still waiting after 20 s"
  [[ $got -eq $want ]] || fail "$*: exit $got, not $want: $(head -c 2000 "$out/out.txt")"
  grep -Eq -- "$re" "$out/out.txt" || fail "$*: output lacks /$re/: $(head -c 2000 "$out/out.txt")"
  echo "ok: exit $got: $(grep -Eo -- "$re.*" "$out/out.txt" | head -1)"
}
fab=--softnic_fabric=e2e-hostile-inputs-$$
expect 2 "suppressions: cannot read '$out/fifo': a FIFO" -- "$rdmasan" run $fab --suppressions="$out/fifo" -- true
expect 2 "suppressions: cannot read '$out': a directory" -- "$rdmasan" run $fab --suppressions="$out" -- true
expect 2 "suppressions: cannot read '/dev/zero': a character device" -- \
  "$rdmasan" run $fab --suppressions=/dev/zero -- true
expect 2 "schedule: cannot read '$out/fifo': a FIFO" -- "$rdmasan" run $fab --schedule="$out/fifo" -- true
expect 2 "schedule: cannot read '$out': a directory" -- "$rdmasan" run $fab --schedule="$out" -- true
expect 3 "not a regular file \(a FIFO\)" -- "$rdmasan" replay "$out/fifo"
expect 3 "not a regular file \(a directory\)" -- "$rdmasan" trace stats "$out"
expect 3 "not a regular file \(a FIFO\)" -- "$rdmasan" trace dump "$out/fifo"

# A trace cut after its prologue (the recording process lost its events)
# is no evidence of a clean run.
"$rdmasan" run $fab --trace="$out/full.trace" -- "$prog" >/dev/null 2>&1
[[ $? -eq 66 ]] || fail "the recorded run did not report its finding"
head -c 16 "$out/full.trace" >"$out/prologue.trace"
expect 3 "ends at offset 16 without an end record.*; it holds no events, so there is nothing to replay" -- \
  "$rdmasan" replay "$out/prologue.trace"
expect 0 "events: 0 in 0 chunks, 16 bytes.*, truncated" -- "$rdmasan" trace stats "$out/prologue.trace"
echo "inputs: PASS"
