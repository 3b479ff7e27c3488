#!/usr/bin/env bash
# fuzz_bench.sh: black-box campaigns (`rdmasan fuzz`) in one run:
#   - throughput: runs/s of a campaign over a small clean program
#     (tests/e2e/fuzz/robust_control.c, faults everywhere at p=0.003) with
#     --jobs=1 and --jobs=2, against the same runs (the campaign's seeds,
#     from its runs.txt) as plain `rdmasan run --seed=S` invocations in a
#     shell loop: the campaign's own cost per run (fabric, logs, watchdog,
#     bookkeeping) shows as a ratio under 1 at --jobs=1;
#   - runs to first find: for each planted program of tests/e2e/fuzz and
#     each strategy (and the default campaign, no --faults), over SEEDS
#     campaign seeds, the index of the first run that found the planted
#     bug, read from the campaign's runs.txt and counted from 0 as
#     `rdmasan fuzz` counts runs ("-" when RUNS runs did not find it);
#   - hangs the books prove: runs/s of a campaign whose runs nearly all
#     hang (post_error_hang, --faults=post_send:p=0.2, --timeout=10).
# Shrinking is off (--shrink_time=0): only the search is measured.
#
# usage: bench/fuzz_bench.sh
# environment: BUILD_DIR (default build), RUNS (throughput runs, 100),
#              SEEDS (default "1 2 3 4 5"), FIND_RUNS (runs per find
#              campaign, 30)
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${BUILD_DIR:-$repo/build}
runs=${RUNS:-100}
seeds=${SEEDS:-1 2 3 4 5}
find_runs=${FIND_RUNS:-30}
rdmasan=$build/rdmasan
out=$build/bench-out/fuzz
for f in "$rdmasan" "$build/campaign_robust_control" "$build/campaign_order_dependent"; do
  [[ -x $f ]] || { echo "bench: $f not found; build first (cmake --build build)" >&2; exit 1; }
done
rm -rf "$out" && mkdir -p "$out"
now() { date +%s.%N; }
rate() { awk -v n="$1" -v a="$2" -v b="$3" 'BEGIN { printf "%.1f", n / (b - a) }'; }

# --- throughput -------------------------------------------------------------
prog=$build/campaign_robust_control
declare -A rate_of
for jobs in 1 2; do
  t0=$(now)
  "$rdmasan" fuzz --runs="$runs" --jobs="$jobs" --seed=1 --timeout=4 --shrink_time=0 \
    --faults='*:p=0.003' --reorder=random --out="$out/throughput-$jobs" -- "$prog" >"$out/throughput-$jobs.log" 2>&1
  rc=$?
  t1=$(now)
  [[ $rc == 0 ]] || { tail -5 "$out/throughput-$jobs.log"; echo "bench: the control campaign gave exit $rc" >&2; exit 1; }
  rate_of[$jobs]=$(rate "$runs" "$t0" "$t1")
done
# The same runs (the campaign's seeds, from its runs.txt) one after another.
mapfile -t run_seeds < <(awk '$1 == "run" { print $4 }' "$out/throughput-1/runs.txt")
t0=$(now)
for s in "${run_seeds[@]}"; do
  RDMASAN_OPTIONS="softnic_fabric=fzb$$-$s" "$rdmasan" run --seed="$s" --faults='*:p=0.003' --reorder=random \
    -- "$prog" >/dev/null 2>&1
done
t1=$(now)
loop=$(rate "${#run_seeds[@]}" "$t0" "$t1")
echo "fuzz_bench: the campaign's ${#run_seeds[@]} runs as plain \`rdmasan run --seed=S\` in a loop: $loop runs/s"
for jobs in 1 2; do
  echo "fuzz_bench: rdmasan fuzz --jobs=$jobs --runs=$runs --faults='*:p=0.003' -- robust_control: ${rate_of[$jobs]} runs/s" \
       "($(awk -v a="${rate_of[$jobs]}" -v b="$loop" 'BEGIN { printf "%.2f", a / b }') x the loop)"
done

# --- runs to first find -------------------------------------------------------
# first_find NAME ID PROGRAM fuzz-options... -> one line: the run per seed
first_find() {
  local name=$1 id=$2 prog=$build/$3
  shift 3
  local line="" found=0 total=0
  for s in $seeds; do
    local d=$out/find-$name-$s
    "$rdmasan" fuzz --runs="$find_runs" --jobs=2 --seed="$s" --timeout=2 --shrink_time=0 \
      --out="$d" "$@" -- "$prog" >"$d.log" 2>&1
    local first
    first=$(awk -v id="-$id" '$1 == "run" && $2 != "baseline" && index($0, id) { if (m == "" || $2 + 0 < m) m = $2 + 0 }
                              END { if (m != "") print m }' "$d/runs.txt" 2>/dev/null)
    total=$((total + 1))
    if [[ -n $first ]]; then found=$((found + 1)); line+=" $first"; else line+=" -"; fi
  done
  printf 'fuzz_bench: %-34s %-26s found by %d/%d seeds, first found in run:%s\n' "$name" "$id" "$found" "$total" "$line"
}
first_find order_dependent.random buffer-modified-in-flight campaign_order_dependent --strategy=random --faults=none
first_find order_dependent.pct buffer-modified-in-flight campaign_order_dependent --strategy=pct --faults=none
first_find error_path.random dereg-in-flight campaign_error_path --faults=wc.error
first_find error_path.enumerate dereg-in-flight campaign_error_path --strategy=enumerate --faults=wc.error
first_find reg_fail_crash.random crash campaign_reg_fail_crash --faults=reg_mr
first_find reg_fail_crash.enumerate crash campaign_reg_fail_crash --strategy=enumerate --faults=reg_mr
first_find post_error_hang.random hang campaign_post_error_hang --faults=post_send
first_find post_error_hang.enumerate hang campaign_post_error_hang --strategy=enumerate --faults=post_send
# The default campaign (no --faults): every 4th run orders only, the others
# BUGGIFY faults everywhere.
first_find order_dependent.default buffer-modified-in-flight campaign_order_dependent
first_find order_dependent.pct.default buffer-modified-in-flight campaign_order_dependent --strategy=pct
first_find error_path.default dereg-in-flight campaign_error_path
first_find reg_fail_crash.default crash campaign_reg_fail_crash
first_find post_error_hang.default hang campaign_post_error_hang

# --- hangs the books prove -----------------------------------------------------
# Nearly every run ignores a failed post and polls forever: each run ends at
# the proven hang's report (a quarter second into the wait), not at
# hang_timeout (--timeout/2 = 5 s).  The search only (until "shrinking").
t0=$(now)
"$rdmasan" fuzz --runs=20 --seed=1 --timeout=10 --shrink_time=0 --faults=post_send:p=0.2 \
  --out="$out/hang-rate" -- "$build/campaign_post_error_hang" 2>&1 >/dev/null |
  while IFS= read -r l; do [[ $l == *shrinking* ]] && now >"$out/hang-rate.t1"; done
[[ -f $out/hang-rate.t1 ]] || now >"$out/hang-rate.t1"
hung=$(awk '$1 == "run" && $6 == "hang"' "$out/hang-rate/runs.txt" | wc -l)
echo "fuzz_bench: rdmasan fuzz --runs=20 --timeout=10 --faults=post_send:p=0.2 -- post_error_hang:" \
     "$(rate 20 "$t0" "$(cat "$out/hang-rate.t1")") runs/s ($hung of 20 runs hang)"
