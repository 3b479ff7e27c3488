#!/usr/bin/env bash
# chaos_campaigns.sh: the chaos freedoms' acceptance as a measurement.  For
# each freedom (chaos point) of issue 32, its planted programs and its
# near-miss controls (tests/e2e/chaos/*.c, built as chaos_<base>), runs
# `rdmasan fuzz --chaos=POINT --reorder=off --faults=none --seed=S` for
# each seed and prints, per planted program, the run that first found the
# bug (counted from 0 as runs.txt counts), the decisions its shrunk
# schedule keeps (schedule.log's non-comment lines) and whether its
# repro.sh, run alone, reports it again; per control, the findings over the
# same runs.  Then a verdict per freedom against the issue's acceptance:
# found within RUNS runs on every seed, shrunk to <= 5 decisions, replayed
# from the decision log; control silent over the same runs.
#
# A planted campaign stops at its first find: `rdmasan fuzz` has no such
# option, so the campaign goes in chunks of CHUNK runs, resumed in the same
# --out with a larger --runs (fuzz.cc: a campaign resumes where it
# stopped), until runs.txt names a finding or RUNS runs are done; a
# control makes all RUNS.  Every run is on softnic (--softnic=on: chaos
# acts on softnic only, also on a host with an RDMA NIC).
#
# usage: bench/chaos_campaigns.sh [BUILD_DIR]
# environment: BUILD_DIR (default build; the argument wins), SEEDS ("1 2 3
#              4 5"), RUNS (200), CHUNK (20), TIMEOUT (per run, 4 s),
#              POINTS (the freedoms, default all six), CONTROLS (1: run the
#              controls; 0: planted programs only)
# Output: a table on stdout; campaigns in BUILD_DIR/bench-out/chaos.
# Exit: 0 when every freedom measured meets the acceptance, 1 when one
# does not, 2 on a usage or build problem.
#
# May not: change what a campaign wrote, or call a freedom met that it
# did not measure (a program not built is listed as missing).
set -uo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${1:-${BUILD_DIR:-$repo/build}}
seeds=${SEEDS:-1 2 3 4 5}
runs=${RUNS:-200}
chunk=${CHUNK:-20}
timeout=${TIMEOUT:-4}
points=${POINTS:-place gather fence relaxed lag cq_event}
controls=${CONTROLS:-1}
max_decisions=5
rdmasan=$build/rdmasan
src_dir=$repo/tests/e2e/chaos
out=$build/bench-out/chaos
[[ -x $rdmasan ]] || { echo "chaos_campaigns: $rdmasan not found; build first" >&2; exit 2; }
mkdir -p "$out" || exit 2

# The programs: POINT KIND BASE ID [rdmasan options...]; KIND planted or
# control; ID the check a planted program's `// CHECK: ID` marker names
# (crash: its own abort()).  Options as tests/e2e/chaos/CMakeLists.txt
# gives them (a check that reports the bug without chaos turned off).
programs=(
  "place planted place_last_byte_flag crash"
  "place control place_control_write_imm -"
  "gather planted gather_send_buffer_reused crash --checks=-buffer-modified-in-flight"
  "gather control gather_control_wait_completion -"
  "fence planted fence_get_then_put crash"
  "fence planted fence_read_then_send crash --checks=-unfenced-read-use"
  "fence control fence_control_fenced_put -"
  "relaxed planted relaxed_flag_last_word crash"
  "relaxed control relaxed_control_write_imm -"
  "lag planted lag_flag_on_other_qp crash"
  "lag control lag_control_wait_data -"
  "cq_event planted cq_event_as_completion dereg-in-flight"
  "cq_event control cq_event_control_repoll -"
)

# fuzz DIR PROG N OPTS...: the campaign in DIR made (or resumed) up to N runs.
fuzz() {
  local dir=$1 prog=$2 n=$3
  shift 3
  "$rdmasan" fuzz --out="$dir" --runs="$n" --timeout="$timeout" --reorder=off --faults=none \
    --softnic=on "$@" -- "$prog" >>"$dir.log" 2>&1
}

# first_find DIR ID: the first run of runs.txt whose findings name ID.
first_find() {
  awk -v id="-$2" '$1 == "run" && $2 != "baseline" && index($0, id) { if (m == "" || $2 + 0 < m) m = $2 + 0 }
                   END { if (m != "") print m }' "$1/runs.txt" 2>/dev/null
}

# repro_ok DIR ID SRC: the finding's repro.sh, alone, reports ID again at
# the marked line and ends by itself with a non-zero status.
repro_ok() {
  local d=$1 id=$2 src=$3 line rout rst
  line=$(grep -n -- "// CHECK: $id\$" "$src" | head -1 | cut -d: -f1)
  [[ -x $d/repro.sh ]] || return 1
  rout=$(env -u RDMASAN_OPTIONS timeout -s TERM -k 5 30 "$d/repro.sh" 2>&1)
  rst=$?
  [[ $rst != 0 && $rst != 124 && $rst != 137 ]] || return 1
  grep -q -- "ERROR: rdmasan: $id" <<<"$rout" || return 1
  [[ -z $line ]] || grep -q -- "$(basename "$src"):$line" <<<"$rout"
}

declare -A verdict_found verdict_shrunk verdict_replayed verdict_silent verdict_seen
printf '%-9s %-8s %-33s %-26s %-13s %-9s %s\n' point kind program "first find per seed" decisions repro "control findings"
for entry in "${programs[@]}"; do
  read -r point kind base id opts <<<"$entry"
  [[ " $points " == *" $point "* ]] || continue
  [[ $kind == planted || $controls == 1 ]] || continue
  prog=$build/chaos_$base
  src=$src_dir/$base.c
  # shellcheck disable=SC2206
  extra=(${opts:-})
  if [[ ! -x $prog || ! -r $src ]]; then
    printf '%-9s %-8s %-33s missing (build chaos_%s)\n' "$point" "$kind" "$base" "$base"
    verdict_seen[$point]+=" missing"
    continue
  fi
  verdict_seen[$point]+=" $kind"
  firsts="" decisions="" repro="" findings=0 total_runs=0
  for s in $seeds; do
    d=$out/$base-seed$s
    rm -rf "$d" "$d.log"
    if [[ $kind == planted ]]; then
      n=0 first=""
      while [[ -z $first && $n -lt $runs ]]; do
        n=$((n + chunk > runs ? runs : n + chunk))
        fuzz "$d" "$prog" "$n" --seed="$s" --chaos="$point" "${extra[@]}"
        first=$(first_find "$d" "$id")
      done
      if [[ -z $first ]]; then
        firsts+=" -"
        decisions+=" -"
        repro+=" -"
        verdict_found[$point]=no
        continue
      fi
      firsts+=" $first"
      f=""
      for g in "$d"/[0-9]*-"$id"; do [[ -d $g ]] && { f=$g; break; }; done
      k=$( [[ -f $f/schedule.log ]] && grep -vc '^#' "$f/schedule.log")
      decisions+=" ${k:--}"
      [[ -n $k && $k -ge 1 && $k -le $max_decisions ]] || verdict_shrunk[$point]=no
      if [[ -n $f ]] && repro_ok "$f" "$id" "$src"; then repro+=" y"; else
        repro+=" n"
        verdict_replayed[$point]=no
      fi
    else
      fuzz "$d" "$prog" "$runs" --seed="$s" --chaos="$point" "${extra[@]}"
      done_runs=$(grep -c '^run [0-9]' "$d/runs.txt" 2>/dev/null)
      with=$(grep '^run [0-9]' "$d/runs.txt" 2>/dev/null | grep -vc 'findings -\( fault [^ ]*\)\?$')
      total_runs=$((total_runs + ${done_runs:-0}))
      findings=$((findings + ${with:-0}))
      [[ ${done_runs:-0} == "$runs" ]] || verdict_silent[$point]=no
    fi
  done
  if [[ $kind == planted ]]; then
    printf '%-9s %-8s %-33s %-26s %-13s %-9s\n' "$point" planted "$base" "${firsts# }" "${decisions# }" "${repro# }"
  else
    ((findings == 0)) || verdict_silent[$point]=no
    printf '%-9s %-8s %-33s %-26s %-13s %-9s %s\n' "$point" control "$base" "" "" "" "$findings in $total_runs runs"
  fi
done

echo
echo "acceptance: found within $runs runs on seeds $seeds, shrunk to <= $max_decisions decisions, replayed" \
  "from the decision log; control silent over the same runs"
status=0
for point in $points; do
  seen=${verdict_seen[$point]:-}
  if [[ -z $seen || $seen == *missing* || $seen != *planted* || ($controls == 1 && $seen != *control*) ]]; then
    printf '%-9s NOT MEASURED (programs:%s)\n' "$point" "${seen:- none}"
    status=1
    continue
  fi
  why=()
  [[ ${verdict_found[$point]:-} == no ]] && why+=("not found on every seed")
  [[ ${verdict_shrunk[$point]:-} == no ]] && why+=("not shrunk to <= $max_decisions")
  [[ ${verdict_replayed[$point]:-} == no ]] && why+=("repro.sh did not reproduce")
  [[ $controls == 1 && ${verdict_silent[$point]:-} == no ]] && why+=("control not silent")
  if ((${#why[@]} == 0)); then
    printf '%-9s MET%s\n' "$point" "$([[ $controls == 1 ]] || echo ' (controls not run)')"
  else
    printf '%-9s NOT MET: %s\n' "$point" "$(IFS=';'; echo "${why[*]}")"
    status=1
  fi
done
exit $status
