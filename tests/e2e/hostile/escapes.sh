#!/usr/bin/env bash
# escapes.sh RDMASAN OUTDIR PROGRAM: strings from a trace never reach the
# terminal as control sequences (issue 29 item 10).  The program is run
# from a file whose name holds ESC [2J (clear screen) and an OSC title
# sequence; `rdmasan trace stats` and `rdmasan replay` of its trace print
# that name escaped (\x1b), as `trace dump` does, never the raw bytes.
# PROGRAM: a check program with an Error finding (exit 66).
set -uo pipefail
rdmasan=$1 out=$2/hostile_escapes prog=$3
rm -rf "$out" && mkdir -p "$out" || exit 2
fail() { echo "escapes: FAIL: $*"; exit 1; }
esc=$(printf '\033')
bel=$(printf '\007')
name="$out/prog${esc}[2J${esc}]0;owned${bel}"
cp "$prog" "$name" || exit 2
"$rdmasan" run --softnic_fabric=e2e-hostile-escapes-$$ --trace="$out/t.trace" -- "$name" >"$out/run.txt" 2>&1
[[ $? -eq 66 ]] || fail "the recorded run: $(cat "$out/run.txt")"
for cmd in "trace stats" "replay" "trace dump"; do
  # shellcheck disable=SC2086
  "$rdmasan" $cmd "$out/t.trace" >"$out/out.txt" 2>&1
  if grep -q "[$esc$bel]" "$out/out.txt"; then
    fail "rdmasan $cmd printed raw control bytes: $(grep -n "[$esc$bel]" "$out/out.txt" | cat -v | head -5)"
  fi
  echo "ok: rdmasan $cmd: no raw control bytes"
done
"$rdmasan" trace stats "$out/t.trace" | grep -qF 'prog\x1b[2J\x1b]0;owned\x07' ||
  fail "trace stats does not show the name escaped: $("$rdmasan" trace stats "$out/t.trace" | head -1)"
echo "escapes: PASS"
