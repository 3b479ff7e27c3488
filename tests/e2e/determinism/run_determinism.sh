#!/usr/bin/env bash
# run_determinism.sh: a program deterministic given its schedule decides and
# reports alike, run after run.
#
# usage: run_determinism.sh PROG RDMASAN SEEDS "RDMASAN OPTIONS..."
#
# For each seed 1..SEEDS: two runs with that seed must write the same
# decision log and print the same output (reports with the pid taken out);
# for every 10th seed, a third run re-applying the first one's log
# (schedule=, no other decision option) must do and print the same again,
# its own decision log naming the same decisions.  At least one seed must
# have decided something, or the test proves nothing.
set -uo pipefail
prog=$1 rdmasan=$2 seeds=$3
read -r -a opts <<<"$4"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "run_determinism: FAIL: $*"; exit 1; }
norm() { sed -E 's/==[0-9]+==/==PID==/g; s/0x[0-9a-f]{6,}/0xADDR/g; s/decisions \([^)]*\)/decisions (SOURCE)/' "$1"; }
run() {  # run NAME OPTIONS...: output in $tmp/NAME.out, log in $tmp/NAME.log
  local name=$1; shift
  "$rdmasan" run --softnic_fabric=inproc "--decision_log=$tmp/$name.log" "$@" -- "$prog" \
    >"$tmp/$name.out" 2>&1
  echo $? >>"$tmp/$name.out"
}
decided=0
for ((seed = 1; seed <= seeds; ++seed)); do
  run a "${opts[@]}" "--seed=$seed"
  run b "${opts[@]}" "--seed=$seed"
  grep -q '^DONE$' "$tmp/a.out" || fail "seed $seed: the program did not finish: $(cat "$tmp/a.out")"
  cmp -s "$tmp/a.log" "$tmp/b.log" || fail "seed $seed: decision logs differ: $(diff "$tmp/a.log" "$tmp/b.log")"
  diff <(norm "$tmp/a.out") <(norm "$tmp/b.out") >/dev/null || fail "seed $seed: outputs differ: $(diff <(norm "$tmp/a.out") <(norm "$tmp/b.out"))"
  grep -qv '^#' "$tmp/a.log" && decided=$((decided + 1))
  if ((seed % 10 == 0)); then
    run c "--schedule=$tmp/a.log"
    diff <(norm "$tmp/a.out") <(norm "$tmp/c.out") >/dev/null ||
      fail "seed $seed: the schedule's run differs: $(diff <(norm "$tmp/a.out") <(norm "$tmp/c.out"))"
    diff <(grep -v '^#' "$tmp/a.log") <(grep -v '^#' "$tmp/c.log") >/dev/null ||
      fail "seed $seed: the schedule's run decided otherwise: $(diff <(grep -v '^#' "$tmp/a.log") <(grep -v '^#' "$tmp/c.log"))"
  fi
done
((decided > 0)) || fail "no seed decided anything"
echo "run_determinism: OK: $seeds seeds, $decided with decisions, each alike twice; every 10th re-applied alike"
tail -2 "$tmp/a.out" | head -1
